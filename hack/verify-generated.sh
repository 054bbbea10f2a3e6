#!/usr/bin/env bash
# Fails when a generated file in the tree is stale:
#   - CRDs, RBAC and webhooks (controller-gen crd/rbac/webhook -> config/crd/bases,
#     config/rbac/role.yaml, config/webhook/manifests.yaml)
#   - deepcopy code (controller-gen object -> api/**/zz_generated.deepcopy.go)
#   - the admission policies (hack/admissionpolicies -> config/admission/policies.yaml)
#   - the OLM bundle (hack/bundlegen -> bundle/, bundle.Dockerfile)
#
# Everything is regenerated under a temporary directory and compared with
# the tree; the tree itself is never written, so uncommitted work is safe.
# The bundle is regenerated from the freshly generated CRDs and RBAC, for the
# release already committed in bundle/ (its version, image and channels).
#
# Usage: hack/verify-generated.sh   (make verify-generated)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CONTROLLER_GEN=${CONTROLLER_GEN:-$root/bin/controller-gen}
if [[ ! -x $CONTROLLER_GEN ]]; then
  echo "verify-generated: $CONTROLLER_GEN not found: run make controller-gen" >&2
  exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

stale=()

# compare GENERATED TREE: records TREE as stale unless the two are identical
# (files or directories), and prints the start of the difference.
compare() {
  local generated=$1 tree=$2
  if [[ ! -e $tree ]]; then
    stale+=("$tree (missing)")
    return
  fi
  if ! diff -r -u "$tree" "$generated" >"$tmp/diff.out" 2>&1; then
    stale+=("$tree")
    echo "--- $tree differs from what the generator writes (- tree, + generated):"
    if [[ -d $tree ]]; then
      diff -r -q "$tree" "$generated" 2>&1 | sed -e "s|$generated|(generated)|g" -e 's/^/    /' || true
    fi
    head -n 40 "$tmp/diff.out" | sed "s|$tmp/||g"
    echo
  fi
}

# 1. CRDs and RBAC, written only to the temporary directory.
"$CONTROLLER_GEN" rbac:roleName=manager-role crd webhook \
  paths="./api/..." paths="./internal/controller/..." paths="./internal/claimwebhook/..." paths="./internal/webhookcert/..." paths="./internal/admissionpolicy/..." paths="./internal/operator/..." \
  output:crd:artifacts:config="$tmp/crd" output:rbac:artifacts:config="$tmp/rbac" \
  output:webhook:artifacts:config="$tmp/webhook"
compare "$tmp/crd" config/crd/bases
for f in "$tmp"/rbac/*; do
  compare "$f" "config/rbac/$(basename "$f")"
done
for f in "$tmp"/webhook/*; do
  compare "$f" "config/webhook/$(basename "$f")"
done

# 1b. The admission policies.
go run ./hack/admissionpolicies -output "$tmp/policies.yaml"
compare "$tmp/policies.yaml" config/admission/policies.yaml

# 2. Deepcopy: the object generator writes next to the types, so run it on a
# copy of the module's api/ (api/ imports nothing else from this module).
mkdir -p "$tmp/mod/hack"
cp go.mod go.sum "$tmp/mod/"
cp hack/boilerplate.go.txt "$tmp/mod/hack/"
cp -R api "$tmp/mod/api"
(cd "$tmp/mod" && GOWORK=off "$CONTROLLER_GEN" object:headerFile="hack/boilerplate.go.txt" paths="./api/...")
compare "$tmp/mod/api" api

# 3. The bundle, from a copy of config/ holding the fresh CRDs and RBAC.
cp -R config "$tmp/config"
rm -f "$tmp"/config/crd/bases/*.yaml
cp "$tmp"/crd/*.yaml "$tmp/config/crd/bases/"
cp "$tmp"/rbac/* "$tmp/config/rbac/"
cp "$tmp"/webhook/* "$tmp/config/webhook/"
if go run ./hack/bundlegen -match . -config "$tmp/config/manifests" -output "$tmp/out" >"$tmp/bundlegen.out" 2>&1; then
  compare "$tmp/out/bundle" bundle
  compare "$tmp/out/bundle.Dockerfile" bundle.Dockerfile
else
  cat "$tmp/bundlegen.out"
  stale+=("bundle (cannot be regenerated)")
fi

if ((${#stale[@]} > 0)); then
  echo "verify-generated: stale generated files:"
  printf '  %s\n' "${stale[@]}"
  echo "run make manifests generate bundle"
  exit 1
fi
echo "verify-generated: CRDs, RBAC, deepcopy and bundle are up to date"
