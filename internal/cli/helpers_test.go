package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// testApp is an App with real engines, a fixed clock and, for the live
// view, the given client (nil: connecting fails).
func testApp(c client.Reader) (app *App, stdout, stderr *bytes.Buffer) {
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	app = &App{
		Stdin:   strings.NewReader(""),
		Stdout:  stdout,
		Stderr:  stderr,
		Now:     func() time.Time { return testNow },
		Engines: DefaultEngines(),
		NewClient: func(string, string) (client.Reader, error) {
			if c == nil {
				return nil, errors.New("no cluster in this test")
			}
			return c, nil
		},
	}
	return app, stdout, stderr
}

// run runs kubectl-dra with args and stdin through testApp.
func run(t *testing.T, stdin string, c client.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	app, out, errOut := testApp(c)
	app.Stdin = strings.NewReader(stdin)
	code = app.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

// testNow is the clock of the live-view tests.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// decodeMap decodes a JSON object for tests that check exact keys.
func decodeMap(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("output is not a JSON object: %v\n%s", err, data)
	}
	return m
}

// keys returns the sorted keys of a decoded JSON object.
func keys(t *testing.T, v any) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("want a JSON object, got %T: %v", v, v)
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// wantKeys fails unless the object has exactly these keys.
func wantKeys(t *testing.T, what string, v any, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := keys(t, v); !slices.Equal(got, want) {
		t.Errorf("%s keys = %v, want exactly %v", what, got, want)
	}
}

// containsAll fails for every want that s does not contain.
func containsAll(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, s)
		}
	}
}

// update rewrites the golden files: go test ./internal/cli -run Golden -update
var update = flag.Bool("update", false, "rewrite testdata/golden files")

// golden compares got with testdata/golden/name.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update to accept):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// unmarshalOutput decodes -o json or -o yaml output.
func unmarshalOutput(format, out string, v any) error {
	if format == "yaml" {
		return yaml.UnmarshalStrict([]byte(out), v)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
