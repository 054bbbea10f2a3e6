package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// maxBlob bounds one blob read from an archive: the images of this project
// are tens of megabytes.
const maxBlob = 1 << 30

// Archive is an OCI image layout read back from a tar archive, with every
// blob checked against its digest.
type Archive struct {
	// Images maps each full image name of index.json to its manifest
	// digest.
	Images map[string]string
	blobs  map[string][]byte
}

// Contents is what one image of an archive holds.
type Contents struct {
	// Platform is the configuration's os and architecture.
	Platform Platform
	// Config is the runtime configuration.
	Config Config
	// Files are the layer's entries by path (without a leading slash).
	Files map[string]File
}

// ReadArchive reads an archive that WriteArchive (or another OCI layout
// writer with one gzip layer per image) wrote, and checks the layout
// marker and that every blob matches its name.
func ReadArchive(r io.Reader) (*Archive, error) {
	tr := tar.NewReader(r)
	a := &Archive{Images: map[string]string{}, blobs: map[string][]byte{}}
	var idxJSON []byte
	var marker bool
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, maxBlob+1))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", h.Name, err)
		}
		if len(data) > maxBlob {
			return nil, fmt.Errorf("%s: larger than %d bytes", h.Name, maxBlob)
		}
		name := strings.TrimPrefix(h.Name, "./")
		switch {
		case name == "oci-layout":
			marker = true
		case name == "index.json":
			idxJSON = data
		case strings.HasPrefix(name, "blobs/sha256/"):
			d := "sha256:" + strings.TrimPrefix(name, "blobs/sha256/")
			if got := Digest(data); got != d {
				return nil, fmt.Errorf("blob %s has digest %s", name, got)
			}
			a.blobs[d] = data
		}
	}
	if !marker {
		return nil, errors.New("not an OCI image layout: no oci-layout file")
	}
	if idxJSON == nil {
		return nil, errors.New("not an OCI image layout: no index.json")
	}
	var idx index
	if err := json.Unmarshal(idxJSON, &idx); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	for i, m := range idx.Manifests {
		name := m.Annotations[AnnotationImageName]
		if name == "" {
			return nil, fmt.Errorf("index.json: manifest %d has no %s annotation", i, AnnotationImageName)
		}
		if _, ok := a.blobs[m.Digest]; !ok {
			return nil, fmt.Errorf("index.json: manifest of %s (%s) is not in the archive", name, m.Digest)
		}
		a.Images[name] = m.Digest
	}
	return a, nil
}

// Contents decodes one image of the archive by its full name, checking
// that its configuration and layer are there and that the layer matches
// the configuration's diff ID.
func (a *Archive) Contents(name string) (*Contents, error) {
	digest, ok := a.Images[name]
	if !ok {
		return nil, fmt.Errorf("no image %s in the archive", name)
	}
	var man manifest
	if err := json.Unmarshal(a.blobs[digest], &man); err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", name, err)
	}
	cfgJSON, ok := a.blobs[man.Config.Digest]
	if !ok {
		return nil, fmt.Errorf("configuration %s of %s is not in the archive", man.Config.Digest, name)
	}
	var cfg imageConfig
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		return nil, fmt.Errorf("configuration of %s: %w", name, err)
	}
	if len(man.Layers) != len(cfg.RootFS.DiffIDs) {
		return nil, fmt.Errorf("%s: %d layers but %d diff IDs", name, len(man.Layers), len(cfg.RootFS.DiffIDs))
	}
	out := &Contents{Platform: Platform{OS: cfg.OS, Architecture: cfg.Architecture}, Config: cfg.Config, Files: map[string]File{}}
	for i, l := range man.Layers {
		gz, ok := a.blobs[l.Digest]
		if !ok {
			return nil, fmt.Errorf("layer %s of %s is not in the archive", l.Digest, name)
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			return nil, fmt.Errorf("layer %d of %s: %w", i, name, err)
		}
		raw, err := io.ReadAll(io.LimitReader(zr, maxBlob+1))
		if err != nil {
			return nil, fmt.Errorf("layer %d of %s: %w", i, name, err)
		}
		if got := Digest(raw); got != cfg.RootFS.DiffIDs[i] {
			return nil, fmt.Errorf("layer %d of %s: uncompressed digest %s, configuration says %s", i, name, got, cfg.RootFS.DiffIDs[i])
		}
		if err := readLayer(raw, out.Files); err != nil {
			return nil, fmt.Errorf("layer %d of %s: %w", i, name, err)
		}
	}
	return out, nil
}

// readLayer adds a layer's entries to files.
func readLayer(raw []byte, files map[string]File) error {
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		f := File{Path: p, Mode: fileMode(h.Mode)}
		switch h.Typeflag {
		case tar.TypeDir:
			f.Mode |= fs.ModeDir
		case tar.TypeSymlink:
			f.Mode |= fs.ModeSymlink
			f.Linkname = h.Linkname
		case tar.TypeReg:
			if f.Data, err = io.ReadAll(tr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %s: unsupported type %q", h.Name, h.Typeflag)
		}
		files[p] = f
	}
}
