#!/usr/bin/env bash
# Builds prometheus and promtool from the Go module github.com/prometheus/prometheus,
# once per machine, for the alert rule tests (promtool test rules) and the e2e
# suite that scrapes the operator with a real Prometheus.
#
# The module is built as its own main module (a copy of the module cache's
# tree), so its go.mod, go.sum and replace directives apply as released. The
# tag remove_all_sd leaves out the cloud service discoveries (static, file and
# HTTP discovery stay): the tests name their targets, and the build is a
# fraction of the full one. Without the builtinassets tag the web UI is not
# compiled in; the HTTP API the tests use is.
#
# Like hack/build-k8s.sh, the binaries are kept in a per-user cache keyed by
# version, which a fresh clone on the same machine links into bin/.
#
# Usage: hack/build-prometheus.sh DEST   (DEST is bin/prometheus/<version>)
set -euo pipefail

# The module version v0.3XX.Y is Prometheus 3.XX.Y. Keep it equal to the
# version go.mod requires (the PromQL parser of the dashboard test).
PROMETHEUS_MODULE_VERSION=${PROMETHEUS_MODULE_VERSION:-v0.311.0}
DEST=${1:?usage: build-prometheus.sh DEST}
case "$DEST" in /*) ;; *) DEST="$PWD/$DEST" ;; esac
CACHE=${DRASTACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/drastack}/prometheus/${PROMETHEUS_MODULE_VERSION}
BINARIES=(prometheus promtool)

complete() {
  local b
  for b in "${BINARIES[@]}"; do [ -x "$CACHE/$b" ] || return 1; done
}

link_into_dest() {
  mkdir -p "$(dirname "$DEST")"
  if [ "$(readlink -f "$DEST" 2>/dev/null)" != "$(readlink -f "$CACHE")" ]; then
    rm -rf "$DEST"
    ln -s "$CACHE" "$DEST"
  fi
}

if complete; then
  link_into_dest
  exit 0
fi

mkdir -p "$CACHE"
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
start=$(date +%s)

src=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus/prometheus@${PROMETHEUS_MODULE_VERSION}" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -d "$src" ] || { echo "cannot download github.com/prometheus/prometheus@${PROMETHEUS_MODULE_VERSION}" >&2; exit 1; }
cp -r "$src" "$work/prometheus"
chmod -R u+w "$work/prometheus"
cd "$work/prometheus"
# The module ships a go.work naming folders its zip leaves out.
export GOWORK=off

# v0.311.0 -> 3.11.0
minor=${PROMETHEUS_MODULE_VERSION#v0.3}; patch=${minor#*.}; minor=${minor%%.*}
version="3.$((10#$minor)).${patch}"
ld="-s -w -X github.com/prometheus/common/version.Version=${version} -X github.com/prometheus/common/version.Branch=module"
for b in "${BINARIES[@]}"; do
  echo "building $b ${version} (module ${PROMETHEUS_MODULE_VERSION})"
  go build -mod=readonly -trimpath -tags remove_all_sd -ldflags "$ld" -o "$CACHE/$b.tmp" "./cmd/$b"
  mv "$CACHE/$b.tmp" "$CACHE/$b"
done

complete || { echo "prometheus build incomplete in $CACHE" >&2; exit 1; }
echo "prometheus and promtool ${version} built in $(( $(date +%s) - start ))s into $CACHE"
link_into_dest
