// Command bundlegen writes drastack's OLM bundle (bundle/manifests,
// bundle/metadata and bundle.Dockerfile) from `kustomize build
// config/manifests`. It stands in for operator-sdk's `generate bundle`,
// which cannot be fetched on our build machines; `make bundle` runs it.
//
//	go run ./hack/bundlegen -version 0.1.0 -image ghcr.io/drastack/drastack:v0.1.0 -output .
//
// With -match DIR it takes package, version, image and channels from the
// bundle already committed under DIR, which is how the staleness checks
// regenerate the same release into a temporary directory.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/drastack/drastack/internal/bundle"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "bundlegen: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("bundlegen", flag.ContinueOnError)
	var (
		opts     bundle.Options
		channels string
		config   = fs.String("config", "config/manifests", "kustomization whose build is the bundle's input")
		output   = fs.String("output", ".", "root to write bundle/ and bundle.Dockerfile under")
		match    = fs.String("match", "", "take package, version, image and channels from the bundle under this root")
	)
	fs.StringVar(&opts.Version, "version", "", "bundle version, semver without a leading v")
	fs.StringVar(&opts.Image, "image", "", "manager image the bundle installs")
	fs.StringVar(&opts.Package, "package", "drastack", "OLM package name")
	// candidate, fast and stable (and names that start with them) are OLM's
	// channel naming convention, which operator-sdk's good-practices
	// validator checks; drastack is alpha, so its releases are candidates.
	fs.StringVar(&channels, "channels", "candidate", "comma-separated channels")
	fs.StringVar(&opts.DefaultChannel, "default-channel", "", "default channel (default: the first channel)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	opts.Channels = strings.Split(channels, ",")
	if *match != "" {
		committed, err := bundle.ReadOptions(*match)
		if err != nil {
			return fmt.Errorf("-match %s: %w", *match, err)
		}
		opts = committed
	}

	objs, err := bundle.Build(*config)
	if err != nil {
		return err
	}
	b, err := bundle.Generate(objs, opts)
	if err != nil {
		return err
	}
	for _, n := range b.Notes {
		fmt.Printf("bundlegen: note: %s\n", n)
	}
	files, err := b.Files()
	if err != nil {
		return err
	}
	if err := bundle.Write(*output, files); err != nil {
		return err
	}
	fmt.Printf("bundlegen: wrote %d files for %s v%s under %s\n", len(files), opts.Package, opts.Version, *output)
	return nil
}
