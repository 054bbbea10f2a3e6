package images

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestGoBuild(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pause")
	if err := GoBuild(context.Background(), "../..", out, "./test/cluster/cmd/pause", runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(bin, []byte("\x7fELF")) {
		t.Errorf("%s is not a Linux (ELF) binary", out)
	}
	err = GoBuild(context.Background(), "../..", out, "./no/such/package", runtime.GOARCH)
	if err == nil || !strings.Contains(err.Error(), "go build ./no/such/package") {
		t.Errorf("a package that does not exist: error %v, want one naming the build", err)
	}
}
