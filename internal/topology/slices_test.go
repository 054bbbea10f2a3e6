package topology

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/validate/content"
)

// TestLargePoolIsSplitWithinLimits: 32x32 hosts with one chip each and a
// 1x1 shape give 1024 devices (16 device slices of 64) and, with blocks of
// 32 hosts, 32 counter sets (4 counter slices of 8). Names sort in slice
// order, with zero-padded indexes.
func TestLargePoolIsSplitWithinLimits(t *testing.T) {
	spec := Spec{
		Driver: "acc.example.com", Pool: "big", Domain: "d",
		HostGrid: []int{32, 32}, ChipsPerHost: []int{1, 1}, Partitions: []string{"1x1", "2x2"},
		Hosts: fullGrid([]int{32, 32}),
	}
	res, err := Generate(spec, 1)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	checkSlices(t, spec, res.Slices)
	devices := 1024 + 256
	wantSlices := 4 + (devices+63)/64
	if len(res.Slices) != wantSlices || res.Summary.Devices != devices || res.Summary.CounterSets != 32 {
		t.Fatalf("slices/devices/sets = %d/%d/%d, want %d/%d/32", len(res.Slices), res.Summary.Devices, res.Summary.CounterSets, wantSlices, devices)
	}
	var names []string
	for _, s := range res.Slices {
		names = append(names, s.Name)
	}
	if !slices.IsSorted(names) {
		t.Errorf("slice names do not sort in slice order: %v", names)
	}
	if names[0] != "big-counters-0" || names[4] != "big-devices-00" || names[len(names)-1] != fmt.Sprintf("big-devices-%02d", wantSlices-5) {
		t.Errorf("slice names = %v", names)
	}
	// Smallest shape first across slices.
	all := allDevices(res.Slices)
	if !strings.HasPrefix(all[0].Name, "acc-1x1-") || !strings.HasPrefix(all[len(all)-1].Name, "acc-2x2-") {
		t.Errorf("devices are not ordered smallest shape first: %s ... %s", all[0].Name, all[len(all)-1].Name)
	}
}

func TestSliceName(t *testing.T) {
	tests := []struct {
		pool         string
		kind         string
		index, count int
		want         string
	}{
		{"tpu-a", "devices", 0, 1, "tpu-a-devices-0"},
		{"tpu-a", "devices", 9, 10, "tpu-a-devices-9"},
		{"tpu-a", "devices", 3, 11, "tpu-a-devices-03"},
		{"tpu-a", "counters", 12, 101, "tpu-a-counters-012"},
		{"example.com/tpu-a", "devices", 0, 1, "example.com-tpu-a-devices-0"},
	}
	for _, tt := range tests {
		if got := sliceName(tt.pool, tt.kind, tt.index, tt.count); got != tt.want {
			t.Errorf("sliceName(%q, %q, %d, %d) = %q, want %q", tt.pool, tt.kind, tt.index, tt.count, got, tt.want)
		}
	}
	// A pool name at the length limit gives valid, distinct slice names.
	a := strings.Repeat("a", 240) + "." + strings.Repeat("b", 12)
	b := strings.Repeat("a", 240) + "." + strings.Repeat("c", 12)
	na, nb := sliceName(a, "devices", 0, 1), sliceName(b, "devices", 0, 1)
	for _, n := range []string{na, nb} {
		if msgs := content.IsDNS1123Subdomain(n); len(msgs) > 0 {
			t.Errorf("slice name %q: %v", n, msgs)
		}
	}
	if na == nb {
		t.Errorf("two long pool names give the same slice name %q", na)
	}
}
