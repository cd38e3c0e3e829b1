#!/usr/bin/env bash
# deploy/examples/extra-driver/Dockerfile without a Docker engine: one more layer on the
# devicehost image, made by that Dockerfile's RUN line in the image's own root filesystem
# and environment (its ENV: the venv's bin/ first on PATH), with umoci.
#
#   extra-driver.sh BASE_TAR DRIVER_WHEEL OUT_TAR
#
# BASE_TAR is the devicehost image as e2e/images.sh packs it (an OCI layout, tag 0.1.0);
# OUT_TAR is the same layout with the driver's layer on top, under the same tag. The build
# log (stdout) is pip's and `devicehost drivers`'s output, as `docker build` shows it.
# Exits as that RUN line does: non-zero when pip refuses the driver's requirements or when
# `devicehost drivers` finds a driver that cannot be started. The tier's builds have no
# package index (PIP_NO_INDEX): everything a driver needs is in its wheel or the image.
set -euo pipefail
base="$(realpath "$1")" wheel="$(realpath "$2")" out="$3"
work="$(mktemp -d)"
root="$work/bundle/rootfs"
mounted=()
cleanup() {
  local m
  for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

mkdir "$work/layout"
tar -C "$work/layout" -xf "$base"
umoci unpack --image "$work/layout:0.1.0" "$work/bundle" >/dev/null

# What a build container has: /proc, /dev, and the build context (here, the wheel).
mkdir -p "$root/wheels"
mount --bind "$(dirname "$wheel")" "$root/wheels" && mounted+=("$root/wheels")
mount -t proc proc "$root/proc" && mounted=("$root/proc" "${mounted[@]}")
mount --bind /dev "$root/dev" && mounted=("$root/dev" "${mounted[@]}")

# The Dockerfile's RUN line, with DRIVER the wheel's path, in the image's environment (its
# config's Env, as umoci unpack wrote it to the bundle's runtime spec).
mapfile -t image_env < <(python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["process"]["env"]))' "$work/bundle/config.json")
rc=0
chroot "$root" /usr/bin/env -i "${image_env[@]}" HOME=/root PIP_NO_INDEX=1 \
  PIP_ROOT_USER_ACTION=ignore DRIVER="/wheels/$(basename "$wheel")" \
  /bin/sh -ec 'pip install --no-cache-dir --constraint /opt/devicehost/constraints.txt "${DRIVER}" \
    && devicehost drivers' || rc=$?
for m in "${mounted[@]}"; do umount "$m"; done
mounted=()
rmdir "$root/wheels"
((rc == 0)) || exit $rc

umoci repack --image "$work/layout:0.1.0" "$work/bundle"
umoci gc --layout "$work/layout"
tar -C "$work/layout" -cf "$out" .
