#!/usr/bin/env bash
# Build the cluster's components from the Go module proxy at the pinned versions, each once:
# binaries are cached outside the repository, keyed by component and version, so a warm
# machine skips this entirely. Usage: build.sh [component...] (default: all).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
CACHE="${DEVICEHOST_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/devicehost-e2e}"
export GOFLAGS="-mod=mod" GOTOOLCHAIN=local
log() { printf '[build %s] %s\n' "$(date +%T)" "$*" >&2; }

# Debian packages the tier needs, installed only when one is missing.
need_packages() {
  local pkgs=(containernetworking-plugins iptables umoci libseccomp-dev debootstrap busybox-static gcc openssl iproute2 util-linux pkg-config)
  local missing=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# A wrapper module in a scratch directory; $1 is the module name.
scratch_module() {
  local dir; dir="$(mktemp -d)"
  (cd "$dir" && go mod init "$1" >/dev/null 2>&1)
  echo "$dir"
}

done_marker() { [[ -x "$1/.complete" || -f "$1/.complete" ]]; }

build_kubernetes() {
  local out="$CACHE/kubernetes-$KUBERNETES_VERSION"
  done_marker "$out" && return 0
  log "kubernetes $KUBERNETES_VERSION"
  local dir; dir="$(scratch_module e2e.local/kubernetes)"
  local minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  local staging="v0.${KUBERNETES_VERSION#v1.}"
  (
    cd "$dir"
    go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null
    local modfile; modfile="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod"
    go mod edit -require "k8s.io/kubernetes@$KUBERNETES_VERSION"
    # Every staging module the release points at ./staging/... comes from the proxy instead.
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$modfile" | awk '{print $1}' | sort -u | while read -r m; do
      go mod edit -replace "$m=$m@$staging"
    done
    cat > tools.go <<GO
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
    go mod tidy -e >/dev/null 2>&1 || true
    go mod tidy
    local pkg=k8s.io/component-base/version
    local ld="-s -w -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
    mkdir -p "$out.tmp"
    go build -tags tools -ldflags "$ld" -o "$out.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet
  )
  rm -rf "$dir" "$out"; mv "$out.tmp" "$out"; touch "$out/.complete"
}

build_containerd() {
  local out="$CACHE/containerd-$CONTAINERD_VERSION"
  done_marker "$out" && return 0
  log "containerd $CONTAINERD_VERSION"
  local dir; dir="$(scratch_module e2e.local/containerd)"
  (
    cd "$dir"
    go get "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" >/dev/null 2>&1
    local m=github.com/containerd/containerd/v2
    mkdir -p "$out.tmp"
    go build -tags no_btrfs -ldflags "-s -w -X $m/version.Version=$CONTAINERD_VERSION" -o "$out.tmp/" \
      $m/cmd/containerd $m/cmd/containerd-shim-runc-v2 $m/cmd/ctr
  )
  rm -rf "$dir" "$out"; mv "$out.tmp" "$out"; touch "$out/.complete"
}

build_runc() {
  local out="$CACHE/runc-$RUNC_VERSION"
  done_marker "$out" && return 0
  log "runc $RUNC_VERSION"
  local src; src="$(go env GOMODCACHE)/github.com/opencontainers/runc@$RUNC_VERSION"
  go mod download "github.com/opencontainers/runc@$RUNC_VERSION"
  mkdir -p "$out.tmp"
  (cd "$src" && CGO_ENABLED=1 GOFLAGS=-mod=mod go build -buildvcs=false -tags seccomp \
     -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" -o "$out.tmp/runc" .)
  rm -rf "$out"; mv "$out.tmp" "$out"; touch "$out/.complete"
}

build_etcd() {
  local out="$CACHE/etcd-$ETCD_VERSION"
  done_marker "$out" && return 0
  log "etcd $ETCD_VERSION"
  local dir; dir="$(scratch_module e2e.local/etcd)"
  (
    cd "$dir"
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1
    mkdir -p "$out.tmp"
    go build -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3
  )
  rm -rf "$dir" "$out"; mv "$out.tmp" "$out"; touch "$out/.complete"
}

build_jaeger() {
  local out="$CACHE/jaeger-$JAEGER_VERSION"
  done_marker "$out" && return 0
  log "jaeger $JAEGER_VERSION"
  local dir; dir="$(scratch_module e2e.local/jaeger)"
  (
    cd "$dir"
    go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION" >/dev/null 2>&1
    mkdir -p "$out.tmp"
    go build -ldflags "-s -w" -o "$out.tmp/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger
  )
  rm -rf "$dir" "$out"; mv "$out.tmp" "$out"; touch "$out/.complete"
}

main() {
  command -v go >/dev/null || { echo "build.sh: needs Go (1.25 or newer) on PATH" >&2; exit 1; }
  need_packages
  mkdir -p "$CACHE"
  local comps=("$@")
  ((${#comps[@]})) || comps=(runc containerd etcd kubernetes jaeger)
  for c in "${comps[@]}"; do
    local t0=$SECONDS
    "build_$c"
    log "$c ready ($((SECONDS - t0)) s)"
  done
}
main "$@"
