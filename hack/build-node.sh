#!/usr/bin/env bash
# Builds what a real node of the local cluster runs, once per machine:
# kubelet and kube-proxy (Kubernetes K8S_VERSION) and containerd, ctr and
# containerd-shim-runc-v2 (CONTAINERD_VERSION). It also installs, through
# apt-get where it is missing, what the node takes from the system: runc,
# the CNI plugins (containernetworking-plugins), nft (nftables, for
# kube-proxy), a static busybox (busybox-static, the test image's shell) and
# iproute2.
#
# The binaries go to a per-user cache of their own
# (~/.cache/drastack/node/<k8s>-containerd-<version>), so that the control
# plane's cache (hack/build-k8s.sh) is never invalidated by it; DEST is
# linked to that folder.
#
# A machine without root or apt-get still gets the binaries; the missing
# packages are named, and the real-node tests skip naming them.
#
# Usage: hack/build-node.sh DEST   (DEST is bin/node/<k8s version>)
set -euo pipefail

# shellcheck source=hack/lib/k8s-module.sh
source "$(dirname "$0")/lib/k8s-module.sh"

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.2.9}
DEST=${1:?usage: build-node.sh DEST}
case "$DEST" in /*) ;; *) DEST="$PWD/$DEST" ;; esac
CACHE=${DRASTACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/drastack}/node/${K8S_VERSION}-containerd-${CONTAINERD_VERSION}
BINARIES=(kubelet kube-proxy containerd ctr containerd-shim-runc-v2)

# install_packages: apt-get install the Debian packages whose file is missing.
install_packages() {
  local want=() pkg file
  for pair in runc:/usr/sbin/runc containernetworking-plugins:/usr/lib/cni/bridge \
    nftables:/usr/sbin/nft busybox-static:/bin/busybox iproute2:/usr/sbin/ip; do
    pkg=${pair%%:*} file=${pair#*:}
    [ -x "$file" ] || want+=("$pkg")
  done
  # A dynamic busybox (package busybox) cannot run in an image without libc.
  if [ -x /bin/busybox ] && ldd /bin/busybox >/dev/null 2>&1; then
    want+=(busybox-static)
  fi
  [ ${#want[@]} -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "build-node: missing packages ${want[*]} (install them as root; the real-node tests skip meanwhile)" >&2
    return 0
  fi
  echo "build-node: apt-get install ${want[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${want[@]}" >/dev/null; then
    # The package lists may be missing or stale; a machine that cannot
    # install them still builds, and the real-node tests skip naming them.
    { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${want[@]}" >/dev/null; } ||
      echo "build-node: could not install ${want[*]}; the real-node tests skip meanwhile" >&2
  fi
}

install_packages
if cache_complete "$CACHE" "${BINARIES[@]}"; then
  link_cache "$CACHE" "$DEST"
  exit 0
fi

mkdir -p "$CACHE"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# kubelet and kube-proxy: the control plane's helper module with two more
# commands; with its build cache warm only they are compiled.
build_kubernetes() {
  local start; start=$(date +%s)
  k8s_helper_module "$work/kubernetes" "$K8S_VERSION" "$STAGING_VERSION" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
  cd "$work/kubernetes"
  local ld; ld=$(k8s_ldflags "$K8S_VERSION")
  for c in kubelet kube-proxy; do
    echo "building $c ${K8S_VERSION}"
    go build -trimpath -ldflags "${ld}" -o "$CACHE/$c" "k8s.io/kubernetes/cmd/$c"
  done
  echo "kubelet and kube-proxy built in $(( $(date +%s) - start ))s"
}

# containerd: its go.mod has no replace directives, so go install works.
# CGO off and the snapshotters that need C libraries left out; the node
# uses overlayfs.
build_containerd() {
  local start; start=$(date +%s)
  echo "building containerd ${CONTAINERD_VERSION}"
  local m=github.com/containerd/containerd/v2
  CGO_ENABLED=0 GOBIN="$CACHE" go install -trimpath -tags no_btrfs,no_devmapper,no_zfs \
    -ldflags "-s -w -X ${m}/version.Version=${CONTAINERD_VERSION} -X ${m}/version.Revision=release" \
    "${m}/cmd/containerd@${CONTAINERD_VERSION}" "${m}/cmd/ctr@${CONTAINERD_VERSION}" \
    "${m}/cmd/containerd-shim-runc-v2@${CONTAINERD_VERSION}"
  echo "containerd built in $(( $(date +%s) - start ))s"
}

[ -x "$CACHE/containerd" ] && [ -x "$CACHE/ctr" ] && [ -x "$CACHE/containerd-shim-runc-v2" ] || build_containerd
[ -x "$CACHE/kubelet" ] && [ -x "$CACHE/kube-proxy" ] || build_kubernetes

cache_complete "$CACHE" "${BINARIES[@]}" || { echo "node build incomplete in $CACHE" >&2; exit 1; }
link_cache "$CACHE" "$DEST"
