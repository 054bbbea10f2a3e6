package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drastack/drastack/internal/allocator"
)

// FuzzDecode feeds arbitrary bytes through the offline input path: split
// into documents, decode strictly, group and assess the pools. It must never
// panic, and every error must be an *InputError that names a document.
func FuzzDecode(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("--- {apiVersion: v1, kind: Node, metadata: {name: n}}\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("\ufeff---\n~\n---\n[1, 2]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		docs := splitDocuments("fuzz.yaml", data)
		for i, d := range docs {
			if d.Source.Doc != i+1 || d.Source.Line < 1 || d.TextStart < 1 || d.Source.Line < d.TextStart {
				t.Fatalf("document %d has source %+v (text from line %d)", i+1, d.Source, d.TextStart)
			}
		}
		in, err := decodeDocuments(docs, io.Discard)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) || ie.Source.Doc < 1 || !strings.Contains(err.Error(), "fuzz.yaml: document ") {
				t.Fatalf("error does not name a document: %v", err)
			}
			return
		}
		pools := assessPools(in.Slices, ledgerFor(in.Claims), offlineOptions(allocator.Kubernetes137Features()))
		for _, p := range pools {
			if p.Problems == nil {
				t.Fatalf("pool %s/%s: problems must be a list, not null", p.Driver, p.Pool)
			}
		}
	})
}
