// Package exampleplugin is the DRA kubelet plugin that the example driver
// profile deploys by default (cmd/drastack-example-plugin): simulated GPUs
// that a container can see. It publishes the devices of its node, GPUs
// that kube-scheduler may hand out whole or as MIG-like partitions backed
// by shared counters (the same device model as the simulated driver of
// internal/simdriver), and prepares a claim's devices through CDI: for each device
// an environment variable and a mounted file naming it, so that the
// container can tell exactly which devices it got.
//
// The decisions (what to publish, what a claim's preparation consists of,
// the CDI spec) are pure functions; Driver does the file system work and
// implements kubeletplugin.DRAPlugin.
package exampleplugin

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/drastack/drastack/internal/simdriver"
)

// Config is what the plugin is told by its environment.
type Config struct {
	// DriverName is the DRA driver name it publishes under.
	DriverName string
	// NodeName is its node, which names its pool.
	NodeName string
	// GPUs is how many GPUs the node has.
	GPUs int
	// Partitions is the MIG profile table of each GPU (sim's
	// "a100-40gb"), or empty for whole GPUs only.
	Partitions string
	// Model is published as each GPU's model attribute.
	Model string
}

// maxGPUs bounds GPUs: with partitions each GPU is 26 devices.
const maxGPUs = 64

// Validate names the first field the plugin cannot run with.
func (c Config) Validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(c.DriverName); c.DriverName == "" || len(msgs) > 0 || len(c.DriverName) > 63 {
		errs = append(errs, fmt.Errorf("driver name %q: must be a DNS subdomain of at most 63 characters", c.DriverName))
	}
	if msgs := validation.IsDNS1123Subdomain(c.NodeName); c.NodeName == "" || len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("node name %q: must be a node's name", c.NodeName))
	}
	if c.GPUs < 1 || c.GPUs > maxGPUs {
		errs = append(errs, fmt.Errorf("number of GPUs %d: must be 1 to %d", c.GPUs, maxGPUs))
	}
	if c.Partitions != "" && c.Partitions != simdriver.ProfileA100_40GB {
		errs = append(errs, fmt.Errorf("partitions %q: the only profile table is %q (or empty for whole GPUs)", c.Partitions, simdriver.ProfileA100_40GB))
	}
	return errors.Join(errs...)
}

// DeviceInfo is what the plugin knows of one published device.
type DeviceInfo struct {
	// Pool and Name identify the device.
	Pool, Name string
	// UUID is its uuid attribute.
	UUID string
}

// Inventory is what the plugin publishes and prepares.
type Inventory struct {
	// Resources is the driver's pool, for the slice publisher.
	Resources resourceslice.DriverResources
	// Devices are every published device by name.
	Devices map[string]DeviceInfo
	// Pool is the pool's name (the node's).
	Pool string
}

// NewInventory renders the node's devices with the simulated driver's
// device model: one pool named after the node.
func NewInventory(c Config) (*Inventory, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	inv := &simdriver.Inventory{Drivers: []simdriver.DriverSpec{{
		Name:    c.DriverName,
		Devices: []simdriver.DeviceGroup{{Kind: simdriver.KindGPU, Count: c.GPUs, Model: c.Model, Partitions: c.Partitions}},
	}}}
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	pools, err := simdriver.Render(inv, c.NodeName, nil)
	if err != nil {
		return nil, err
	}
	if len(pools) != 1 {
		return nil, fmt.Errorf("the device model rendered %d pools, want 1", len(pools))
	}
	p := pools[0]
	out := &Inventory{
		Resources: resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{p.Name: {Slices: p.Slices}}},
		Devices:   map[string]DeviceInfo{},
		Pool:      p.Name,
	}
	for _, s := range p.Slices {
		for _, d := range s.Devices {
			out.Devices[d.Name] = DeviceInfo{Pool: p.Name, Name: d.Name, UUID: stringAttr(d, "uuid")}
		}
	}
	return out, nil
}

func stringAttr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// envName is the environment variable that names a device in a
// container: DRASTACK_DEVICE_ and the device name in capitals, dashes as
// underscores (device names are DNS labels).
func envName(device string) string {
	return "DRASTACK_DEVICE_" + strings.ToUpper(nonWord.ReplaceAllString(device, "_"))
}

var nonWord = regexp.MustCompile(`[^A-Za-z0-9_]`)
