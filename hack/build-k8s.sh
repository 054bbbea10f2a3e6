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

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
DEST=${1:?usage: build-k8s.sh DEST}
# The build steps change directory; keep DEST meaningful after they do.
case "$DEST" in /*) ;; *) DEST="$PWD/$DEST" ;; esac
CACHE=${DRASTACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/drastack}/k8s/${K8S_VERSION}
BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kwok)

complete() {
  local dir=$1 b
  for b in "${BINARIES[@]}"; do [ -x "$dir/$b" ] || return 1; done
}

link_into_dest() {
  mkdir -p "$(dirname "$DEST")"
  if [ "$(readlink -f "$DEST" 2>/dev/null)" != "$(readlink -f "$CACHE")" ]; then
    rm -rf "$DEST"
    ln -s "$CACHE" "$DEST"
  fi
}

if complete "$CACHE"; then
  link_into_dest
  exit 0
fi

mkdir -p "$CACHE"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

# --- Kubernetes: a helper module that requires k8s.io/kubernetes and replaces
# every staging module (which its go.mod points at ./staging/...) with the
# published release of the same version.
build_kubernetes() {
  local mod="$work/kubernetes"
  mkdir -p "$mod" && cd "$mod"
  go mod init drastack.local/k8s-build >/dev/null 2>&1
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || { echo "cannot find go.mod of k8s.io/kubernetes@${K8S_VERSION}" >&2; exit 1; }
  go mod edit -require "k8s.io/kubernetes@${K8S_VERSION}"
  grep -oE '^[[:space:]]*k8s\.io/[A-Za-z0-9._/-]+ => \./staging/' "$gomod" | awk '{print $1}' | sort -u | while read -r m; do
    go mod edit -replace "${m}=${m}@${STAGING_VERSION}"
  done
  # The module's own go.mod pins many dependencies; copy its require block so
  # the build uses exactly the versions Kubernetes was released with.
  cp "$gomod" "$work/k8s.go.mod"
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  go mod tidy >/dev/null
  local major=${K8S_VERSION#v}; major=${major%%.*}
  local minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local ld=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    ld+=" -X ${pkg}.gitCommit=0000000000000000000000000000000000000000 -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${date}"
  done
  for c in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
    echo "building $c ${K8S_VERSION}"
    go build -trimpath -ldflags "-s -w ${ld}" -o "$CACHE/$c" "k8s.io/kubernetes/cmd/$c"
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

complete "$CACHE" || { echo "control plane build incomplete in $CACHE" >&2; exit 1; }
echo "control plane ${K8S_VERSION} built in $(( $(date +%s) - start ))s into $CACHE"
link_into_dest
