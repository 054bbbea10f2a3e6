package scenarios

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/drastack/drastack/internal/allocator"
)

// scenario is one directory: cluster.yaml (Nodes, DeviceClasses,
// ResourceSlices and ResourceClaims; claims with status.allocation are
// already allocated) and expect.yaml (the claims to allocate, in order, and
// what each must get).
type scenario struct {
	name   string
	inputs allocator.Inputs
	claims map[string]*resourceapi.ResourceClaim
	expect expectation
}

type expectation struct {
	Description string `json:"description"`
	Steps       []step `json:"steps"`
}

// step allocates one claim (and records it when allocated).
type step struct {
	Claim string `json:"claim"`
	// Node is passed as Options.Node when set.
	OnNode string `json:"onNode,omitempty"`
	// Unsatisfiable expects ErrUnsatisfiable.
	Unsatisfiable bool `json:"unsatisfiable,omitempty"`
	// Devices are "request=driver/pool/device", in any order.
	Devices []string `json:"devices,omitempty"`
	// Node is the expected Result.Node when set ("" means none).
	Node *string `json:"node,omitempty"`
	// NodeSelectorValues are the values the allocation's node selector
	// must list (for devices with their own selectors).
	NodeSelectorValues []string `json:"nodeSelectorValues,omitempty"`
}

var separator = regexp.MustCompile(`(?m)^---\s*$`)

func loadScenario(dir string) (*scenario, error) {
	sc := &scenario{name: filepath.Base(dir), claims: map[string]*resourceapi.ResourceClaim{}}
	raw, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	if err != nil {
		return nil, err
	}
	for i, doc := range separator.Split(string(raw), -1) {
		if len(bytes.TrimSpace([]byte(stripComments(doc)))) == 0 {
			continue
		}
		if err := sc.add([]byte(doc)); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", dir, i, err)
		}
	}
	raw, err = os.ReadFile(filepath.Join(dir, "expect.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(raw, &sc.expect); err != nil {
		return nil, fmt.Errorf("%s: expect.yaml: %w", dir, err)
	}
	return sc, nil
}

func (sc *scenario) add(doc []byte) error {
	var meta struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return err
	}
	switch meta.Kind {
	case "Node":
		var n corev1.Node
		if err := yaml.UnmarshalStrict(doc, &n); err != nil {
			return err
		}
		sc.inputs.Nodes = append(sc.inputs.Nodes, &n)
	case "DeviceClass":
		var c resourceapi.DeviceClass
		if err := yaml.UnmarshalStrict(doc, &c); err != nil {
			return err
		}
		sc.inputs.Classes = append(sc.inputs.Classes, &c)
	case "ResourceSlice":
		var s resourceapi.ResourceSlice
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			return err
		}
		sc.inputs.Slices = append(sc.inputs.Slices, &s)
	case "ResourceClaim":
		var c resourceapi.ResourceClaim
		if err := yaml.UnmarshalStrict(doc, &c); err != nil {
			return err
		}
		if c.Status.Allocation != nil {
			sc.inputs.Allocated = append(sc.inputs.Allocated, &c)
		} else {
			sc.claims[c.Name] = &c
		}
	default:
		return fmt.Errorf("unsupported kind %q", meta.Kind)
	}
	return nil
}

var comment = regexp.MustCompile(`(?m)^\s*#.*$`)

func stripComments(doc string) string { return comment.ReplaceAllString(doc, "") }
