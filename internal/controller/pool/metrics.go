package pool

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Metric names (README "Metrics" documents each).
const (
	metricPools              = "drastack_pools"
	metricPoolHealth         = "drastack_pool_health"
	metricPoolDevices        = "drastack_pool_devices"
	metricCounterUtilisation = "drastack_pool_counter_utilization_ratio"
	metricPoolProblems       = "drastack_pool_problems"
	metricValidationDuration = "drastack_pool_validation_duration_seconds"
)

var (
	descPools = prometheus.NewDesc(metricPools,
		"Device pools by driver and health.", []string{"driver", "health"}, nil)
	descPoolHealth = prometheus.NewDesc(metricPoolHealth,
		"1 for the current health of each device pool, with the reason code of its most important problem.",
		[]string{"driver", "pool", "health", "reason"}, nil)
	descPoolDevices = prometheus.NewDesc(metricPoolDevices,
		"Devices of each pool by state. available and the unavailable_* states (pool_unusable, allocated, tainted, blocked_by_counters) count each device once and add up to the total; shared counts available shared devices that already serve allocations; allocated, free (= available) and tainted are the overlapping counts of earlier versions.",
		[]string{"driver", "pool", "state"}, nil)
	descCounterUtilisation = prometheus.NewDesc(metricCounterUtilisation,
		"Consumed / capacity of each shared counter, per pool and counter set; counters with zero capacity are left out.",
		[]string{"driver", "pool", "counter_set", "counter"}, nil)
	descPoolProblems = prometheus.NewDesc(metricPoolProblems,
		"Problems of each pool by reason code and severity; only pools with problems have series.",
		[]string{"driver", "pool", "reason", "severity"}, nil)
)

// validationDuration times one pool's validation (build the pool from its
// slices, assess it against the allocations, map it to status); API
// writes are not included.
var validationDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name: metricValidationDuration,
	Help: "Time to validate one device pool (build, assess and map to status; API writes excluded).",
	// 10µs to about 2.6s: a node-local pool takes tens of microseconds, a
	// multi-host pool with thousands of partitions milliseconds.
	Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
})

var healthValues = []v1alpha1.PoolHealth{v1alpha1.PoolHealthy, v1alpha1.PoolIncomplete, v1alpha1.PoolInvalid, v1alpha1.PoolDegraded}

// boardCollector turns the board into metrics at scrape time. Nothing is
// stored per series, so pools that disappear from the board disappear
// from the metrics at the next scrape, and the per-pool series of 10,000
// pools cost no memory between scrapes.
type boardCollector struct {
	board atomic.Pointer[board]
}

var (
	collector    = &boardCollector{}
	registerOnce sync.Once
)

// useBoard registers the metrics with controller-runtime's registry (once
// per process) and points the collector at b. The registry is global, so
// when a process starts several operators one after another (tests), the
// last one's board is reported.
func useBoard(b *board) {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(collector, validationDuration)
	})
	collector.board.Store(b)
}

func (c *boardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPools, descPoolHealth, descPoolDevices, descCounterUtilisation, descPoolProblems, descFreeCapacity, descLargestAvailable} {
		ch <- d
	}
}

func (c *boardCollector) Collect(ch chan<- prometheus.Metric) {
	b := c.board.Load()
	if b == nil {
		return
	}
	byDriver := map[string]map[v1alpha1.PoolHealth]int{}
	for _, e := range b.snapshot() {
		d, p := e.id.Driver, e.id.Pool
		counts := byDriver[d]
		if counts == nil {
			counts = map[v1alpha1.PoolHealth]int{}
			byDriver[d] = counts
		}
		counts[e.health]++
		ch <- prometheus.MustNewConstMetric(descPoolHealth, prometheus.GaugeValue, 1, d, p, string(e.health), e.reason)
		ch <- prometheus.MustNewConstMetric(descPoolDevices, prometheus.GaugeValue, float64(e.devices.Allocated), d, p, "allocated")
		ch <- prometheus.MustNewConstMetric(descPoolDevices, prometheus.GaugeValue, float64(e.devices.Free), d, p, "free")
		ch <- prometheus.MustNewConstMetric(descPoolDevices, prometheus.GaugeValue, float64(e.devices.Tainted), d, p, "tainted")
		for _, s := range []struct {
			state string
			n     int32
		}{
			{"available", e.devices.Available},
			{"shared", e.devices.Shared},
			{"unavailable_pool_unusable", e.devices.Unavailable.PoolUnusable},
			{"unavailable_allocated", e.devices.Unavailable.Allocated},
			{"unavailable_tainted", e.devices.Unavailable.Tainted},
			{"unavailable_blocked_by_counters", e.devices.Unavailable.BlockedByCounters},
		} {
			ch <- prometheus.MustNewConstMetric(descPoolDevices, prometheus.GaugeValue, float64(s.n), d, p, s.state)
		}
		for _, s := range e.counters {
			ch <- prometheus.MustNewConstMetric(descCounterUtilisation, prometheus.GaugeValue, s.ratio, d, p, s.set, s.counter)
		}
		collectFragmentation(ch, d, p, e.fragmentation)
		for _, pc := range e.problems {
			ch <- prometheus.MustNewConstMetric(descPoolProblems, prometheus.GaugeValue, float64(pc.n), d, p, pc.reason, pc.severity)
		}
	}
	// Every health value per driver, zeros included, so that alerts and
	// dashboards can compare without absent().
	for d, counts := range byDriver {
		for _, h := range healthValues {
			ch <- prometheus.MustNewConstMetric(descPools, prometheus.GaugeValue, float64(counts[h]), d, string(h))
		}
	}
}
