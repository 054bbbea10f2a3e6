// Package permissions reads the operator's RBAC from its source and checks
// it against what the operator really did.
//
// Every permission of the operator comes from a +kubebuilder:rbac marker
// (controller-gen writes config/rbac/role.yaml from them), and every marker
// follows a comment that names the code that needs it. ParseMarkers reads
// both; ParseAudit reads the API server's audit log of the e2e runs;
// Compare tells which marker's verbs the operator never used. A marker
// whose comment has a sentence starting with "Held" (for example "Held
// only to grant it to the nvidia-gpu kubelet plugin") says why it is held
// anyway; any other unused verb is a finding. The pure functions here are
// table-tested; test/e2e runs them on its own audit log.
package permissions

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Marker is one +kubebuilder:rbac marker and the comment that says who
// needs it.
type Marker struct {
	// File and Line locate the marker (File relative to the scanned root).
	File string
	Line int
	// Doc is the comment above the marker: the nearest comment lines
	// before it, shared by consecutive markers.
	Doc string
	// Groups, Resources (a subresource as "resource/sub"), Verbs and
	// ResourceNames are the marker's arguments; Namespace is set for a
	// namespaced Role.
	Groups, Resources, Verbs, ResourceNames []string
	Namespace                               string
}

// Held reports whether the marker's comment says why the permission is held
// although the operator's code may not use it: a sentence starting with
// "Held".
func (m Marker) Held() bool { return heldSentence.MatchString(m.Doc) }

var heldSentence = regexp.MustCompile(`(^|[.:;]\s+)Held\b`)

// HeldToGrant reports whether the marker's comment says the permission is
// held only to grant it to a driver ("Held only to grant"): the operator's
// own code never uses it.
func (m Marker) HeldToGrant() bool { return strings.Contains(m.Doc, "Held only to grant") }

// Where is "file:line".
func (m Marker) Where() string { return fmt.Sprintf("%s:%d", m.File, m.Line) }

const markerPrefix = "+kubebuilder:rbac:"

// ParseMarkers reads the markers of the Go files (tests excluded) under
// each of dirs, relative to root, in file and line order.
func ParseMarkers(root string, dirs ...string) ([]Marker, error) {
	var files []string
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", d, err)
		}
	}
	sort.Strings(files)
	var out []Marker
	for _, f := range files {
		ms, err := parseFile(f)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, f)
		if err != nil {
			rel = f
		}
		for i := range ms {
			ms[i].File = filepath.ToSlash(rel)
		}
		out = append(out, ms...)
	}
	return out, nil
}

func parseFile(path string) ([]Marker, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return parseLines(bufio.NewScanner(fh), path)
}

// parseLines reads markers from Go source lines. The comment of a marker
// is the block of "//" lines above it; a comment line right after a marker
// starts a new block, and a line that is not a comment ends one.
func parseLines(sc *bufio.Scanner, name string) ([]Marker, error) {
	var out []Marker
	var doc []string
	afterMarker := false
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		text, isComment := strings.CutPrefix(line, "//")
		if !isComment {
			doc, afterMarker = nil, false
			continue
		}
		text = strings.TrimSpace(text)
		if args, ok := strings.CutPrefix(text, markerPrefix); ok {
			m, err := parseArgs(args)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, n, err)
			}
			m.Line, m.Doc = n, strings.Join(doc, " ")
			out = append(out, m)
			afterMarker = true
			continue
		}
		if afterMarker {
			doc, afterMarker = nil, false
		}
		doc = append(doc, text)
	}
	return out, sc.Err()
}

// parseArgs reads "groups=a;b,resources=c,verbs=get;list,resourceNames=x".
// A value with "=" or "," quoted is not used by the operator's markers.
func parseArgs(args string) (Marker, error) {
	var m Marker
	for _, kv := range strings.Split(args, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return m, fmt.Errorf("rbac marker argument %q is not key=value", kv)
		}
		v = strings.Trim(v, `"`)
		vals := strings.Split(v, ";")
		switch k {
		case "groups":
			m.Groups = vals
		case "resources":
			m.Resources = vals
		case "verbs":
			m.Verbs = vals
		case "resourceNames":
			m.ResourceNames = vals
		case "namespace":
			m.Namespace = v
		case "urls":
			return m, fmt.Errorf("rbac marker with urls is not supported")
		default:
			return m, fmt.Errorf("unknown rbac marker argument %q", k)
		}
	}
	if len(m.Groups) == 0 || len(m.Resources) == 0 || len(m.Verbs) == 0 {
		return m, fmt.Errorf("rbac marker %q lacks groups, resources or verbs", args)
	}
	return m, nil
}

// writeVerbs change objects.
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// IsWrite reports whether an RBAC verb changes objects.
func IsWrite(verb string) bool { return slices.Contains(writeVerbs, verb) }
