package permissions

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SourceDirs are the folders controller-gen reads the operator's RBAC
// markers from (the Makefile's manifests target; a test keeps the two
// lists equal).
var SourceDirs = []string{
	"internal/controller",
	"internal/claimwebhook",
	"internal/webhookcert",
	"internal/admissionpolicy",
	"internal/operator",
}

// RepoRoot walks up from the working directory to the module's go.mod, so
// tests of any package find the markers.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(data), "module github.com/drastack/drastack\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod of github.com/drastack/drastack not found above the working directory")
		}
		dir = parent
	}
}

// OperatorMarkers are the markers of the operator's RBAC.
func OperatorMarkers() ([]Marker, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return ParseMarkers(root, SourceDirs...)
}
