package pool

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

// Fragmentation metrics (README "Metrics").
const (
	metricFreeCapacity     = "drastack_pool_free_counter_sets"
	metricLargestAvailable = "drastack_pool_largest_available_counter_sets"
)

var (
	descFreeCapacity = prometheus.NewDesc(metricFreeCapacity,
		"Free capacity of each pool's shared counters, in counter sets (a GPU, the chips of a host): each set's free share, averaged over its counters, summed; whole counts the counter sets nothing consumes. Pools without counter sets have no series.",
		[]string{"driver", "pool", "kind"}, nil)
	descLargestAvailable = prometheus.NewDesc(metricLargestAvailable,
		"Size in counter sets of the largest partitionable device each pool with counter sets could give now (not allocated, its counters free, taints aside; 0 when there is none), labelled with its partition type: next to the free capacity, how fragmented the pool is.",
		[]string{"driver", "pool", "partition_type"}, nil)
)

// fragmentation maps the report's fragmentation, reusing the previous
// status's when it says the same (statuses are never modified once built).
func fragmentation(f *poolpkg.Fragmentation, prev *v1alpha1.DevicePoolStatus) *v1alpha1.PoolFragmentation {
	if f == nil {
		return nil
	}
	out := &v1alpha1.PoolFragmentation{
		CounterSets:          int32(f.CounterSets),
		WholeCounterSetsFree: int32(f.WholeFree),
		FreeCapacity:         inCounterSets(f.Free),
	}
	if f.LargestSize > 0 {
		out.LargestAvailable = f.Largest.Type
		size := inCounterSets(f.LargestSize)
		out.LargestAvailableSize = &size
	}
	if prev != nil && fragmentationEqual(prev.Fragmentation, out) {
		return prev.Fragmentation
	}
	return out
}

// inCounterSets rounds a size in counter sets to thousandths.
func inCounterSets(v float64) resource.Quantity {
	return *resource.NewMilliQuantity(int64(math.Round(v*1000)), resource.DecimalSI)
}

func fragmentationEqual(a, b *v1alpha1.PoolFragmentation) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.CounterSets != b.CounterSets || a.WholeCounterSetsFree != b.WholeCounterSetsFree || a.LargestAvailable != b.LargestAvailable ||
		a.FreeCapacity.Cmp(b.FreeCapacity) != 0 || (a.LargestAvailableSize == nil) != (b.LargestAvailableSize == nil) {
		return false
	}
	return a.LargestAvailableSize == nil || a.LargestAvailableSize.Cmp(*b.LargestAvailableSize) == 0
}

// collectFragmentation emits the fragmentation series of one pool.
func collectFragmentation(ch chan<- prometheus.Metric, driver, pool string, f *v1alpha1.PoolFragmentation) {
	if f == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descFreeCapacity, prometheus.GaugeValue, f.FreeCapacity.AsApproximateFloat64(), driver, pool, "capacity")
	ch <- prometheus.MustNewConstMetric(descFreeCapacity, prometheus.GaugeValue, float64(f.WholeCounterSetsFree), driver, pool, "whole")
	largest := 0.0
	if f.LargestAvailableSize != nil {
		largest = f.LargestAvailableSize.AsApproximateFloat64()
	}
	ch <- prometheus.MustNewConstMetric(descLargestAvailable, prometheus.GaugeValue, largest, driver, pool, f.LargestAvailable)
}
