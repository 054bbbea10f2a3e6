package bundle

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(root, rel string) bool {
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
	return err == nil
}

func TestWriteRemovesStaleManifestsOnly(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "bundle/manifests/old_v1_service.yaml", "old")
	writeFile(t, root, "bundle/metadata/dependencies.yaml", "hand-written")
	files := Files{
		"bundle/manifests/x.clusterserviceversion.yaml": []byte("csv"),
		"bundle/metadata/annotations.yaml":              []byte("a"),
		"bundle.Dockerfile":                             []byte("FROM scratch\n"),
	}
	if err := Write(root, files); err != nil {
		t.Fatal(err)
	}
	if exists(root, "bundle/manifests/old_v1_service.yaml") {
		t.Errorf("stale manifest kept")
	}
	if !exists(root, "bundle/metadata/dependencies.yaml") {
		t.Errorf("hand-written metadata removed")
	}
	stale, err := Compare(root, files)
	if err != nil || len(stale) != 0 {
		t.Errorf("after Write, Compare = %v, %v; want nothing stale", stale, err)
	}
}

func TestCompareReportsEveryKindOfStaleness(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "bundle/manifests/same.yaml", "same")
	writeFile(t, root, "bundle/manifests/changed.yaml", "old")
	writeFile(t, root, "bundle/manifests/removed.yaml", "gone")
	files := Files{
		"bundle/manifests/same.yaml":    []byte("same"),
		"bundle/manifests/changed.yaml": []byte("new"),
		"bundle/manifests/added.yaml":   []byte("added"),
	}
	stale, err := Compare(root, files)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"bundle/manifests/added.yaml: missing",
		"bundle/manifests/changed.yaml: differs",
		"bundle/manifests/removed.yaml: not generated any more",
	}
	if !reflect.DeepEqual(stale, want) {
		t.Errorf("Compare = %q, want %q", stale, want)
	}
}

func TestReadOptionsRoundTrips(t *testing.T) {
	b, err := Generate(decodeAll(t, stream(fxAll...)), fxOptions())
	if err != nil {
		t.Fatal(err)
	}
	files, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := Write(root, files); err != nil {
		t.Fatal(err)
	}
	got, err := ReadOptions(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := fxOptions(); !reflect.DeepEqual(got, want) {
		t.Errorf("ReadOptions = %+v, want %+v", got, want)
	}
}

func TestReadOptionsNeedsExactlyOneCSV(t *testing.T) {
	root := t.TempDir()
	if _, err := ReadOptions(root); err == nil {
		t.Errorf("no bundle: want an error")
	}
	writeFile(t, root, "bundle/manifests/a.clusterserviceversion.yaml", "spec: {version: 1.0.0}\n")
	writeFile(t, root, "bundle/manifests/b.clusterserviceversion.yaml", "spec: {version: 1.0.0}\n")
	if _, err := ReadOptions(root); err == nil {
		t.Errorf("two CSVs: want an error")
	}
}
