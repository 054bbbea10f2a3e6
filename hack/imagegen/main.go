// Command imagegen builds drastack's container images without a container
// engine (`make image`, `make bundle-image`): it compiles the binaries
// (static, for -goarch) and writes each image as an OCI archive into -out,
// named after the image's repository:
//
//	go run ./hack/imagegen -out bin/images \
//	  -operator ghcr.io/drastack/drastack:v0.1.0 \
//	  -plugin ghcr.io/drastack/drastack-example-plugin:v0.1.0 \
//	  -bundle ghcr.io/drastack/drastack-bundle:v0.1.0
//
// Load an archive with `docker load -i`, `podman load -i` or
// `ctr images import`; push it with
// `skopeo copy oci-archive:bin/images/drastack.tar docker://REGISTRY/drastack:TAG`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/drastack/drastack/internal/images"
	"github.com/drastack/drastack/internal/ociimage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "imagegen:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "bin/images", "folder for the OCI archives")
	operator := flag.String("operator", "", "reference of the operator image to build (empty: skip)")
	plugin := flag.String("plugin", "", "reference of the example plugin image to build (empty: skip)")
	bundle := flag.String("bundle", "", "reference of the OLM bundle image to build (empty: skip)")
	bundleDir := flag.String("bundle-dir", "bundle", "the bundle folder (make bundle)")
	goarch := flag.String("goarch", runtime.GOARCH, "architecture of the binaries")
	flag.Parse()
	if *operator == "" && *plugin == "" && *bundle == "" {
		return fmt.Errorf("nothing to build: give -operator, -plugin or -bundle")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "imagegen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	type job struct {
		ref   string
		pkg   string // binary to compile, if any
		build func(bin, arch string) (*ociimage.Built, error)
	}
	jobs := []job{
		{*operator, "./cmd/manager", images.Operator},
		{*plugin, "./cmd/drastack-example-plugin", images.ExamplePlugin},
		{*bundle, "", func(string, string) (*ociimage.Built, error) { return images.Bundle(*bundleDir) }},
	}
	for _, j := range jobs {
		if j.ref == "" {
			continue
		}
		name, _, err := ociimage.NormaliseRef(j.ref)
		if err != nil {
			return err
		}
		bin := ""
		if j.pkg != "" {
			bin = filepath.Join(work, path.Base(j.pkg))
			if err := images.GoBuild(context.Background(), "", bin, j.pkg, *goarch); err != nil {
				return err
			}
		}
		b, err := j.build(bin, *goarch)
		if err != nil {
			return err
		}
		file := filepath.Join(*out, path.Base(strings.SplitN(name, ":", 2)[0])+".tar")
		if err := ociimage.WriteArchiveFile(file, ociimage.Tagged{Ref: j.ref, Image: b}); err != nil {
			return err
		}
		fmt.Printf("%s %s@%s\n", file, j.ref, b.Manifest.Digest)
	}
	return nil
}
