#!/usr/bin/env bash
# Runs upstream's allocator test table on the native engine (make upstream-table).
#
# The table (k8s.io/dynamic-resource-allocation structured/internal/
# allocatortesting, the cases kube-scheduler's allocators are tested with) is
# an internal package of another module, so it cannot be imported. This
# script builds it into a Go build overlay instead, from the module cache at
# the version go.mod pins; nothing of it is written into the tree:
#   - its import of structured/internal points at
#     internal/allocator/difftest/uptable/internal, which names the same types;
#   - its error and result checks call checkError and checkResults, and its
#     interrupt test takes "unsatisfiable" for upstream's no result, no error,
#     and cases that count upstream's search steps run without that count
#     (uptable/allocatortesting/outcome.go, which also lists the cases where
#     the native engine answers otherwise on purpose, and why);
#   - go.mod requires gomega, which only the table uses.
# The adapter and the test are internal/allocator/difftest/uptable/native_test.go
# (build tag uptable, so ordinary builds skip the directory).
#
# Usage: hack/upstream-table.sh [go test flags, e.g. -run 'TestUpstreamTable/list-' -v]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mod=$(go list -m -f '{{.Dir}}' k8s.io/dynamic-resource-allocation)
if [[ -z $mod || ! -d $mod ]]; then
  go mod download k8s.io/dynamic-resource-allocation
  mod=$(go list -m -f '{{.Dir}}' k8s.io/dynamic-resource-allocation)
fi
src=$mod/structured/internal/allocatortesting
dst=$root/internal/allocator/difftest/uptable

# rewrite FILE PATTERN REPLACEMENT: sed that must match exactly once, so a
# new upstream release that moves things fails here rather than silently.
rewrite() {
  local n
  n=$(grep -c -F "$2" "$tmp/$1" || true)
  if [[ $n != 1 ]]; then
    echo "upstream-table: expected one '$2' in $src/$1, found $n" >&2
    exit 1
  fi
  sed -i "s#$(printf '%s' "$2" | sed 's/[.[\*^$#]/\\&/g')#$3#" "$tmp/$1"
}

cp "$src/allocator_testing.go" "$src/lexicographical_testing.go" "$tmp/"
chmod u+w "$tmp"/*.go
rewrite allocator_testing.go '"k8s.io/dynamic-resource-allocation/structured/internal"' '"github.com/drastack/drastack/internal/allocator/difftest/uptable/internal"'
rewrite allocator_testing.go 'g.Expect(err).To(matchError)' 'checkError(g, err, tc.expectError)'
rewrite allocator_testing.go 'g.Expect(results).To(gomega.ConsistOf(tc.expectResults...))' 'checkResults(t, g, name, results, tc.expectResults)'
rewrite allocator_testing.go 't.Logf("got error %v", err)' 't.Logf("got error %v", err); err = ignoreUnsatisfiable(err)'
rewrite allocator_testing.go 'tc.expectNumAllocateOneInvocations > 0 && !ok {' 'stepsCounted(allocator, tc.expectNumAllocateOneInvocations) > 0 \&\& !ok {'
rewrite allocator_testing.go 'if expectNumAllocateOneInvocations := tc.expectNumAllocateOneInvocations; expectNumAllocateOneInvocations > 0 {' 'if expectNumAllocateOneInvocations := stepsCounted(allocator, tc.expectNumAllocateOneInvocations); expectNumAllocateOneInvocations > 0 {'

cp go.mod go.sum "$tmp/"
for m in github.com/onsi/gomega github.com/google/go-cmp; do
  go mod edit -require="$m@$(go list -m -f '{{.Version}}' "$m")" "$tmp/go.mod"
done

cat >"$tmp/overlay.json" <<JSON
{"Replace": {
  "$root/go.mod": "$tmp/go.mod",
  "$root/go.sum": "$tmp/go.sum",
  "$dst/allocatortesting/allocator_testing.go": "$tmp/allocator_testing.go",
  "$dst/allocatortesting/lexicographical_testing.go": "$tmp/lexicographical_testing.go"
}}
JSON

# vet would run in a directory the overlay only pretends to fill.
go test -tags uptable -overlay "$tmp/overlay.json" -vet=off -count=1 ./internal/allocator/difftest/uptable/ "$@"
