#!/usr/bin/env bash
# Build the tier's four OCI images (five for `make bench-e2e`: the DRA benchmark's Go
# floor) without a Docker engine or a registry, as OCI layouts
# packed with umoci: the sandbox (pause) image, a busybox test image, devicehost's own
# image made the way deploy/Dockerfile makes it (Debian's Python, one virtual environment at
# /opt/devicehost holding the locked wheels and the project's wheels, ENTRYPOINT devicehost),
# and devicehost-acme, that image plus a third-party driver made the way
# deploy/examples/extra-driver makes it (e2e/extra-driver.sh).
# The Debian base root filesystem is cached by suite; the devicehost image is rebuilt on
# every run, since it is the code under test. Writes OUT/{pause,busybox,devicehost,
# devicehost-acme}.tar, the acme image's build log and the third-party drivers' wheels.
# Usage: images.sh OUT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
source "$here/versions.env"
CACHE="${DEVICEHOST_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/devicehost-e2e}"
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"
UV="${UV:-$repo/.tools/bin/uv}"
log() { printf '[images %s] %s\n' "$(date +%T)" "$*" >&2; }
work="$(mktemp -d "$OUT/work.XXXX")"
trap 'rm -rf "$work"' EXIT

# pack NAME TAG ROOTFS ENTRYPOINT... : an OCI layout of one layer holding ROOTFS, as a tar.
pack() {
  local name=$1 tag=$2 rootfs=$3; shift 3
  local layout="$work/$name-layout" bundle="$work/$name-bundle"
  umoci init --layout "$layout"
  umoci new --image "$layout:$tag"
  umoci unpack --image "$layout:$tag" "$bundle" >/dev/null
  rm -rf "$bundle/rootfs" && mv "$rootfs" "$bundle/rootfs"
  umoci repack --image "$layout:$tag" "$bundle"
  local args=()
  for e in "$@"; do args+=(--config.entrypoint "$e"); done
  umoci config --image "$layout:$tag" "${args[@]}" --config.workingdir / "${EXTRA_CONFIG[@]}"
  umoci gc --layout "$layout"
  tar -C "$layout" -cf "$OUT/$name.tar" .
  rm -rf "$layout" "$bundle"
}

pause_image() {
  local root="$work/pause-root"; mkdir -p "$root"
  gcc -static -O2 -o "$root/pause" "$here/images/pause.c"
  EXTRA_CONFIG=()
  pack pause 3.10 "$root" /pause
}

busybox_image() {
  local root="$work/busybox-root"; mkdir -p "$root/bin" "$root/tmp" "$root/dev" "$root/proc" "$root/sys" "$root/etc"
  cp /bin/busybox "$root/bin/busybox"
  for app in $("$root/bin/busybox" --list); do [[ -e "$root/bin/$app" ]] || ln -s busybox "$root/bin/$app"; done
  EXTRA_CONFIG=(--config.env PATH=/bin)
  pack busybox e2e "$root" /bin/sh
}

# Debian's minimal bookworm with its Python 3.11 and venv, made once and cached.
debian_base() {
  local base="$CACHE/rootfs-debian-$DEBIAN_SUITE-python3.tar"
  if [[ ! -f "$base" ]]; then
    log "debootstrap $DEBIAN_SUITE (once; cached at $base)"
    local dir="$work/debootstrap"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$DEBIAN_SUITE" "$dir" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
      || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    tar -C "$dir" -cf "$base.tmp" . && mv "$base.tmp" "$base"
    rm -rf "$dir"
  fi
  echo "$base"
}

devicehost_image() {
  local base root wheels="$work/wheels"
  base="$(debian_base)"
  root="$work/devicehost-root"; mkdir -p "$root" "$wheels"
  tar -C "$root" -xf "$base"
  # The Dockerfile's build stage: the locked third-party wheels, hash-checked, binary only,
  # and the project's own wheels (the host with its DRA extra, and every bundled driver).
  (cd "$repo" && "$UV" export --frozen --no-dev --all-packages --no-emit-workspace --extra dra --quiet --output-file "$work/locked.txt")
  "$repo/.tools/bin/pip" download --quiet --no-deps --only-binary=:all: --require-hashes \
    --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform linux_x86_64 --requirement "$work/locked.txt" --dest "$wheels"
  local projects=(devicehost devicehost-nvidia devicehost-ascend devicehost-rdma)
  for p in "${projects[@]}"; do
    (cd "$repo" && "$UV" build --quiet --wheel --package "$p" --out-dir "$wheels") 2>/dev/null
    if [[ $p == devicehost ]]; then echo "devicehost[dra]"; else echo "$p"; fi >> "$wheels/install.txt"
  done
  # The final stage: one venv made by the image's own Python, filled from those wheels only.
  mkdir -p "$root/wheels" && mount --bind "$wheels" "$root/wheels"
  local rc=0
  # As deploy/Dockerfile's final stage: the venv has pip, so a derived image can pip-install
  # one more driver (e2e/extra-driver.sh) against constraints.txt, the installed set.
  # A clean environment: the build machine's own pip settings (PIP_FIND_LINKS, …) stay out.
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore /bin/sh -ec '
    python3 -m venv /opt/devicehost
    /opt/devicehost/bin/pip install --quiet --no-cache-dir --no-index --find-links /wheels --requirement /wheels/install.txt
    /opt/devicehost/bin/pip list --format=freeze --exclude pip > /opt/devicehost/constraints.txt
    /opt/devicehost/bin/devicehost --version' || rc=$?
  umount "$root/wheels"; rmdir "$root/wheels"
  ((rc == 0)) || exit $rc
  EXTRA_CONFIG=(--config.env VIRTUAL_ENV=/opt/devicehost
    --config.env PATH=/opt/devicehost/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 --config.cmd run)
  pack devicehost 0.1.0 "$root" devicehost
}

# Third-party drivers, as their authors make them: `devicehost new-driver NAME` outside this
# workspace, built to a wheel. acme is the one the tier serves; pinned (it needs another
# protobuf) and broken (it imports a name this devicehost lacks; a missing vendor module
# would only make it unavailable) are the ones an image build must refuse
# (e2e/tests/test_extra_driver.py). Written to OUT/extra-drivers/NAME/.
extra_driver_wheels() {
  local name dir
  for name in acme pinned broken; do
    dir="$work/drivers/devicehost-$name"
    (cd "$repo" && "$UV" run --frozen --no-sync devicehost new-driver "$name" --dest "$dir") >/dev/null
    case $name in
      pinned) sed -i 's/^dependencies = \["devicehost"\]$/dependencies = ["devicehost", "protobuf==3.20.3"]/' "$dir/pyproject.toml"
              grep -q 'protobuf==3.20.3' "$dir/pyproject.toml" ;;
      broken) printf '\nfrom devicehost import ResourceSlice  # written for a devicehost that has it\n' >> "$dir/devicehost_broken/driver.py" ;;
    esac
    rm -rf "$OUT/extra-drivers/$name"
    (cd "$dir" && "$UV" build --quiet --wheel --out-dir "$OUT/extra-drivers/$name") 2>/dev/null
  done
}

# The image a user makes with deploy/examples/extra-driver: devicehost plus acme.
devicehost-acme_image() {
  extra_driver_wheels
  "$here/extra-driver.sh" "$OUT/devicehost.tar" "$OUT"/extra-drivers/acme/*.whl "$OUT/devicehost-acme.tar" \
    > "$OUT/devicehost-acme.build.log"
  grep -E '^acme +' "$OUT/devicehost-acme.build.log" >&2
}

# The Go floor for the DRA benchmark (bench/dra-floor): one static binary, nothing else.
# Built for `make bench-e2e` only (DEVICEHOST_E2E_BENCH=1); the Go build cache keeps
# rebuilds short.
dra-floor_image() {
  local root="$work/dra-floor-root"; mkdir -p "$root/tmp"
  (cd "$repo/bench/dra-floor" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local \
    go build -trimpath -ldflags "-s -w" -o "$root/dra-floor" .)
  EXTRA_CONFIG=()
  pack dra-floor e2e "$root" /dra-floor
}

images=(pause busybox devicehost devicehost-acme)
[[ ${DEVICEHOST_E2E_BENCH:-} == 1 ]] && images+=(dra-floor)
for image in "${images[@]}"; do
  t0=$SECONDS
  "${image}_image"
  log "$image.tar ($((SECONDS - t0)) s)"
done
