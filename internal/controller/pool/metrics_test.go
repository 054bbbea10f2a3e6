package pool

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

func TestMetricsFollowTheBoard(t *testing.T) {
	b := newBoard()
	c := &boardCollector{}
	c.board.Store(b)

	healthy := v1alpha1.DevicePoolStatus{Health: v1alpha1.PoolHealthy,
		Devices: v1alpha1.DeviceCounts{Total: 3, Allocated: 1, Free: 2, Available: 2, Shared: 1,
			Unavailable: v1alpha1.UnavailableDevices{Allocated: 1}},
		CounterSets: []v1alpha1.CounterSetStatus{{Name: "gpu-0", Counters: []v1alpha1.CounterStatus{counter("memory", "40Gi", "10Gi"), counter("encoders", "0", "0")}}},
	}
	b.set(newEntry(pid("a"), &healthy, nil, false, ""))
	invalid := v1alpha1.DevicePoolStatus{Health: v1alpha1.PoolInvalid, Reason: "MissingCounter", Devices: v1alpha1.DeviceCounts{Total: 1, Tainted: 1,
		Unavailable: v1alpha1.UnavailableDevices{PoolUnusable: 1}}}
	b.set(newEntry(pid("b"), &invalid, []poolpkg.Problem{
		{Reason: poolpkg.ReasonMissingCounter, Severity: poolpkg.SeverityError},
		{Reason: poolpkg.ReasonMissingCounter, Severity: poolpkg.SeverityError},
		{Reason: poolpkg.ReasonStaleSlices, Severity: poolpkg.SeverityWarning},
	}, true, ""))

	got := gather(t, c)
	want := []string{
		`drastack_pools{driver="gpu.example.com",health="Degraded"} 0`,
		`drastack_pools{driver="gpu.example.com",health="Healthy"} 1`,
		`drastack_pools{driver="gpu.example.com",health="Incomplete"} 0`,
		`drastack_pools{driver="gpu.example.com",health="Invalid"} 1`,
		`drastack_pool_health{driver="gpu.example.com",health="Healthy",pool="a",reason=""} 1`,
		`drastack_pool_health{driver="gpu.example.com",health="Invalid",pool="b",reason="MissingCounter"} 1`,
		`drastack_pool_devices{driver="gpu.example.com",pool="a",state="allocated"} 1`,
		`drastack_pool_devices{driver="gpu.example.com",pool="a",state="free"} 2`,
		`drastack_pool_devices{driver="gpu.example.com",pool="a",state="tainted"} 0`,
		`drastack_pool_devices{driver="gpu.example.com",pool="b",state="allocated"} 0`,
		`drastack_pool_devices{driver="gpu.example.com",pool="b",state="free"} 0`,
		`drastack_pool_devices{driver="gpu.example.com",pool="b",state="tainted"} 1`,
		// The exclusive breakdown: available and unavailable_* add up to
		// the total.
		`drastack_pool_devices{driver="gpu.example.com",pool="a",state="available"} 2`,
		`drastack_pool_devices{driver="gpu.example.com",pool="a",state="shared"} 1`,
		`drastack_pool_devices{driver="gpu.example.com",pool="a",state="unavailable_pool_unusable"} 0`,
		`drastack_pool_devices{driver="gpu.example.com",pool="a",state="unavailable_allocated"} 1`,
		`drastack_pool_devices{driver="gpu.example.com",pool="a",state="unavailable_tainted"} 0`,
		`drastack_pool_devices{driver="gpu.example.com",pool="a",state="unavailable_blocked_by_counters"} 0`,
		`drastack_pool_devices{driver="gpu.example.com",pool="b",state="available"} 0`,
		`drastack_pool_devices{driver="gpu.example.com",pool="b",state="shared"} 0`,
		`drastack_pool_devices{driver="gpu.example.com",pool="b",state="unavailable_pool_unusable"} 1`,
		`drastack_pool_devices{driver="gpu.example.com",pool="b",state="unavailable_allocated"} 0`,
		`drastack_pool_devices{driver="gpu.example.com",pool="b",state="unavailable_tainted"} 0`,
		`drastack_pool_devices{driver="gpu.example.com",pool="b",state="unavailable_blocked_by_counters"} 0`,
		// encoders has capacity 0: no ratio.
		`drastack_pool_counter_utilization_ratio{counter="memory",counter_set="gpu-0",driver="gpu.example.com",pool="a"} 0.25`,
		`drastack_pool_problems{driver="gpu.example.com",pool="b",reason="MissingCounter",severity="Error"} 2`,
		`drastack_pool_problems{driver="gpu.example.com",pool="b",reason="StaleSlices",severity="Warning"} 1`,
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("metrics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A removed pool takes its series with it.
	b.remove(pid("b"))
	for _, line := range gather(t, c) {
		if strings.Contains(line, `pool="b"`) || strings.Contains(line, `health="Invalid"} 1`) {
			t.Errorf("left after removing pool b: %s", line)
		}
	}
}

// gather scrapes c through a private registry and renders each sample as
// name{labels} value, sorted.
func gather(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", f.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}

func counter(name, capacity, consumed string) v1alpha1.CounterStatus {
	return v1alpha1.CounterStatus{Name: name, Capacity: mustQuantity(capacity), Consumed: mustQuantity(consumed)}
}
