// Package ociimage builds small container images from files, without a
// container engine or a registry: one layer, an image configuration, and
// the OCI image layout written as a tar archive, which containerd
// (`ctr images import`), podman, skopeo (`oci-archive:`) and Docker 25 or
// newer (`docker load`) read.
//
// The output is reproducible: the same files and configuration give the
// same digests, byte for byte (fixed timestamps and owners, sorted
// entries, a gzip header without name or time).
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Media types of the OCI image specification.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// File is one entry of the image's layer.
type File struct {
	// Path inside the image, absolute or relative to its root: "/bin/sh"
	// and "bin/sh" are the same entry. It must be clean (no "..", no
	// trailing slash).
	Path string
	// Mode holds the permission bits, and fs.ModeDir for a directory or
	// fs.ModeSymlink for a symbolic link; anything else is a regular file.
	Mode fs.FileMode
	// Data is a regular file's content.
	Data []byte
	// Linkname is a symbolic link's target.
	Linkname string
}

// Config is what the image configuration says about running it.
type Config struct {
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	User       string            `json:"User,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// Image is what to build.
type Image struct {
	// OS and Architecture of the binaries in Files; default linux and the
	// architecture this program runs on.
	OS, Architecture string
	// Files make up the single layer. Parent directories that are not
	// listed are added with mode 0755.
	Files []File
	// Config is the runtime configuration.
	Config Config
}

// Descriptor points at a blob, as in the OCI specification.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform of an image in an index.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Built is an image ready to be written: its blobs by digest and the
// descriptor of its manifest.
type Built struct {
	// Manifest describes the image manifest; Manifest.Digest is the
	// image's digest (what `@sha256:...` references pin).
	Manifest Descriptor
	// Config and Layer describe the other two blobs.
	Config, Layer Descriptor
	// DiffID is the digest of the uncompressed layer.
	DiffID string

	blobs map[string][]byte
}

// Blob returns a blob by digest, or nil.
func (b *Built) Blob(digest string) []byte { return b.blobs[digest] }

// epoch is the modification time of every layer entry: a fixed time keeps
// the layer's digest independent of when it was built.
var epoch = time.Unix(0, 0).UTC()

// Build turns files and configuration into the blobs of an image. Bad
// input (an unclean or duplicate path, a symlink without target) is an
// error naming the entry.
func Build(img Image) (*Built, error) {
	entries, err := normalise(img.Files)
	if err != nil {
		return nil, err
	}
	layerTar, err := layerArchive(entries)
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	if _, err := zw.Write(layerTar); err != nil {
		return nil, fmt.Errorf("compress layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compress layer: %w", err)
	}

	osName, arch := img.OS, img.Architecture
	if osName == "" {
		osName = "linux"
	}
	if arch == "" {
		arch = runtime.GOARCH
	}
	b := &Built{blobs: map[string][]byte{}, DiffID: Digest(layerTar)}
	b.Layer = b.add(MediaTypeLayer, gz.Bytes())

	cfg := imageConfig{
		Architecture: arch,
		OS:           osName,
		Config:       img.Config,
		RootFS:       rootFS{Type: "layers", DiffIDs: []string{b.DiffID}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode image configuration: %w", err)
	}
	b.Config = b.add(MediaTypeConfig, cfgJSON)

	man := manifest{SchemaVersion: 2, MediaType: MediaTypeManifest, Config: b.Config, Layers: []Descriptor{b.Layer}}
	manJSON, err := json.Marshal(man)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	b.Manifest = b.add(MediaTypeManifest, manJSON)
	b.Manifest.Platform = &Platform{Architecture: arch, OS: osName}
	return b, nil
}

// add stores a blob and returns its descriptor.
func (b *Built) add(mediaType string, data []byte) Descriptor {
	d := Digest(data)
	b.blobs[d] = data
	return Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
}

// Digest is the OCI digest (sha256) of data.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// imageConfig is the OCI image configuration (the fields this package
// writes).
type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       Config `json:"config"`
	RootFS       rootFS `json:"rootfs"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// normalise checks the files, strips leading slashes, adds missing parent
// directories and sorts the entries so that every directory precedes what
// it holds.
func normalise(files []File) ([]File, error) {
	byPath := map[string]File{}
	for i, f := range files {
		p := strings.TrimPrefix(f.Path, "/")
		if p == "" || p == "." || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("file %d: path %q is not a clean path inside the image", i, f.Path)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("file %d: path %q is listed twice", i, f.Path)
		}
		switch {
		case f.Mode&fs.ModeSymlink != 0:
			if f.Linkname == "" {
				return nil, fmt.Errorf("file %d: symbolic link %q has no target", i, f.Path)
			}
			if len(f.Data) > 0 {
				return nil, fmt.Errorf("file %d: symbolic link %q has data", i, f.Path)
			}
		case f.Mode.IsDir():
			if len(f.Data) > 0 || f.Linkname != "" {
				return nil, fmt.Errorf("file %d: directory %q has data or a link target", i, f.Path)
			}
		case f.Mode&fs.ModeType != 0:
			return nil, fmt.Errorf("file %d: %q is neither a regular file, a directory nor a symbolic link (mode %s)", i, f.Path, f.Mode)
		case f.Linkname != "":
			return nil, fmt.Errorf("file %d: regular file %q has a link target", i, f.Path)
		}
		f.Path = p
		byPath[p] = f
	}
	for p, f := range byPath {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			parent, ok := byPath[dir]
			if !ok {
				byPath[dir] = File{Path: dir, Mode: fs.ModeDir | 0o755}
				continue
			}
			if !parent.Mode.IsDir() {
				return nil, fmt.Errorf("%q needs %q to be a directory, but it is listed as a file", f.Path, dir)
			}
		}
	}
	out := make([]File, 0, len(byPath))
	for _, f := range byPath {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// layerArchive writes the entries as an uncompressed tar, owned by root,
// with the fixed time.
func layerArchive(entries []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range entries {
		h := &tar.Header{
			Name:    f.Path,
			Mode:    tarMode(f.Mode),
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		switch {
		case f.Mode&fs.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			h.Linkname = f.Linkname
			h.Mode = 0o777
		case f.Mode.IsDir():
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		default:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", f.Path, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, fmt.Errorf("layer entry %s: %w", f.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer: %w", err)
	}
	return buf.Bytes(), nil
}

// tarMode is the tar header mode of a file mode: permissions and the
// setuid, setgid and sticky bits.
func tarMode(m fs.FileMode) int64 {
	bits := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return bits
}

// fileMode is the inverse of tarMode.
func fileMode(bits int64) fs.FileMode {
	m := fs.FileMode(bits).Perm()
	if bits&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if bits&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// FromDisk reads a regular file of this machine into a File at path dst
// of the image, keeping its permission bits.
func FromDisk(src, dst string) (File, error) {
	info, err := os.Stat(src)
	if err != nil {
		return File{}, fmt.Errorf("image file %s: %w", dst, err)
	}
	if !info.Mode().IsRegular() {
		return File{}, fmt.Errorf("image file %s: %s is not a regular file", dst, src)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return File{}, fmt.Errorf("image file %s: %w", dst, err)
	}
	return File{Path: dst, Mode: info.Mode().Perm(), Data: data}, nil
}

// errNoRefs is returned when an archive would name no image.
var errNoRefs = errors.New("an image archive needs at least one image reference")
