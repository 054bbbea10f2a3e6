package prometheus

import (
	"fmt"
	"os"
	"path/filepath"
)

// BinaryDirEnv names the folder with the prometheus and promtool binaries;
// the Makefile sets it to bin/prometheus/<version>.
const BinaryDirEnv = "DRASTACK_PROMETHEUS_BIN"

// ModuleVersion is the version of github.com/prometheus/prometheus that
// hack/build-prometheus.sh builds the binaries from: the one go.mod
// requires for the PromQL parser (TestModuleVersion keeps them equal; the
// Makefile reads go.mod).
const ModuleVersion = "v0.311.0"

// Binary finds prometheus or promtool: in $DRASTACK_PROMETHEUS_BIN, else in
// bin/prometheus/<version> of the module root above the working
// directory, else in the per-user cache hack/build-prometheus.sh fills. The
// error says how to build them.
func Binary(name string) (string, error) {
	version := ModuleVersion
	var dirs []string
	if d := os.Getenv(BinaryDirEnv); d != "" {
		dirs = append(dirs, d)
	}
	if root, ok := moduleRoot(); ok {
		dirs = append(dirs, filepath.Join(root, "bin", "prometheus", version))
	}
	// hack/build-prometheus.sh's cache: $DRASTACK_CACHE, else
	// ${XDG_CACHE_HOME:-$HOME/.cache}/drastack.
	cache := os.Getenv("DRASTACK_CACHE")
	if cache == "" {
		if user, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(user, "drastack")
		}
	}
	if cache != "" {
		dirs = append(dirs, filepath.Join(cache, "prometheus", version))
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s %s in %v: run `make prometheus` (hack/build-prometheus.sh builds it from the Go module once per machine)", name, version, dirs)
}

// moduleRoot is the nearest folder above the working directory with a
// go.mod.
func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
