package exampleplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/drastack/drastack/internal/simdriver"
)

const driver = "gpu.example.com"

func config(gpus int, partitions string) Config {
	return Config{DriverName: driver, NodeName: "node-a", GPUs: gpus, Partitions: partitions, Model: "example-gpu"}
}

func inventory(t *testing.T, gpus int, partitions string) *Inventory {
	t.Helper()
	inv, err := NewInventory(config(gpus, partitions))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"good", func(*Config) {}, ""},
		{"no driver", func(c *Config) { c.DriverName = "" }, "driver name"},
		{"driver not DNS", func(c *Config) { c.DriverName = "GPU_x" }, "driver name"},
		{"no node", func(c *Config) { c.NodeName = "" }, "node name"},
		{"no GPUs", func(c *Config) { c.GPUs = 0 }, "number of GPUs 0"},
		{"too many GPUs", func(c *Config) { c.GPUs = maxGPUs + 1 }, "number of GPUs"},
		{"unknown partitions", func(c *Config) { c.Partitions = "h100" }, "partitions \"h100\""},
	}
	for _, tt := range tests {
		c := config(2, simdriver.ProfileA100_40GB)
		tt.change(&c)
		err := c.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestNewInventory(t *testing.T) {
	whole := inventory(t, 3, "")
	if whole.Pool != "node-a" || len(whole.Devices) != 3 {
		t.Fatalf("whole GPUs: pool %s, %d devices", whole.Pool, len(whole.Devices))
	}
	parts := inventory(t, 2, simdriver.ProfileA100_40GB)
	// Each A100 40GB: the whole GPU and 25 MIG placements (KEP-4815 table).
	if len(parts.Devices) != 2*26 {
		t.Fatalf("partitioned: %d devices, want %d", len(parts.Devices), 2*26)
	}
	pool := parts.Resources.Pools["node-a"]
	var counterSets, consumers int
	for _, s := range pool.Slices {
		counterSets += len(s.SharedCounters)
		for _, d := range s.Devices {
			if len(d.ConsumesCounters) > 0 {
				consumers++
			}
		}
	}
	if counterSets != 2 || consumers != 2*26 {
		t.Errorf("partitioned: %d counter sets, %d consuming devices", counterSets, consumers)
	}
	for name, d := range parts.Devices {
		if d.Name != name || d.Pool != "node-a" || d.UUID == "" {
			t.Errorf("device %s: %+v", name, d)
		}
	}
	if _, err := NewInventory(Config{}); err == nil {
		t.Error("an empty configuration was accepted")
	}
}

func claim(uid string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-" + uid, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results},
		}},
	}
}

func result(request, drv, pool, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: drv, Pool: pool, Device: device}
}

func TestPlanClaim(t *testing.T) {
	inv := inventory(t, 2, simdriver.ProfileA100_40GB)
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  []string // device:requests
		err   string
	}{
		{"one device", claim("1", result("gpu", driver, "node-a", "gpu-0")), []string{"gpu-0:gpu"}, ""},
		{"other drivers skipped", claim("2", result("nic", "nic.example.com", "node-a", "nic-0"), result("gpu", driver, "node-a", "gpu-1")), []string{"gpu-1:gpu"}, ""},
		{"two requests on one device", claim("3", result("a", driver, "node-a", "gpu-0-mig-1g-5gb-0"), result("b", driver, "node-a", "gpu-0-mig-1g-5gb-0")),
			[]string{"gpu-0-mig-1g-5gb-0:a,b"}, ""},
		{"nothing of this driver", claim("4", result("nic", "nic.example.com", "node-a", "nic-0")), nil, ""},
		{"another pool", claim("5", result("gpu", driver, "node-b", "gpu-0")), nil, `pool "node-b" is not this node's pool`},
		{"unknown device", claim("6", result("gpu", driver, "node-a", "gpu-9")), nil, `device "gpu-9" is not published`},
		{"not allocated", &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, nil, "not allocated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PlanClaim(driver, inv, tt.claim)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var flat []string
			for _, p := range got {
				flat = append(flat, p.Device.Name+":"+strings.Join(p.Requests, ","))
			}
			if !slices.Equal(flat, tt.want) {
				t.Errorf("got %v, want %v", flat, tt.want)
			}
		})
	}
}

func TestConflicts(t *testing.T) {
	want := []Prepared{{Device: DeviceInfo{Name: "gpu-0"}}, {Device: DeviceInfo{Name: "gpu-1"}}}
	prepared := map[string]types.UID{"gpu-0": "same", "gpu-1": "other"}
	got := Conflicts("same", want, prepared)
	if len(got) != 1 || !strings.Contains(got[0], "gpu-1 (prepared for claim other)") {
		t.Errorf("got %v", got)
	}
	if got := Conflicts("same", want, nil); got != nil {
		t.Errorf("nothing prepared: %v", got)
	}
}

func TestCDISpec(t *testing.T) {
	devices := []Prepared{
		{Requests: []string{"r"}, Device: DeviceInfo{Pool: "node-a", Name: "gpu-1"}},
		{Requests: []string{"r", "s"}, Device: DeviceInfo{Pool: "node-a", Name: "gpu-0-mig-1g-5gb-3"}},
	}
	data, result, err := CDISpec(driver, "uid-1", devices, func(d string) string { return "/plugins/" + d + ".json" })
	if err != nil {
		t.Fatal(err)
	}
	var spec cdiSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Version != "0.6.0" || spec.Kind != "gpu.example.com/device" || len(spec.Devices) != 2 {
		t.Fatalf("spec %s", data)
	}
	byName := map[string]cdiDevice{}
	for _, d := range spec.Devices {
		byName[d.Name] = d
	}
	d := byName["uid-1-gpu-0-mig-1g-5gb-3"]
	if len(d.ContainerEdits.Env) != 1 || d.ContainerEdits.Env[0] != "DRASTACK_DEVICE_GPU_0_MIG_1G_5GB_3=gpu.example.com/node-a/gpu-0-mig-1g-5gb-3" {
		t.Errorf("env %v", d.ContainerEdits.Env)
	}
	if len(d.ContainerEdits.Mounts) != 1 ||
		(d.ContainerEdits.Mounts[0].HostPath != "/plugins/gpu-0-mig-1g-5gb-3.json" ||
			d.ContainerEdits.Mounts[0].ContainerPath != "/var/run/drastack/gpu.example.com/gpu-0-mig-1g-5gb-3.json" ||
			!slices.Equal(d.ContainerEdits.Mounts[0].Options, []string{"ro", "bind"})) {
		t.Errorf("mounts %+v", d.ContainerEdits.Mounts)
	}
	if len(result) != 2 || result[1].DeviceName != "gpu-0-mig-1g-5gb-3" || result[1].PoolName != "node-a" ||
		!slices.Equal(result[1].Requests, []string{"r", "s"}) || !slices.Equal(result[1].CDIDeviceIDs, []string{"gpu.example.com/device=uid-1-gpu-0-mig-1g-5gb-3"}) {
		t.Errorf("result %+v", result)
	}
}

func newTestDriver(t *testing.T) (*Driver, string, string) {
	t.Helper()
	cdi, data := t.TempDir(), t.TempDir()
	return NewDriver(config(2, simdriver.ProfileA100_40GB), inventory(t, 2, simdriver.ProfileA100_40GB), cdi, data, nil, nil), cdi, data
}

func TestDriverPrepareUnprepare(t *testing.T) {
	d, cdi, data := newTestDriver(t)
	ctx := context.Background()
	c1 := claim("uid-1", result("gpu", driver, "node-a", "gpu-0"), result("mig", driver, "node-a", "gpu-1-mig-1g-5gb-2"))
	for range 2 { // idempotent
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c1})
		if err != nil || res["uid-1"].Err != nil || len(res["uid-1"].Devices) != 2 {
			t.Fatalf("prepare: %+v %v", res, err)
		}
	}
	specPath := filepath.Join(cdi, CDISpecFile(driver, "uid-1"))
	if _, err := os.Stat(specPath); err != nil {
		t.Fatalf("no CDI spec: %v", err)
	}
	recData, err := os.ReadFile(filepath.Join(data, "claims", "uid-1", "gpu-1-mig-1g-5gb-2.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec DeviceRecord
	if err := json.Unmarshal(recData, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Device != "gpu-1-mig-1g-5gb-2" || rec.ClaimUID != "uid-1" || rec.Claim != "c-uid-1" || rec.Namespace != "ns" || rec.UUID == "" {
		t.Errorf("record %+v", rec)
	}

	// A second claim for a device the first holds fails alone.
	c2 := claim("uid-2", result("gpu", driver, "node-a", "gpu-0"))
	c3 := claim("uid-3", result("gpu", driver, "node-a", "gpu-1-mig-1g-5gb-3"))
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c2, c3})
	if err != nil {
		t.Fatal(err)
	}
	if res["uid-2"].Err == nil || !strings.Contains(res["uid-2"].Err.Error(), "gpu-0 (prepared for claim uid-1)") {
		t.Errorf("conflicting claim: %v", res["uid-2"].Err)
	}
	if res["uid-3"].Err != nil {
		t.Errorf("independent claim: %v", res["uid-3"].Err)
	}
	if _, err := os.Stat(filepath.Join(cdi, CDISpecFile(driver, "uid-2"))); !errors.Is(err, os.ErrNotExist) {
		t.Error("a refused claim left a CDI spec")
	}

	objs := []kubeletplugin.NamespacedObject{{UID: "uid-1"}, {UID: "uid-3"}, {UID: "never-prepared"}}
	unres, err := d.UnprepareResourceClaims(ctx, objs)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if unres[o.UID] != nil {
			t.Errorf("unprepare %s: %v", o.UID, unres[o.UID])
		}
	}
	left, _ := os.ReadDir(cdi)
	claims, _ := os.ReadDir(filepath.Join(data, "claims"))
	if len(left) != 0 || len(claims) != 0 {
		t.Errorf("left after unprepare: CDI %v, claims %v", left, claims)
	}
	// Now the device is free for the second claim.
	res, err = d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c2})
	if err != nil || res["uid-2"].Err != nil {
		t.Errorf("after unprepare: %+v %v", res, err)
	}
}

func TestHandleError(t *testing.T) {
	var fatal []error
	var dropped []*resourceslice.DroppedFieldsError
	d := NewDriver(config(1, ""), inventory(t, 1, ""), "", "", func(err error) { fatal = append(fatal, err) },
		func(e *resourceslice.DroppedFieldsError) { dropped = append(dropped, e) })
	ctx := context.Background()
	d.HandleError(ctx, fmt.Errorf("publish: %w", &resourceslice.DroppedFieldsError{PoolName: "node-a"}), "slices")
	d.HandleError(ctx, fmt.Errorf("retry: %w", kubeletplugin.ErrRecoverable), "recoverable")
	d.HandleError(ctx, errors.New("invalid slice"), "fatal")
	if len(dropped) != 1 || dropped[0].PoolName != "node-a" {
		t.Errorf("dropped %v", dropped)
	}
	if len(fatal) != 1 || !strings.Contains(fatal[0].Error(), "fatal: invalid slice") {
		t.Errorf("fatal %v", fatal)
	}
}

func TestWatchHealthStatus(t *testing.T) {
	d, _, _ := newTestDriver(t)
	d.healthEvery = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	for range 2 { // the first report and one repeat
		r := <-reports
		if len(r.Devices) != 52 {
			t.Fatalf("report covers %d devices, want 52", len(r.Devices))
		}
		for _, h := range r.Devices {
			if h.Health != kubeletplugin.HealthStatusHealthy || h.PoolName != "node-a" || h.LastUpdated.IsZero() {
				t.Fatalf("health %+v", h)
			}
		}
	}
	// A changed inventory is what the next report covers.
	d.SetInventory(inventory(t, 1, ""))
	<-reports // possibly built before the change
	if r := <-reports; len(r.Devices) != 1 {
		t.Errorf("after SetInventory: %d devices", len(r.Devices))
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchHealthStatus: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchHealthStatus did not return after cancel")
	}
}

func TestEnvName(t *testing.T) {
	if got := envName("gpu-0-mig-1g-5gb-3"); got != "DRASTACK_DEVICE_GPU_0_MIG_1G_5GB_3" {
		t.Errorf("got %s", got)
	}
}
