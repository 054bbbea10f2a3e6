package stack

import (
	"errors"
	"fmt"

	"github.com/distribution/reference"
)

// maxImageLength bounds an image reference: the grammar bounds the
// repository name (255 characters); a tag is at most 128 and a digest
// about 100 more.
const maxImageLength = 512

// Image is a container image reference parsed with the grammar of
// github.com/distribution/reference, the one container runtimes and
// Kubernetes tooling use.
type Image struct {
	// Ref is the reference as written in the spec (not normalized: the
	// kubelet normalizes it the same way).
	Ref string
	// Repository is the normalized repository
	// ("docker.io/library/driver" for "driver:v1").
	Repository string
	// Tag and Digest are empty when the reference has none.
	Tag, Digest string
}

// ParseImage parses an image reference. Short names ("driver:v1") are
// accepted as the kubelet accepts them (docker.io/library/driver:v1);
// anything the grammar refuses (upper case in the repository, a doubled
// colon, a digest that is not algorithm:hex) is an error that says why.
// A reference that parses cannot carry YAML structure: the grammar allows
// no white space, quotes or colons outside the port, tag and digest.
func ParseImage(s string) (Image, error) {
	if s == "" {
		return Image{}, errors.New("empty image reference")
	}
	if len(s) > maxImageLength {
		return Image{}, fmt.Errorf("longer than %d characters", maxImageLength)
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return Image{}, fmt.Errorf("not a container image reference: %w", err)
	}
	img := Image{Ref: s, Repository: named.Name()}
	if t, ok := named.(reference.Tagged); ok {
		img.Tag = t.Tag()
	}
	if d, ok := named.(reference.Digested); ok {
		img.Digest = d.Digest().String()
	}
	return img, nil
}

// Version is what status reports as the image's version: the tag, else the
// digest shortened to 12 hex digits ("sha256:0123456789ab"), else "latest"
// (what the kubelet pulls for a reference without either).
func (i Image) Version() string {
	switch {
	case i.Tag != "":
		return i.Tag
	case i.Digest != "":
		for j := 0; j < len(i.Digest); j++ {
			if i.Digest[j] == ':' && len(i.Digest) > j+13 {
				return i.Digest[:j+13]
			}
		}
		return i.Digest
	}
	return "latest"
}
