package ociimage

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/distribution/reference"
)

// Annotations of an index entry that name the image. containerd's import
// takes the full name from AnnotationImageName; the OCI specification's
// AnnotationRefName holds the tag.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// layoutFile is the OCI image layout's marker file.
const layoutFile = `{"imageLayoutVersion":"1.0.0"}`

// Tagged is an image under one reference.
type Tagged struct {
	// Ref is a reference with a tag, for example
	// ghcr.io/drastack/drastack:v0.1.0; short names are normalised
	// (busybox:1 is docker.io/library/busybox:1).
	Ref   string
	Image *Built
}

// NormaliseRef returns the full name container runtimes store an image
// under, and its tag. A reference without a tag, or with a digest, is an
// error: an archive names images by tag.
func NormaliseRef(ref string) (name, tag string, err error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	if _, ok := named.(reference.Digested); ok {
		return "", "", fmt.Errorf("image reference %q: has a digest; name the image by tag", ref)
	}
	tagged, ok := named.(reference.Tagged)
	if !ok {
		return "", "", fmt.Errorf("image reference %q: has no tag", ref)
	}
	return named.String(), tagged.Tag(), nil
}

// WriteArchiveFile writes the images' archive (WriteArchive) to the file
// at path, replacing it; nothing is left there on failure.
func WriteArchiveFile(path string, images ...Tagged) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	err = WriteArchive(f, images...)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("image archive %s: %w", path, cerr)
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// WriteArchive writes the images as one OCI image layout in a tar
// archive: the marker file, index.json with one entry per reference, and
// every blob once.
func WriteArchive(w io.Writer, images ...Tagged) error {
	if len(images) == 0 {
		return errNoRefs
	}
	idx := index{SchemaVersion: 2, MediaType: MediaTypeIndex}
	blobs := map[string][]byte{}
	seen := map[string]bool{}
	for _, t := range images {
		if t.Image == nil {
			return fmt.Errorf("image %q: nothing built", t.Ref)
		}
		name, tag, err := NormaliseRef(t.Ref)
		if err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("image reference %q: listed twice", t.Ref)
		}
		seen[name] = true
		d := t.Image.Manifest
		d.Annotations = map[string]string{AnnotationImageName: name, AnnotationRefName: tag}
		idx.Manifests = append(idx.Manifests, d)
		for digest, data := range t.Image.blobs {
			blobs[digest] = data
		}
	}
	idxJSON, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("encode index: %w", err)
	}
	tw := tar.NewWriter(w)
	write := func(name string, data []byte) error {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("archive entry %s: %w", name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("archive entry %s: %w", name, err)
		}
		return nil
	}
	if err := write("oci-layout", []byte(layoutFile)); err != nil {
		return err
	}
	if err := write("index.json", idxJSON); err != nil {
		return err
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	slices.Sort(digests)
	for _, d := range digests {
		if err := write("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), blobs[d]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("close archive: %w", err)
	}
	return nil
}
