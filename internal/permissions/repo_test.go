package permissions

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/drastack/drastack/internal/admissionpolicy"
)

func operatorMarkers(t *testing.T) []Marker {
	t.Helper()
	ms, err := OperatorMarkers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 20 {
		t.Fatalf("only %d RBAC markers found: the source folders moved?", len(ms))
	}
	return ms
}

// TestSourceDirsAreControllerGens: the markers read here are the ones
// controller-gen turns into config/rbac/role.yaml.
func TestSourceDirsAreControllerGens(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var inMake []string
	for _, m := range regexp.MustCompile(`paths="\./(internal/[a-z/]+)/\.\.\."`).FindAllStringSubmatch(string(data), -1) {
		inMake = append(inMake, m[1])
	}
	want := slices.Clone(SourceDirs)
	sort.Strings(want)
	sort.Strings(inMake)
	if !slices.Equal(inMake, want) {
		t.Errorf("the Makefile's controller-gen reads %v, this package %v", inMake, want)
	}
}

// TestEveryMarkerSaysWhoNeedsIt: a permission without a comment naming the
// code that needs it (or why it is held) cannot be reviewed.
func TestEveryMarkerSaysWhoNeedsIt(t *testing.T) {
	for _, m := range operatorMarkers(t) {
		if len(strings.Fields(m.Doc)) < 3 {
			t.Errorf("%s: the marker has no comment naming the code that needs it (%q)", m.Where(), m.Doc)
		}
	}
}

// TestInstallerMayApplyExactlyTheSet: the installer's marker names every
// policy of the set and the probe, nothing else.
func TestInstallerMayApplyExactlyTheSet(t *testing.T) {
	want := []string{admissionpolicy.Probe}
	for _, p := range admissionpolicy.Set(admissionpolicy.DefaultIdentity) {
		want = append(want, p.Policy.Name)
	}
	sort.Strings(want)
	found := false
	for _, m := range operatorMarkers(t) {
		if !strings.HasPrefix(m.File, "internal/admissionpolicy/") || !slices.Contains(m.Resources, "validatingadmissionpolicies") {
			continue
		}
		found = true
		got := slices.Clone(m.ResourceNames)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s names %v, the set is %v", m.Where(), got, want)
		}
	}
	if !found {
		t.Error("no marker lets the installer apply the policies")
	}
}

// TestHeldResourcesAreFenced: a resource the operator holds write access
// to only to grant it (its markers say "Held only to grant") must be fenced by the
// held-to-grant policy, and the policy must fence nothing the operator
// writes itself. A resource the operator also writes with another verb
// cannot be: an admission policy sees a patch and an update alike.
func TestHeldResourcesAreFenced(t *testing.T) {
	heldWrites := map[schema.GroupResource]bool{}
	usedWrites := map[schema.GroupResource]bool{}
	for _, m := range operatorMarkers(t) {
		for _, g := range m.Groups {
			for _, r := range m.Resources {
				for _, v := range m.Verbs {
					if !IsWrite(v) {
						continue
					}
					gr := schema.GroupResource{Group: g, Resource: r}
					if m.HeldToGrant() {
						heldWrites[gr] = true
					} else {
						usedWrites[gr] = true
					}
				}
			}
		}
	}
	fenced := map[schema.GroupResource]bool{}
	for _, gr := range admissionpolicy.HeldResources {
		fenced[gr] = true
		if usedWrites[gr] {
			t.Errorf("%s is fenced as held to grant, but a marker without \"Held only to grant\" says the operator writes it", gr)
		}
		if !heldWrites[gr] {
			t.Errorf("%s is fenced as held to grant, but no marker holds write access to it", gr)
		}
	}
	for gr := range heldWrites {
		if !usedWrites[gr] && !fenced[gr] {
			t.Errorf("the operator holds write access to %s only to grant it: add it to admissionpolicy.HeldResources", gr)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the generated table of docs/permissions.md")

// TestDocTable keeps the table of docs/permissions.md the one the markers
// make (go test ./internal/permissions -run TestDocTable -update rewrites
// it), and makes every resource the operator may write say what fences it.
func TestDocTable(t *testing.T) {
	markers := operatorMarkers(t)
	for _, m := range markers {
		for _, g := range m.Groups {
			for _, r := range m.Resources {
				if slices.ContainsFunc(m.Verbs, IsWrite) && FencedBy(g, r) == "" {
					t.Errorf("%s: the operator may write %s/%s, and nothing says what fences it: add it to fences or unfenced in doc.go", m.Where(), g, r)
				}
			}
		}
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "docs", "permissions.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	begin, end := strings.Index(doc, DocBegin), strings.Index(doc, DocEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s lacks the markers %q and %q around the generated table", path, DocBegin, DocEnd)
	}
	want := doc[:begin+len(DocBegin)] + "\n" + DocTable(markers) + doc[end:]
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the table of %s is stale: run go test ./internal/permissions -run TestDocTable -update", path)
}
