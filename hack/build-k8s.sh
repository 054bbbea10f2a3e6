#!/usr/bin/env bash
# Builds the local control plane from Go modules, once per machine:
# etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and kwok.
#
# The binaries are kept in a per-user cache keyed by version, because CI runs
# in a fresh clone on the same machine: a fresh clone then links the cached
# folder into bin/ in a second instead of rebuilding for ten minutes.
#
# Usage: hack/build-k8s.sh DEST   (DEST is bin/k8s/<version>)
set -euo pipefail

# shellcheck source=hack/lib/k8s-module.sh
source "$(dirname "$0")/lib/k8s-module.sh"

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
DEST=${1:?usage: build-k8s.sh DEST}
# The build steps change directory; keep DEST meaningful after they do.
case "$DEST" in /*) ;; *) DEST="$PWD/$DEST" ;; esac
CACHE=${DRASTACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/drastack}/k8s/${K8S_VERSION}
BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kwok)

if cache_complete "$CACHE" "${BINARIES[@]}"; then
  link_cache "$CACHE" "$DEST"
  exit 0
fi

mkdir -p "$CACHE"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

# --- Kubernetes: the helper module of hack/lib/k8s-module.sh.
build_kubernetes() {
  k8s_helper_module "$work/kubernetes" "$K8S_VERSION" "$STAGING_VERSION" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
  cd "$work/kubernetes"
  local ld; ld=$(k8s_ldflags "$K8S_VERSION")
  for c in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
    echo "building $c ${K8S_VERSION}"
    go build -trimpath -ldflags "${ld}" -o "$CACHE/$c" "k8s.io/kubernetes/cmd/$c"
  done
}

# --- etcd: its server module has replace directives, so `go install pkg@v`
# is refused; a helper module that requires it builds fine.
build_etcd() {
  local mod="$work/etcd"
  mkdir -p "$mod" && cd "$mod"
  go mod init drastack.local/etcd-build >/dev/null 2>&1
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  go mod edit -require "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
  go mod tidy >/dev/null
  echo "building etcd ${ETCD_VERSION}"
  go build -trimpath -ldflags "-s -w" -o "$CACHE/etcd" go.etcd.io/etcd/server/v3
}

build_kwok() {
  echo "building kwok ${KWOK_VERSION}"
  GOBIN="$CACHE" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
}

[ -x "$CACHE/etcd" ] || build_etcd
[ -x "$CACHE/kwok" ] || build_kwok
for c in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
  if [ ! -x "$CACHE/$c" ]; then build_kubernetes; break; fi
done

cache_complete "$CACHE" "${BINARIES[@]}" || { echo "control plane build incomplete in $CACHE" >&2; exit 1; }
echo "control plane ${K8S_VERSION} built in $(( $(date +%s) - start ))s into $CACHE"
link_cache "$CACHE" "$DEST"
