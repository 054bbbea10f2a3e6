package images

import (
	"bufio"
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/ociimage"
)

// contents writes an image into an archive and reads it back.
func contents(t *testing.T, b *ociimage.Built) *ociimage.Contents {
	t.Helper()
	var buf bytes.Buffer
	if err := ociimage.WriteArchive(&buf, ociimage.Tagged{Ref: "test.local/x:1", Image: b}); err != nil {
		t.Fatal(err)
	}
	a, err := ociimage.ReadArchive(&buf)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Contents("test.local/x:1")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fakeBinary(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte("\x7fELF fake"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOperator(t *testing.T) {
	b, err := Operator(fakeBinary(t), "arm64")
	if err != nil {
		t.Fatal(err)
	}
	c := contents(t, b)
	if f := c.Files["manager"]; string(f.Data) != "\x7fELF fake" || f.Mode != 0o755 {
		t.Errorf("/manager: %+v", f)
	}
	if c.Config.User != "65532:65532" || len(c.Config.Entrypoint) != 1 || c.Config.Entrypoint[0] != "/manager" {
		t.Errorf("config %+v", c.Config)
	}
	if len(c.Files) != 1 {
		t.Errorf("files %v, want /manager alone", c.Files)
	}
	if c.Platform.Architecture != "arm64" || c.Platform.OS != "linux" {
		t.Errorf("platform %+v", c.Platform)
	}
	if _, err := Operator(filepath.Join(t.TempDir(), "missing"), ""); err == nil {
		t.Error("a missing binary was accepted")
	}
}

func TestExamplePlugin(t *testing.T) {
	b, err := ExamplePlugin(fakeBinary(t), "")
	if err != nil {
		t.Fatal(err)
	}
	c := contents(t, b)
	if f := c.Files["usr/bin/drastack-example-plugin"]; f.Mode != 0o755 {
		t.Errorf("plugin: %+v", f)
	}
	if l := c.Files["usr/bin/dra-example-kubeletplugin"]; l.Mode&fs.ModeSymlink == 0 || l.Linkname != "drastack-example-plugin" {
		t.Errorf("the profile's command: %+v", l)
	}
	if c.Config.User != "" {
		t.Errorf("the plugin writes to the node's folders, it runs as root; user %q", c.Config.User)
	}
}

// TestBundle: the image carries bundle/ as bundle.Dockerfile copies it,
// with its labels.
func TestBundle(t *testing.T) {
	b, err := Bundle("../../bundle")
	if err != nil {
		t.Fatal(err)
	}
	c := contents(t, b)
	for _, want := range []string{"metadata/annotations.yaml", "manifests/drastack.clusterserviceversion.yaml"} {
		if _, ok := c.Files[want]; !ok {
			t.Errorf("bundle image lacks /%s", want)
		}
	}
	labels := dockerfileLabels(t, "../../bundle.Dockerfile")
	if !maps.Equal(labels, c.Config.Labels) {
		t.Errorf("labels differ from bundle.Dockerfile's:\nimage %v\nDockerfile %v", c.Config.Labels, labels)
	}
	if _, err := Bundle(t.TempDir()); err == nil {
		t.Error("a folder without annotations was accepted")
	}
}

func dockerfileLabels(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "LABEL "); ok {
			k, v, _ := strings.Cut(rest, "=")
			out[k] = v
		}
	}
	return out
}

// TestReleaseReferencesAgree: the example profile deploys by default the
// plugin image that `make image` builds for the Makefile's VERSION, and
// config/manager deploys the operator image of that version.
func TestReleaseReferencesAgree(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(makefile), "\n") {
		if k, v, ok := strings.Cut(line, " ?= "); ok {
			vars[k] = v
		}
	}
	version := vars["VERSION"]
	if version == "" {
		t.Fatal("no VERSION in the Makefile")
	}
	expand := func(s string) string { return strings.ReplaceAll(s, "$(VERSION)", version) }
	if got := expand(vars["PLUGIN_IMG"]); got != driver.ExampleImage {
		t.Errorf("make image builds %s, the example profile deploys %s", got, driver.ExampleImage)
	}
	kustomization, err := os.ReadFile("../../config/manager/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	img := expand(vars["IMG"])
	name, tag, _ := strings.Cut(img, ":v")
	if !strings.Contains(string(kustomization), "newName: "+name) || !strings.Contains(string(kustomization), "newTag: v"+tag) {
		t.Errorf("config/manager does not deploy %s:\n%s", img, kustomization)
	}
}
