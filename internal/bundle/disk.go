package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Write writes files under root. It first deletes every file in
// root/bundle/manifests, so that an object removed from the manifests does
// not linger in the bundle; bundle/metadata keeps files it does not write
// (such as a hand-written dependencies.yaml).
func Write(root string, files Files) error {
	dir := filepath.Join(root, filepath.FromSlash(manifestsDir))
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("list old manifests: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("remove old manifest: %w", err)
		}
	}
	for _, p := range files.Paths() {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("create directory for %s: %w", p, err)
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}

// Compare lists how the bundle under root differs from files: generated
// files that are missing or differ, and files in bundle/manifests that the
// generator would not write. An empty result means the bundle is current.
func Compare(root string, files Files) ([]string, error) {
	var stale []string
	for _, p := range files.Paths() {
		have, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			stale = append(stale, p+": missing")
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", p, err)
		case !bytes.Equal(have, files[p]):
			stale = append(stale, p+": differs")
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(manifestsDir)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list manifests: %w", err)
	}
	for _, e := range entries {
		p := manifestsDir + "/" + e.Name()
		if _, ok := files[p]; !ok && !e.IsDir() {
			stale = append(stale, p+": not generated any more")
		}
	}
	sort.Strings(stale)
	return stale, nil
}

// ReadOptions reads back the options a committed bundle under root was
// generated with (package, version, image, channels), so that staleness
// checks regenerate that release rather than whatever VERSION the Makefile
// defaults to.
func ReadOptions(root string) (Options, error) {
	pattern := filepath.Join(root, filepath.FromSlash(manifestsDir), "*.clusterserviceversion.yaml")
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return Options{}, fmt.Errorf("find CSV: %w", err)
	}
	if len(matches) != 1 {
		return Options{}, fmt.Errorf("want exactly one CSV matching %s, found %d", pattern, len(matches))
	}
	data, err := os.ReadFile(matches[0])
	if err != nil {
		return Options{}, fmt.Errorf("read CSV: %w", err)
	}
	csv, err := decodeObject(data)
	if err != nil {
		return Options{}, fmt.Errorf("%s: %w", matches[0], err)
	}
	id := Options{Package: strings.TrimSuffix(filepath.Base(matches[0]), ".clusterserviceversion.yaml")}
	if id.Version, err = requiredString(csv.Object, "spec", "version"); err != nil {
		return Options{}, fmt.Errorf("%s: %w", matches[0], err)
	}
	if id.Image = csv.GetAnnotations()[annotationImage]; id.Image == "" {
		return Options{}, fmt.Errorf("%s: no %s annotation", matches[0], annotationImage)
	}
	annotations, err := readAnnotations(root)
	if err != nil {
		return Options{}, err
	}
	if annotations[keyChannels] != "" {
		id.Channels = strings.Split(annotations[keyChannels], ",")
	}
	id.DefaultChannel = annotations[keyDefaultChannel]
	return id, nil
}

// readAnnotations reads bundle/metadata/annotations.yaml under root.
func readAnnotations(root string) (map[string]string, error) {
	path := filepath.Join(root, filepath.FromSlash(metadataDir), "annotations.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read bundle annotations: %w", err)
	}
	var doc struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return doc.Annotations, nil
}
