package bundle

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
)

// Options are the inputs of a bundle that do not come from the manifests:
// they identify one release of one package.
type Options struct {
	// Package is the OLM package name; the CSV is named <Package>.v<Version>
	// and its file <Package>.clusterserviceversion.yaml.
	Package string
	// Version is the release, semver without a leading "v" (OLM compares
	// CSV versions as semver).
	Version string
	// Image is the manager image the bundle installs; it replaces the image
	// kustomize set, so `make bundle VERSION=x` needs no kustomization edit.
	Image string
	// Channels the bundle is published in; at least one.
	Channels []string
	// DefaultChannel is the channel OLM subscribes to by default; empty
	// means the first of Channels.
	DefaultChannel string
}

// validate reports options that would make an unusable bundle, before any
// work is done.
func (o Options) validate() error {
	if o.Package == "" {
		return fmt.Errorf("package name is empty")
	}
	if strings.HasPrefix(o.Version, "v") {
		return fmt.Errorf("version %q: give it without the leading v", o.Version)
	}
	if _, err := semver.Parse(o.Version); err != nil {
		return fmt.Errorf("version %q is not semver: %w", o.Version, err)
	}
	if o.Image == "" || strings.ContainsAny(o.Image, " \t\n") {
		return fmt.Errorf("image %q is not an image reference", o.Image)
	}
	if len(o.Channels) == 0 {
		return fmt.Errorf("no channel given")
	}
	for _, c := range o.Channels {
		if c == "" || strings.ContainsAny(c, ", \t\n") {
			return fmt.Errorf("channel %q is not a channel name", c)
		}
	}
	if o.DefaultChannel != "" && !contains(o.Channels, o.DefaultChannel) {
		return fmt.Errorf("default channel %q is not one of the channels %v", o.DefaultChannel, o.Channels)
	}
	return nil
}

// defaultChannel is the channel written as channel.default.v1.
func (o Options) defaultChannel() string {
	if o.DefaultChannel != "" {
		return o.DefaultChannel
	}
	return o.Channels[0]
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
