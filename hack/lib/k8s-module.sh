# Shared by hack/build-k8s.sh and hack/build-node.sh: Kubernetes commands are
# built from a helper module that requires k8s.io/kubernetes and replaces
# every staging module (which its go.mod points at ./staging/...) with the
# published release of the same version. Both scripts use the same module
# shape, so the second build reuses the Go build cache of the first.
#
# Source it; it defines:
#   k8s_helper_module DIR VERSION STAGING_VERSION PKG...  creates the module
#       in DIR with a tools.go importing PKG... and tidies it
#   k8s_ldflags VERSION  prints the -ldflags that stamp the release version
#   cache_complete DIR BINARY...  succeeds when every BINARY is in DIR
#   link_cache CACHE DEST  makes DEST a symbolic link to the cache folder

k8s_helper_module() {
  local mod=$1 version=$2 staging=$3; shift 3
  mkdir -p "$mod"
  (
    cd "$mod"
    go mod init drastack.local/k8s-build >/dev/null 2>&1
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [ -f "$gomod" ] || { echo "cannot find go.mod of k8s.io/kubernetes@${version}" >&2; exit 1; }
    go mod edit -require "k8s.io/kubernetes@${version}"
    grep -oE '^[[:space:]]*k8s\.io/[A-Za-z0-9._/-]+ => \./staging/' "$gomod" | awk '{print $1}' | sort -u | while read -r m; do
      go mod edit -replace "${m}=${m}@${staging}"
    done
    {
      printf '//go:build tools\n\npackage tools\n\nimport (\n'
      local p
      for p in "$@"; do printf '\t_ "%s"\n' "$p"; done
      printf ')\n'
    } > tools.go
    go mod tidy >/dev/null
  )
}

k8s_ldflags() {
  local version=$1
  local major=${version#v}; major=${major%%.*}
  local minor=${version#v*.}; minor=${minor%%.*}
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local ld="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    ld+=" -X ${pkg}.gitCommit=0000000000000000000000000000000000000000 -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${date}"
  done
  printf '%s' "$ld"
}

cache_complete() {
  local dir=$1 b; shift
  for b in "$@"; do [ -x "$dir/$b" ] || return 1; done
}

link_cache() {
  local cache=$1 dest=$2
  mkdir -p "$(dirname "$dest")"
  if [ "$(readlink -f "$dest" 2>/dev/null)" != "$(readlink -f "$cache")" ]; then
    rm -rf "$dest"
    ln -s "$cache" "$dest"
  fi
}
