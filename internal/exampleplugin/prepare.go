package exampleplugin

import (
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// Prepared is one device of a claim as prepared for containers.
type Prepared struct {
	// Requests are the claim's requests the device serves.
	Requests []string
	// Device is the published device.
	Device DeviceInfo
}

// DeviceRecord is the content of the file a container sees for each
// prepared device: which device, of which claim.
type DeviceRecord struct {
	Driver    string    `json:"driver"`
	Pool      string    `json:"pool"`
	Device    string    `json:"device"`
	UUID      string    `json:"uuid,omitempty"`
	Requests  []string  `json:"requests"`
	Claim     string    `json:"claim"`
	ClaimUID  types.UID `json:"claimUID"`
	Namespace string    `json:"namespace"`
}

// PlanClaim lists the devices of this driver that a claim's allocation
// holds, checked against the inventory. A result of this driver naming a
// device the plugin never published (another pool, an unknown name) is an
// error: preparing it would hand out something that does not exist.
// Results of other drivers are skipped; devices that serve several
// requests are listed once.
func PlanClaim(driver string, inv *Inventory, claim *resourceapi.ResourceClaim) ([]Prepared, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	byDevice := map[string]*Prepared{}
	var order []string
	for i, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driver {
			continue
		}
		if r.Pool != inv.Pool {
			return nil, fmt.Errorf("claim %s/%s: result %d: pool %q is not this node's pool %q", claim.Namespace, claim.Name, i, r.Pool, inv.Pool)
		}
		info, ok := inv.Devices[r.Device]
		if !ok {
			return nil, fmt.Errorf("claim %s/%s: result %d: device %q is not published by this plugin", claim.Namespace, claim.Name, i, r.Device)
		}
		p, seen := byDevice[r.Device]
		if !seen {
			p = &Prepared{Device: info}
			byDevice[r.Device] = p
			order = append(order, r.Device)
		}
		p.Requests = append(p.Requests, r.Request)
	}
	out := make([]Prepared, 0, len(order))
	for _, d := range order {
		out = append(out, *byDevice[d])
	}
	return out, nil
}

// Conflicts returns the devices of want that another claim holds
// (prepared maps each prepared device to its claim's UID): the last check
// against handing one device to two workloads.
func Conflicts(claim types.UID, want []Prepared, prepared map[string]types.UID) []string {
	var out []string
	for _, p := range want {
		if owner, ok := prepared[p.Device.Name]; ok && owner != claim {
			out = append(out, fmt.Sprintf("%s (prepared for claim %s)", p.Device.Name, owner))
		}
	}
	return out
}

// CDI names. A spec's kind is "<driver>/device"; a device's CDI name is
// the claim's UID and the device name, unique per preparation as the CDI
// cache requires.
const (
	cdiVersion = "0.6.0"
	cdiClass   = "device"
)

// ContainerDir is where a container finds one file per prepared device
// of a driver: /var/run/drastack/<driver>/<device>.json.
func ContainerDir(driver string) string { return path.Join("/var/run/drastack", driver) }

// cdiSpec is the part of the CDI specification this plugin writes.
type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string         `json:"name"`
	ContainerEdits containerEdits `json:"containerEdits"`
}

type containerEdits struct {
	Env    []string   `json:"env,omitempty"`
	Mounts []cdiMount `json:"mounts,omitempty"`
}

type cdiMount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Options       []string `json:"options,omitempty"`
}

// CDISpecFile is the name of a claim's CDI spec file in the CDI folder.
func CDISpecFile(driver string, claim types.UID) string {
	return strings.ReplaceAll(driver, "/", "_") + "_" + string(claim) + ".json"
}

// CDISpec is a claim's CDI spec and what the kubelet is told: for each
// device, an environment variable whose value is driver/pool/device, and
// the device's record file (recordPath gives its path on the node)
// mounted read-only at ContainerDir/<device>.json.
func CDISpec(driver string, claim types.UID, devices []Prepared, recordPath func(device string) string) ([]byte, []kubeletplugin.Device, error) {
	spec := cdiSpec{Version: cdiVersion, Kind: driver + "/" + cdiClass}
	var result []kubeletplugin.Device
	for _, p := range devices {
		name := string(claim) + "-" + p.Device.Name
		spec.Devices = append(spec.Devices, cdiDevice{
			Name: name,
			ContainerEdits: containerEdits{
				Env: []string{envName(p.Device.Name) + "=" + driver + "/" + p.Device.Pool + "/" + p.Device.Name},
				Mounts: []cdiMount{{
					HostPath:      recordPath(p.Device.Name),
					ContainerPath: path.Join(ContainerDir(driver), p.Device.Name+".json"),
					Options:       []string{"ro", "bind"},
				}},
			},
		})
		result = append(result, kubeletplugin.Device{
			Requests:     append([]string(nil), p.Requests...),
			PoolName:     p.Device.Pool,
			DeviceName:   p.Device.Name,
			CDIDeviceIDs: []string{spec.Kind + "=" + name},
		})
	}
	sort.Slice(spec.Devices, func(i, j int) bool { return spec.Devices[i].Name < spec.Devices[j].Name })
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("encode CDI spec: %w", err)
	}
	return data, result, nil
}
