package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// inputSet is everything the offline commands read from their files, in
// document order.
type inputSet struct {
	// Slices of every generation; grouping into pools happens later.
	Slices []*resourceapi.ResourceSlice
	// Classes are the DeviceClasses claims may name.
	Classes []*resourceapi.DeviceClass
	// Claims, allocated (status.allocation) or not; without a namespace
	// they are put in "default".
	Claims []*resourceapi.ResourceClaim
	// Nodes, for node selectors and as candidates of a central allocator.
	Nodes []*corev1.Node
	// TaintRules are DeviceTaintRules; with DRADeviceTaintRules on (see
	// --features) their taints apply to the devices they select.
	TaintRules []resourceapi.DeviceTaintRule

	// claimSources says where each claim was read, for messages about
	// claims the engine rejects.
	claimSources map[*resourceapi.ResourceClaim]Source
	// seen finds objects defined twice.
	seen map[string]Source
}

// Kinds the offline commands read.
const (
	resourceAPIVersion = "resource.k8s.io/v1"
	coreAPIVersion     = "v1"
)

// readableKinds is printed when a document of another kind is skipped.
const readableKinds = "resource.k8s.io/v1 ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate, DeviceTaintRule (also v1beta2) and v1 Node"

// taintRuleAPIVersions are the versions a DeviceTaintRule is read in:
// v1beta2, where it was beta, has the same fields as v1.
var taintRuleAPIVersions = []string{resourceAPIVersion, "resource.k8s.io/v1beta2"}

// typeHeader is what identifies a document before it is decoded strictly.
type typeHeader struct {
	APIVersion string
	Kind       string
	Name       string
	Namespace  string
}

// decodeDocuments decodes every document. Unknown kinds are skipped with a
// warning on warn; anything else that is wrong is an *InputError naming the
// document, the object and the field.
func decodeDocuments(docs []document, warn io.Writer) (*inputSet, error) {
	in := &inputSet{
		claimSources: map[*resourceapi.ResourceClaim]Source{},
		seen:         map[string]Source{},
	}
	for _, d := range docs {
		if err := in.addDocument(d, warn); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// addDocument decodes one document. A YAML parser panic on hostile input is
// turned into an error so that one bad file cannot crash the tool.
func (in *inputSet) addDocument(d document, warn io.Writer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &InputError{Source: d.Source, Err: fmt.Errorf("malformed YAML: parser failed: %v", r)}
		}
	}()
	data, err := yaml.YAMLToJSONStrict(d.Text)
	if err != nil {
		return &InputError{Source: d.Source, Err: fmt.Errorf("malformed YAML: %s", fileLines(err.Error(), d.TextStart))}
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil // a document that is only "~" or "null" holds no object
	}
	return in.addObject(d.Source, data, warn, true)
}

// addObject decodes one object (a document, or an item of a List).
func (in *inputSet) addObject(src Source, data []byte, warn io.Writer, listAllowed bool) error {
	h, err := readHeader(data)
	if err != nil {
		return &InputError{Source: src, Err: err}
	}
	obj := h.objectName()
	switch {
	case h.APIVersion == "" || h.Kind == "":
		field := "kind"
		if h.APIVersion == "" {
			field = "apiVersion"
		}
		return &InputError{Source: src, Object: obj, Field: field, Err: errors.New("required (every object needs apiVersion and kind)")}
	case h.APIVersion == coreAPIVersion && h.Kind == "List" && listAllowed:
		return in.addList(src, data, warn)
	case h.APIVersion == coreAPIVersion && h.Kind == "Node":
		n := &corev1.Node{}
		if err := in.decodeInto(src, h, data, n); err != nil {
			return err
		}
		in.Nodes = append(in.Nodes, n)
	case h.APIVersion == resourceAPIVersion && h.Kind == "ResourceSlice":
		s := &resourceapi.ResourceSlice{}
		if err := in.decodeInto(src, h, data, s); err != nil {
			return err
		}
		if err := checkSlice(s); err != nil {
			return &InputError{Source: src, Object: obj, Field: err.field, Err: err.err}
		}
		in.Slices = append(in.Slices, s)
	case h.APIVersion == resourceAPIVersion && h.Kind == "DeviceClass":
		c := &resourceapi.DeviceClass{}
		if err := in.decodeInto(src, h, data, c); err != nil {
			return err
		}
		in.Classes = append(in.Classes, c)
	case h.APIVersion == resourceAPIVersion && h.Kind == "ResourceClaim":
		c := &resourceapi.ResourceClaim{}
		if err := in.decodeInto(src, h, data, c); err != nil {
			return err
		}
		if c.Namespace == "" {
			c.Namespace = "default" // where kubectl apply would put it
		}
		in.Claims = append(in.Claims, c)
		in.claimSources[c] = src
	case slices.Contains(taintRuleAPIVersions, h.APIVersion) && h.Kind == "DeviceTaintRule":
		r := &resourceapi.DeviceTaintRule{}
		if err := in.decodeInto(src, h, data, r); err != nil {
			return err
		}
		in.TaintRules = append(in.TaintRules, *r)
	case h.APIVersion == resourceAPIVersion && h.Kind == "ResourceClaimTemplate":
		// Templates are decoded so typos are caught, but they allocate
		// nothing: only claims made from them do.
		t := &resourceapi.ResourceClaimTemplate{}
		return in.decodeInto(src, h, data, t)
	default:
		fmt.Fprintf(warn, "warning: %s: skipping %s %s: kubectl-dra reads only %s\n",
			src, h.APIVersion, h.objectName(), readableKinds)
	}
	return nil
}

// addList adds the items of a kind: List document (what `kubectl get -o
// yaml` prints for several objects).
func (in *inputSet) addList(src Source, data []byte, warn io.Writer) error {
	var list struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   json.RawMessage   `json:"metadata"`
		Items      []json.RawMessage `json:"items"`
	}
	if err := decodeStrict(data, &list); err != nil {
		return &InputError{Source: src, Object: "List", Err: err}
	}
	for i, item := range list.Items {
		isrc := src
		isrc.Item = i + 1
		if err := in.addObject(isrc, item, warn, false); err != nil {
			return err
		}
	}
	return nil
}

// decodeInto decodes data strictly into obj, checks that it has a name and
// that no object of the same kind and name was read before.
func (in *inputSet) decodeInto(src Source, h typeHeader, data []byte, obj any) error {
	if err := decodeStrict(data, obj); err != nil {
		return &InputError{Source: src, Object: h.objectName(), Err: err}
	}
	if h.Name == "" {
		return &InputError{Source: src, Object: h.Kind, Field: "metadata.name", Err: errors.New("required")}
	}
	ns := h.Namespace
	if h.Kind == "ResourceClaim" || h.Kind == "ResourceClaimTemplate" {
		if ns == "" {
			ns = "default"
		}
	} else {
		ns = ""
	}
	key := h.Kind + " " + ns + "/" + h.Name
	if prev, ok := in.seen[key]; ok {
		return &InputError{Source: src, Object: h.objectName(), Err: fmt.Errorf("defined twice (first at %s)", prev)}
	}
	in.seen[key] = src
	return nil
}

// readHeader reads apiVersion, kind and metadata name and namespace without
// failing on the rest, which the strict decode reports with its path.
func readHeader(data []byte) (typeHeader, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return typeHeader{}, fmt.Errorf("not an object: a document must be a mapping with apiVersion and kind")
	}
	var h typeHeader
	_ = json.Unmarshal(fields["apiVersion"], &h.APIVersion)
	_ = json.Unmarshal(fields["kind"], &h.Kind)
	var meta struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	}
	if raw, ok := fields["metadata"]; ok {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil {
			_ = json.Unmarshal(m["name"], &meta.Name)
			_ = json.Unmarshal(m["namespace"], &meta.Namespace)
		}
	}
	h.Name, h.Namespace = meta.Name, meta.Namespace
	return h, nil
}

// objectName is "Kind name", "Kind namespace/name" for namespaced objects,
// or "Kind (unnamed)".
func (h typeHeader) objectName() string {
	kind := h.Kind
	if kind == "" {
		kind = "object"
	}
	switch {
	case h.Name == "":
		return kind + " (unnamed)"
	case h.Kind == "ResourceClaim" || h.Kind == "ResourceClaimTemplate":
		ns := h.Namespace
		if ns == "" {
			ns = "default"
		}
		return kind + " " + ns + "/" + h.Name
	default:
		return kind + " " + h.Name
	}
}

// decodeStrict decodes JSON into obj and fails on unknown or duplicate
// fields and on values of the wrong type, naming the field path.
func decodeStrict(data []byte, obj any) error {
	strictErrs, err := sigsjson.UnmarshalStrict(data, obj)
	if err != nil {
		return cleanDecodeError(err)
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			msgs[i] = e.Error()
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

// yamlLineRE finds the line numbers in YAML parser messages, which count
// from the start of the document.
var yamlLineRE = regexp.MustCompile(`\bline (\d+)\b`)

// fileLines rewrites "line N" in a parser message to the line in the file,
// for a document that starts at line start.
func fileLines(msg string, start int) string {
	if start <= 1 {
		return msg
	}
	return yamlLineRE.ReplaceAllStringFunc(msg, func(m string) string {
		n, err := strconv.Atoi(strings.TrimPrefix(m, "line "))
		if err != nil {
			return m
		}
		return "line " + strconv.Itoa(n+start-1)
	})
}

// typeErrorRE matches encoding/json's type errors, which name the field as
// "GoStruct.json.path".
var typeErrorRE = regexp.MustCompile(`^json: cannot unmarshal (.+) into Go struct field [^.]+\.(\S+) of type (\S+)$`)

// cleanDecodeError rewrites Go-centric decoder messages into ones that name
// the field as it is written in YAML.
func cleanDecodeError(err error) error {
	if m := typeErrorRE.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("field %q: cannot decode %s as %s", m[2], m[1], m[3])
	}
	return err
}

// sliceError is a required field a slice lacks.
type sliceError struct {
	field string
	err   error
}

// checkSlice rejects slices without the fields that identify their pool;
// the API server would not accept them, and the pool validator assumes
// them.
func checkSlice(s *resourceapi.ResourceSlice) *sliceError {
	switch {
	case s.Spec.Driver == "":
		return &sliceError{field: "spec.driver", err: errors.New("required")}
	case s.Spec.Pool.Name == "":
		return &sliceError{field: "spec.pool.name", err: errors.New("required")}
	}
	return nil
}
