// Package images defines the container images drastack ships, built from
// files with internal/ociimage (no container engine): the operator, the
// example driver's kubelet plugin, and the OLM bundle. `make image` and
// `make bundle-image` write them as OCI archives (hack/imagegen); the
// real-node tests import them into the node's containerd.
package images

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"sigs.k8s.io/yaml"

	"github.com/drastack/drastack/internal/ociimage"
)

// nonRoot is the numeric user the images run as: the Deployment of
// config/manager asks for runAsNonRoot, which the kubelet can only check
// against a numeric user.
const nonRoot = "65532:65532"

// Operator is the operator's image: the manager binary at /manager (the
// command config/manager runs), as a non-root user, nothing else (the
// root file system is read-only; the webhook certificate lives in
// memory). arch is the binary's architecture (empty: this machine's).
func Operator(managerBin, arch string) (*ociimage.Built, error) {
	f, err := ociimage.FromDisk(managerBin, "/manager")
	if err != nil {
		return nil, err
	}
	return ociimage.Build(ociimage.Image{
		Architecture: arch,
		Files:        []ociimage.File{f},
		Config: ociimage.Config{
			Entrypoint: []string{"/manager"},
			User:       nonRoot,
			Labels:     map[string]string{"org.opencontainers.image.title": "drastack", "org.opencontainers.image.source": "https://github.com/drastack/drastack"},
		},
	})
}

// PluginBinary is where the example plugin's image holds the plugin.
const PluginBinary = "/usr/bin/drastack-example-plugin"

// PluginCommand is the command the example profile's DaemonSet runs; the
// kubernetes-sigs dra-example-driver image has a binary of that name, so
// one manifest runs either image.
const PluginCommand = "dra-example-kubeletplugin"

// ExamplePlugin is the example driver's kubelet plugin image: the plugin
// at PluginBinary, linked as /usr/bin/PluginCommand. It runs as root: it
// writes to the node's plugin registry and CDI folders. arch is the
// binary's architecture (empty: this machine's).
func ExamplePlugin(pluginBin, arch string) (*ociimage.Built, error) {
	f, err := ociimage.FromDisk(pluginBin, PluginBinary)
	if err != nil {
		return nil, err
	}
	return ociimage.Build(ociimage.Image{
		Architecture: arch,
		Files: []ociimage.File{
			f,
			{Path: "/usr/bin/" + PluginCommand, Mode: fs.ModeSymlink, Linkname: filepath.Base(PluginBinary)},
			{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		},
		Config: ociimage.Config{
			Entrypoint: []string{PluginBinary},
			Env:        []string{"PATH=/usr/bin"},
			Labels:     map[string]string{"org.opencontainers.image.title": "drastack-example-plugin", "org.opencontainers.image.source": "https://github.com/drastack/drastack"},
		},
	})
}

// Bundle is the OLM bundle image of a bundle folder (bundle/, written by
// make bundle): its manifests/ and metadata/ folders at /manifests and
// /metadata, and the annotations of metadata/annotations.yaml as labels,
// which is what bundle.Dockerfile builds with Docker.
func Bundle(bundleDir string) (*ociimage.Built, error) {
	data, err := os.ReadFile(filepath.Join(bundleDir, "metadata", "annotations.yaml"))
	if err != nil {
		return nil, fmt.Errorf("bundle annotations: %w", err)
	}
	var ann struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.UnmarshalStrict(data, &ann); err != nil {
		return nil, fmt.Errorf("bundle annotations %s: %w", filepath.Join(bundleDir, "metadata", "annotations.yaml"), err)
	}
	if len(ann.Annotations) == 0 {
		return nil, fmt.Errorf("bundle annotations %s: none", filepath.Join(bundleDir, "metadata", "annotations.yaml"))
	}
	var files []ociimage.File
	for _, sub := range []string{"manifests", "metadata"} {
		root := filepath.Join(bundleDir, sub)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(bundleDir, path)
			if err != nil {
				return err
			}
			f, err := ociimage.FromDisk(path, "/"+filepath.ToSlash(rel))
			if err != nil {
				return err
			}
			f.Mode = 0o644
			files = append(files, f)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", sub, err)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return ociimage.Build(ociimage.Image{Files: files, Config: ociimage.Config{Labels: ann.Annotations}})
}
