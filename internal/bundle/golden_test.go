package bundle

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/want from the generator's output")

// TestGolden runs the whole pipeline (kustomize build, Generate, Files) on
// a small operator laid out like config/ and compares every byte with
// testdata/golden/want, which was reviewed by hand. Run with -update after
// an intended change and review the diff.
func TestGolden(t *testing.T) {
	objs, err := Build(filepath.Join("testdata", "golden", "input", "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Package: "gizmo", Version: "0.3.0", Image: "example.io/gizmo:v0.3.0", Channels: []string{"alpha"}}
	b, err := Generate(objs, opts)
	if err != nil {
		t.Fatal(err)
	}
	files, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join("testdata", "golden", "want")
	if *update {
		if err := Write(want, files); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := Compare(want, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("output differs from %s (rerun with -update and review):\n%s", want, strings.Join(stale, "\n"))
	}
}
