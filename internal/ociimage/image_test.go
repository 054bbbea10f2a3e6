package ociimage

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testImage() Image {
	return Image{
		Architecture: "amd64",
		Files: []File{
			{Path: "/usr/bin/tool", Mode: 0o755, Data: []byte("#!/bin/sh\necho hi\n")},
			{Path: "/bin/sh", Mode: fs.ModeSymlink, Linkname: "/usr/bin/tool"},
			{Path: "etc/motd", Mode: 0o644, Data: []byte("hello\n")},
			{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		},
		Config: Config{Entrypoint: []string{"/usr/bin/tool"}, User: "65532:65532", Env: []string{"A=b"}, Labels: map[string]string{"l": "v"}},
	}
}

func archive(t *testing.T, images ...Tagged) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteArchive(&buf, images...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	b, err := Build(testImage())
	if err != nil {
		t.Fatal(err)
	}
	a, err := ReadArchive(bytes.NewReader(archive(t, Tagged{Ref: "ghcr.io/drastack/x:v1", Image: b}, Tagged{Ref: "busybox:test", Image: b})))
	if err != nil {
		t.Fatal(err)
	}
	wantNames := map[string]string{
		"ghcr.io/drastack/x:v1":          b.Manifest.Digest,
		"docker.io/library/busybox:test": b.Manifest.Digest,
	}
	if len(a.Images) != len(wantNames) {
		t.Fatalf("images %v, want %v", a.Images, wantNames)
	}
	for n, d := range wantNames {
		if a.Images[n] != d {
			t.Errorf("image %s: digest %q, want %q", n, a.Images[n], d)
		}
	}
	c, err := a.Contents("ghcr.io/drastack/x:v1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Platform != (Platform{Architecture: "amd64", OS: "linux"}) {
		t.Errorf("platform %+v", c.Platform)
	}
	if c.Config.User != "65532:65532" || c.Config.Entrypoint[0] != "/usr/bin/tool" || c.Config.Labels["l"] != "v" || c.Config.Env[0] != "A=b" {
		t.Errorf("config %+v", c.Config)
	}
	tests := []struct {
		path     string
		mode     fs.FileMode
		data     string
		linkname string
	}{
		{"usr", fs.ModeDir | 0o755, "", ""},
		{"usr/bin", fs.ModeDir | 0o755, "", ""},
		{"usr/bin/tool", 0o755, "#!/bin/sh\necho hi\n", ""},
		{"bin", fs.ModeDir | 0o755, "", ""},
		{"bin/sh", fs.ModeSymlink | 0o777, "", "/usr/bin/tool"},
		{"etc/motd", 0o644, "hello\n", ""},
		{"tmp", fs.ModeDir | fs.ModeSticky | 0o777, "", ""},
	}
	if len(c.Files) != len(tests)+1 { // + etc
		t.Errorf("%d entries, want %d: %v", len(c.Files), len(tests)+1, c.Files)
	}
	for _, tt := range tests {
		f, ok := c.Files[tt.path]
		if !ok {
			t.Errorf("%s missing", tt.path)
			continue
		}
		if f.Mode != tt.mode || string(f.Data) != tt.data || f.Linkname != tt.linkname {
			t.Errorf("%s: mode %s data %q link %q, want %s %q %q", tt.path, f.Mode, f.Data, f.Linkname, tt.mode, tt.data, tt.linkname)
		}
	}
}

func TestBuildIsReproducible(t *testing.T) {
	a, err := Build(testImage())
	if err != nil {
		t.Fatal(err)
	}
	img := testImage()
	// Order of the input does not matter either.
	img.Files[0], img.Files[3] = img.Files[3], img.Files[0]
	b, err := Build(img)
	if err != nil {
		t.Fatal(err)
	}
	if a.Manifest.Digest != b.Manifest.Digest {
		t.Errorf("same files, different digests: %s and %s", a.Manifest.Digest, b.Manifest.Digest)
	}
	if !bytes.Equal(archive(t, Tagged{Ref: "x:1", Image: a}), archive(t, Tagged{Ref: "x:1", Image: b})) {
		t.Error("same images, different archives")
	}
	img.Files[2].Data = []byte("changed\n")
	c, err := Build(img)
	if err != nil {
		t.Fatal(err)
	}
	if c.Manifest.Digest == a.Manifest.Digest {
		t.Error("a changed file kept the digest")
	}
}

func TestBuildRejects(t *testing.T) {
	tests := []struct {
		name  string
		files []File
		want  string
	}{
		{"empty path", []File{{Path: "/", Mode: 0o644}}, "not a clean path"},
		{"dot dot", []File{{Path: "../etc/passwd", Mode: 0o644}}, "not a clean path"},
		{"unclean", []File{{Path: "a//b", Mode: 0o644}}, "not a clean path"},
		{"trailing slash", []File{{Path: "a/", Mode: fs.ModeDir | 0o755}}, "not a clean path"},
		{"duplicate", []File{{Path: "/a", Mode: 0o644}, {Path: "a", Mode: 0o644}}, "listed twice"},
		{"symlink without target", []File{{Path: "a", Mode: fs.ModeSymlink}}, "has no target"},
		{"symlink with data", []File{{Path: "a", Mode: fs.ModeSymlink, Linkname: "b", Data: []byte("x")}}, "has data"},
		{"directory with data", []File{{Path: "a", Mode: fs.ModeDir, Data: []byte("x")}}, "has data"},
		{"device", []File{{Path: "dev/null", Mode: fs.ModeDevice | 0o666}}, "neither a regular file"},
		{"file with link target", []File{{Path: "a", Mode: 0o644, Linkname: "b"}}, "has a link target"},
		{"file as parent", []File{{Path: "a", Mode: 0o644}, {Path: "a/b", Mode: 0o644}}, "to be a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(Image{Files: tt.files})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestNormaliseRef(t *testing.T) {
	tests := []struct {
		ref, name, tag, err string
	}{
		{ref: "busybox:1", name: "docker.io/library/busybox:1", tag: "1"},
		{ref: "ghcr.io/drastack/drastack:v0.1.0", name: "ghcr.io/drastack/drastack:v0.1.0", tag: "v0.1.0"},
		{ref: "localhost:5000/a/b:c", name: "localhost:5000/a/b:c", tag: "c"},
		{ref: "busybox", err: "has no tag"},
		{ref: "busybox:1@sha256:" + strings.Repeat("a", 64), err: "has a digest"},
		{ref: "Upper/Case:1", err: "must be lowercase"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			name, tag, err := NormaliseRef(tt.ref)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || name != tt.name || tag != tt.tag {
				t.Errorf("got %q %q %v, want %q %q", name, tag, err, tt.name, tt.tag)
			}
		})
	}
}

func TestWriteArchiveRejects(t *testing.T) {
	b, err := Build(testImage())
	if err != nil {
		t.Fatal(err)
	}
	for name, images := range map[string][]Tagged{
		"no image":      nil,
		"no tag":        {{Ref: "busybox", Image: b}},
		"twice":         {{Ref: "busybox:1", Image: b}, {Ref: "docker.io/library/busybox:1", Image: b}},
		"nothing built": {{Ref: "busybox:1"}},
	} {
		if err := WriteArchive(io.Discard, images...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// rewrite copies an archive, changing the entry named name with change;
// a nil result drops the entry.
func rewrite(t *testing.T, data []byte, name string, change func([]byte) []byte) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			if body = change(body); body == nil {
				continue
			}
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestReadArchiveRejectsTampering(t *testing.T) {
	b, err := Build(testImage())
	if err != nil {
		t.Fatal(err)
	}
	good := archive(t, Tagged{Ref: "x:1", Image: b})
	layer := "blobs/sha256/" + strings.TrimPrefix(b.Layer.Digest, "sha256:")
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"changed blob", rewrite(t, good, layer, func(d []byte) []byte { return append(d, 0) }), "has digest"},
		{"no marker", rewrite(t, good, "oci-layout", func([]byte) []byte { return nil }), "no oci-layout file"},
		{"no index", rewrite(t, good, "index.json", func([]byte) []byte { return nil }), "no index.json"},
		{"manifest missing", rewrite(t, good, "blobs/sha256/"+strings.TrimPrefix(b.Manifest.Digest, "sha256:"), func([]byte) []byte { return nil }), "is not in the archive"},
		{"bad index", rewrite(t, good, "index.json", func([]byte) []byte { return []byte("{") }), "index.json"},
		{"unnamed image", rewrite(t, good, "index.json", func(d []byte) []byte {
			return bytes.ReplaceAll(d, []byte(AnnotationImageName), []byte("other"))
		}), "has no io.containerd.image.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadArchive(bytes.NewReader(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestContentsChecksDiffID(t *testing.T) {
	b, err := Build(testImage())
	if err != nil {
		t.Fatal(err)
	}
	other, err := Build(Image{Files: []File{{Path: "x", Mode: 0o644}}})
	if err != nil {
		t.Fatal(err)
	}
	// The first image's manifest pointing at the other's layer.
	a, err := ReadArchive(bytes.NewReader(archive(t, Tagged{Ref: "x:1", Image: b}, Tagged{Ref: "y:1", Image: other})))
	if err != nil {
		t.Fatal(err)
	}
	a.blobs[b.Layer.Digest] = other.blobs[other.Layer.Digest]
	if _, err := a.Contents("docker.io/library/x:1"); err == nil || !strings.Contains(err.Error(), "uncompressed digest") {
		t.Errorf("error %v, want a diff ID mismatch", err)
	}
	if _, err := a.Contents("docker.io/library/z:1"); err == nil {
		t.Error("an image not in the archive has contents")
	}
}

func FuzzReadArchive(f *testing.F) {
	b, err := Build(testImage())
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteArchive(&buf, Tagged{Ref: "x:1", Image: b}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ReadArchive(bytes.NewReader(data))
		if err != nil {
			return
		}
		for name := range a.Images {
			_, _ = a.Contents(name)
		}
	})
}

func TestFromDisk(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "tool")
	if err := os.WriteFile(src, []byte("x"), 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := FromDisk(src, "/usr/bin/tool")
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != "/usr/bin/tool" || f.Mode != 0o750 || string(f.Data) != "x" {
		t.Errorf("got %+v", f)
	}
	if _, err := FromDisk(dir, "/d"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: error %v", err)
	}
	if _, err := FromDisk(filepath.Join(dir, "missing"), "/m"); err == nil {
		t.Error("a missing file: no error")
	}
}

// WriteArchiveFile writes what WriteArchive writes, and leaves no file
// behind when the archive is refused.
func TestWriteArchiveFile(t *testing.T) {
	b, err := Build(testImage())
	if err != nil {
		t.Fatal(err)
	}
	images := []Tagged{{Ref: "busybox:1", Image: b}}
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteArchiveFile(path, images...); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, archive(t, images...)) {
		t.Error("the file differs from WriteArchive's archive")
	}
	bad := filepath.Join(t.TempDir(), "bad.tar")
	if err := WriteArchiveFile(bad, Tagged{Ref: "busybox"}); err == nil {
		t.Error("an archive without a tag written")
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("a refused archive left %s: %v", bad, err)
	}
}
