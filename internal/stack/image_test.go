package stack

import (
	"strings"
	"testing"
)

func TestParseImage(t *testing.T) {
	digest := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	tests := []struct {
		in, version, repository, err string
	}{
		{in: "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0", version: "v0.2.0", repository: "registry.k8s.io/dra-example-driver/dra-example-driver"},
		{in: "localhost:5000/driver", version: "latest", repository: "localhost:5000/driver"},
		{in: "localhost:5000/driver:1.2", version: "1.2"},
		{in: "driver", version: "latest", repository: "docker.io/library/driver"},
		{in: "Registry.K8s.io/lower/case:v1", version: "v1"},
		{in: "r.io/d@" + digest, version: "sha256:0123456789ab"},
		{in: "r.io/d:v3@" + digest, version: "v3"},
		{in: "Registry.K8s.io/UPPER/Case::v1@sha", err: "not a container image reference"},
		{in: "registry.k8s.io/UPPER/case:v1", err: "must be lowercase"},
		{in: "r.io/d::v1", err: "invalid reference format"},
		{in: "r.io/d@sha", err: "invalid"},
		{in: "r.io/d@sha256:abc", err: "invalid"},
		{in: "x:1\n        hostNetwork: true", err: "invalid reference format"},
		{in: "", err: "empty"},
		{in: "r.io/" + strings.Repeat("a", 600), err: "longer than"},
	}
	for _, tc := range tests {
		img, err := ParseImage(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseImage(%q) error %v, want one mentioning %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("ParseImage(%q): %v", tc.in, err)
		case tc.err == "" && img.Version() != tc.version:
			t.Errorf("ParseImage(%q).Version() = %q, want %q", tc.in, img.Version(), tc.version)
		case tc.repository != "" && img.Repository != tc.repository:
			t.Errorf("ParseImage(%q).Repository = %q, want %q", tc.in, img.Repository, tc.repository)
		}
	}
}

// FuzzParseImage: the parser never panics, and what it accepts is safe to
// substitute into YAML text and has a non-empty version.
func FuzzParseImage(f *testing.F) {
	for _, s := range []string{"registry.k8s.io/a/b:v1", "a@sha256:" + strings.Repeat("0", 64), "Registry.K8s.io/UPPER/Case::v1@sha", "x:1\n y: 2", "localhost:5000/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		img, err := ParseImage(s)
		if err != nil {
			return
		}
		if img.Ref != s || img.Version() == "" {
			t.Fatalf("ParseImage(%q) = %+v", s, img)
		}
		if strings.ContainsAny(s, " \t\r\n\"'#{}[],&*!|>%`") {
			t.Fatalf("ParseImage accepted %q, which could change YAML structure", s)
		}
	})
}
