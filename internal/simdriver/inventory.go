package simdriver

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Inventory is the simulated hardware of every node, read from YAML.
type Inventory struct {
	// Topology describes the PCIe layout shared by all drivers of a node.
	Topology Topology `json:"topology,omitempty"`
	// Drivers each publish one pool per matching node.
	Drivers []DriverSpec `json:"drivers"`
}

// Topology is the PCIe layout of a simulated node.
type Topology struct {
	// PCIeRoots is the number of PCIe root complexes per node, named
	// pci0000:00, pci0000:01, ... Devices of each kind are spread over
	// them in contiguous blocks, so device i of every kind shares a root
	// when the counts match. Default 2.
	PCIeRoots int `json:"pcieRoots,omitempty"`
}

// DriverSpec is one simulated DRA driver.
type DriverSpec struct {
	// Name is the driver name (a DNS subdomain of at most 63 characters).
	Name string `json:"name"`
	// NodeSelector lists labels a node must have to get this driver's
	// devices. Empty selects every node.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Pool, if set, is appended to the node name to form the pool name
	// ("<node>-<pool>"); by default the pool is named after the node, as
	// kubelet plugins do. Two entries of one driver on one node need
	// different pools.
	Pool string `json:"pool,omitempty"`
	// Broken publishes a deliberately invalid pool, for demonstrations
	// and validator tests: a device consumes a counter that its counter
	// set does not define (MissingCounter), or, when nothing in the pool
	// uses counters, an extra device consumes from a counter set that does
	// not exist (MissingCounterSet). The resourceslice controller refuses
	// such pools, so they are written directly; a broken entry therefore
	// needs a driver name that no valid entry uses.
	Broken bool `json:"broken,omitempty"`
	// Devices are the device groups of each node's pool, in order.
	Devices []DeviceGroup `json:"devices"`
}

// Device kinds.
const (
	KindGPU = "gpu"
	KindNIC = "nic"
	KindCPU = "cpu"
)

// DeviceGroup is a number of identical devices.
type DeviceGroup struct {
	// Kind is gpu, nic or cpu.
	Kind string `json:"kind"`
	// Count is the number of devices (at least 1).
	Count int `json:"count"`
	// Model is published as the model attribute. Defaults per kind.
	Model string `json:"model,omitempty"`
	// Memory is a GPU's memory capacity. Default 40Gi.
	Memory string `json:"memory,omitempty"`
	// Partitions, on a GPU, publishes MIG-like partitions backed by shared
	// counters. The only profile table is "a100-40gb" (KEP-4815).
	Partitions string `json:"partitions,omitempty"`
	// Bandwidth is a NIC's bandwidth capacity. Default 200G.
	Bandwidth string `json:"bandwidth,omitempty"`
	// Cores is a CPU's core count capacity. Default 32.
	Cores int `json:"cores,omitempty"`
}

// maxGroupCount bounds a device group, so that a typo cannot make the sim
// render millions of devices.
const maxGroupCount = 1024

// maxPCIeRoots keeps a CPU's list-valued pcieRoot attribute well inside the
// 48 attribute values a device may have.
const maxPCIeRoots = 32

// defaultPCIeRoots applies when the inventory does not say.
const defaultPCIeRoots = 2

// LoadInventory reads and validates an inventory file.
func LoadInventory(path string) (*Inventory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	inv, err := ParseInventory(data)
	if err != nil {
		return nil, fmt.Errorf("inventory %s: %w", path, err)
	}
	return inv, nil
}

// ParseInventory decodes YAML strictly (unknown fields are errors, so a
// misspelt key does not silently publish nothing) and validates it.
func ParseInventory(data []byte) (*Inventory, error) {
	var inv Inventory
	if err := yaml.UnmarshalStrict(data, &inv); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	return &inv, nil
}

// pcieRoots is the effective number of PCIe roots per node.
func (inv *Inventory) pcieRoots() int {
	if inv.Topology.PCIeRoots == 0 {
		return defaultPCIeRoots
	}
	return inv.Topology.PCIeRoots
}

// Validate reports every problem of the inventory at once.
func (inv *Inventory) Validate() error {
	var errs []error
	if r := inv.Topology.PCIeRoots; r < 0 || r > maxPCIeRoots {
		errs = append(errs, fmt.Errorf("topology.pcieRoots: %d is outside 1..%d", r, maxPCIeRoots))
	}
	if len(inv.Drivers) == 0 {
		errs = append(errs, errors.New("drivers: at least one driver is needed"))
	}
	brokenDriver := map[string]bool{}
	validDriver := map[string]bool{}
	for i, d := range inv.Drivers {
		at := fmt.Sprintf("drivers[%d]", i)
		if d.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: required", at))
		} else {
			for _, msg := range validation.IsDNS1123Subdomain(d.Name) {
				errs = append(errs, fmt.Errorf("%s.name %q: %s", at, d.Name, msg))
			}
			if len(d.Name) > 63 {
				errs = append(errs, fmt.Errorf("%s.name %q: longer than 63 characters", at, d.Name))
			}
		}
		if d.Pool != "" {
			for _, msg := range validation.IsDNS1123Label(d.Pool) {
				errs = append(errs, fmt.Errorf("%s.pool %q: %s", at, d.Pool, msg))
			}
		}
		if _, err := labels.ValidatedSelectorFromSet(d.NodeSelector); err != nil {
			errs = append(errs, fmt.Errorf("%s.nodeSelector: %w", at, err))
		}
		if d.Broken {
			brokenDriver[d.Name] = true
		} else {
			validDriver[d.Name] = true
		}
		if len(d.Devices) == 0 {
			errs = append(errs, fmt.Errorf("%s.devices: at least one device group is needed", at))
		}
		for j, g := range d.Devices {
			if err := g.validate(); err != nil {
				errs = append(errs, fmt.Errorf("%s.devices[%d]: %w", at, j, err))
			}
		}
	}
	for name := range brokenDriver {
		if validDriver[name] {
			errs = append(errs, fmt.Errorf("driver %q has broken and valid entries: the slice controller of the valid pools would delete the broken pool's slices, give the broken entry a driver name of its own", name))
		}
	}
	return errors.Join(errs...)
}

func (g DeviceGroup) validate() error {
	var errs []error
	if g.Count < 1 || g.Count > maxGroupCount {
		errs = append(errs, fmt.Errorf("count: %d is outside 1..%d", g.Count, maxGroupCount))
	}
	if len(g.Model) > 64 {
		errs = append(errs, errors.New("model: longer than 64 characters"))
	}
	checkQuantity := func(field, value string) {
		if value == "" {
			return
		}
		if q, err := resource.ParseQuantity(value); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		} else if q.Sign() <= 0 {
			errs = append(errs, fmt.Errorf("%s: %s is not positive", field, value))
		}
	}
	notFor := func(field string, set bool) {
		if set {
			errs = append(errs, fmt.Errorf("%s: not a field of kind %s", field, g.Kind))
		}
	}
	switch g.Kind {
	case KindGPU:
		checkQuantity("memory", g.Memory)
		if g.Partitions != "" && g.Partitions != ProfileA100_40GB {
			errs = append(errs, fmt.Errorf("partitions: unknown profile table %q (known: %s)", g.Partitions, ProfileA100_40GB))
		}
		notFor("bandwidth", g.Bandwidth != "")
		notFor("cores", g.Cores != 0)
	case KindNIC:
		checkQuantity("bandwidth", g.Bandwidth)
		notFor("memory", g.Memory != "")
		notFor("partitions", g.Partitions != "")
		notFor("cores", g.Cores != 0)
	case KindCPU:
		if g.Cores < 0 {
			errs = append(errs, fmt.Errorf("cores: %d is negative", g.Cores))
		}
		notFor("memory", g.Memory != "")
		notFor("partitions", g.Partitions != "")
		notFor("bandwidth", g.Bandwidth != "")
	default:
		errs = append(errs, fmt.Errorf("kind: %q is not one of %s", g.Kind, strings.Join([]string{KindGPU, KindNIC, KindCPU}, ", ")))
	}
	return errors.Join(errs...)
}

// Matches reports whether a node with these labels gets the driver's pool.
func (d DriverSpec) Matches(nodeLabels map[string]string) bool {
	for k, v := range d.NodeSelector {
		if got, ok := nodeLabels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
