package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// certValidity is how long the certificates of a cluster are valid: longer
// than any run. The CA that signs them (internal/pki) signs the
// certificates a cluster with real nodes needs beyond envtest's: the API
// server's serving certificate (which must name the addresses pods and
// nodes reach it on) and the API server's client certificate for kubelets.
const certValidity = 7 * 24 * time.Hour

// writeFiles writes each file with mode 0600, creating its folder.
func writeFiles(files map[string][]byte) error {
	for path, data := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
