package exampleplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// Driver implements kubeletplugin.DRAPlugin on the file system: a
// claim's preparation is a folder of device records under the plugin's
// data folder and a CDI spec in the CDI folder; unpreparing removes both.
// It keeps no state in memory, so a restarted or upgraded plugin
// unprepares what its predecessor prepared.
type Driver struct {
	name string

	mu  sync.RWMutex
	inv *Inventory

	// cdiDir is the node's CDI spec folder; dataDir the plugin's data
	// folder, at the same path in the plugin's container as on the node
	// (the CDI mounts name it).
	cdiDir, dataDir string
	// fatal is called with an error the plugin cannot recover from.
	fatal func(error)
	// dropped is called when the API server dropped fields of the
	// published slices (a feature the cluster does not serve); nil makes
	// that fatal too.
	dropped func(*resourceslice.DroppedFieldsError)
	// healthEvery is how often device health is reported again.
	healthEvery time.Duration
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// NewDriver makes the plugin's handler. fatal is called (once or more)
// when publishing fails for good; the caller stops the process. dropped,
// if set, is called instead when the API server dropped fields of the
// slices, so that the caller can publish what the cluster serves.
func NewDriver(cfg Config, inv *Inventory, cdiDir, dataDir string, fatal func(error), dropped func(*resourceslice.DroppedFieldsError)) *Driver {
	return &Driver{name: cfg.DriverName, inv: inv, cdiDir: cdiDir, dataDir: dataDir, fatal: fatal, dropped: dropped, healthEvery: 10 * time.Second}
}

// SetInventory replaces what the plugin prepares and reports health for,
// after the caller published another inventory.
func (d *Driver) SetInventory(inv *Inventory) {
	d.mu.Lock()
	d.inv = inv
	d.mu.Unlock()
}

func (d *Driver) inventory() *Inventory {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.inv
}

// claimsDir holds one folder per prepared claim.
func (d *Driver) claimsDir() string { return filepath.Join(d.dataDir, "claims") }

func (d *Driver) recordPath(claim types.UID, device string) string {
	return filepath.Join(d.claimsDir(), string(claim), device+".json")
}

// preparedDevices maps every device prepared on this node to its claim.
func (d *Driver) preparedDevices() (map[string]types.UID, error) {
	out := map[string]types.UID{}
	claims, err := os.ReadDir(d.claimsDir())
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read prepared claims: %w", err)
	}
	for _, c := range claims {
		files, err := os.ReadDir(filepath.Join(d.claimsDir(), c.Name()))
		if err != nil {
			return nil, fmt.Errorf("read prepared claim %s: %w", c.Name(), err)
		}
		for _, f := range files {
			if name, ok := strings.CutSuffix(f.Name(), ".json"); ok {
				out[name] = types.UID(c.Name())
			}
		}
	}
	return out, nil
}

// PrepareResourceClaims writes each claim's device records and CDI spec.
// It is idempotent: preparing a prepared claim writes the same files.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	logger := klog.FromContext(ctx)
	prepared, err := d.preparedDevices()
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := d.prepare(claim, prepared)
		if err != nil {
			logger.Error(err, "Prepare failed", "claim", klog.KObj(claim))
			out[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		for _, dev := range devices {
			prepared[dev.DeviceName] = claim.UID
		}
		logger.Info("Prepared", "claim", klog.KObj(claim), "devices", len(devices))
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devices}
	}
	return out, nil
}

func (d *Driver) prepare(claim *resourceapi.ResourceClaim, prepared map[string]types.UID) ([]kubeletplugin.Device, error) {
	want, err := PlanClaim(d.name, d.inventory(), claim)
	if err != nil {
		return nil, err
	}
	if busy := Conflicts(claim.UID, want, prepared); len(busy) > 0 {
		return nil, fmt.Errorf("claim %s/%s: devices already prepared for other claims: %s", claim.Namespace, claim.Name, strings.Join(busy, ", "))
	}
	for _, p := range want {
		rec, err := json.MarshalIndent(DeviceRecord{
			Driver: d.name, Pool: p.Device.Pool, Device: p.Device.Name, UUID: p.Device.UUID, Requests: p.Requests,
			Claim: claim.Name, ClaimUID: claim.UID, Namespace: claim.Namespace,
		}, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encode device record: %w", err)
		}
		if err := writeAtomically(d.recordPath(claim.UID, p.Device.Name), append(rec, '\n')); err != nil {
			return nil, err
		}
	}
	spec, devices, err := CDISpec(d.name, claim.UID, want, func(device string) string { return d.recordPath(claim.UID, device) })
	if err != nil {
		return nil, err
	}
	if err := writeAtomically(filepath.Join(d.cdiDir, CDISpecFile(d.name, claim.UID)), spec); err != nil {
		return nil, err
	}
	return devices, nil
}

// UnprepareResourceClaims removes each claim's CDI spec and records. A
// claim that is not prepared is not an error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	logger := klog.FromContext(ctx)
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		var err error
		if rmErr := os.Remove(filepath.Join(d.cdiDir, CDISpecFile(d.name, c.UID))); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			err = fmt.Errorf("remove CDI spec of claim %s: %w", c, rmErr)
		}
		if rmErr := os.RemoveAll(filepath.Join(d.claimsDir(), string(c.UID))); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove device records of claim %s: %w", c, rmErr))
		}
		out[c.UID] = err
		logger.Info("Unprepared", "claim", c.String(), "err", err)
	}
	return out, nil
}

// HandleError logs background errors. Dropped fields go to dropped;
// another error the helper cannot recover from (slices that can never be
// published) ends the plugin through fatal.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) && d.dropped != nil {
		d.dropped(dropped)
		return
	}
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.fatal != nil {
		d.fatal(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus reports every device Healthy, again every healthEvery
// (well inside the kubelet's 30 s before a device's health turns
// Unknown): simulated devices do not fail.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	for {
		inv := d.inventory()
		names := make([]string, 0, len(inv.Devices))
		for n := range inv.Devices {
			names = append(names, n)
		}
		sort.Strings(names)
		now := time.Now()
		report := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, len(names))}
		for i, n := range names {
			report.Devices[i] = kubeletplugin.DeviceHealth{
				PoolName: inv.Pool, DeviceName: n, Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now,
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d.healthEvery):
		}
	}
}

// writeAtomically writes a file through a temporary file and a rename, so
// that containerd never reads half a CDI spec.
func writeAtomically(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
