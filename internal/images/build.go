package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
)

// GoBuild compiles a package (for example "./cmd/manager") of the module
// in dir ("" for the working directory) into a binary at out that an image
// can hold alone: static (CGO off), for linux/goarch, with trimmed paths
// and without symbols.
func GoBuild(ctx context.Context, dir, out, pkg, goarch string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, bytes.TrimSpace(output))
	}
	return nil
}
