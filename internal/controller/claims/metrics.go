package claims

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
)

// Metrics of the claim controller, registered once per process in
// controller-runtime's registry (served on the manager's metrics
// endpoint). Tests that start several managers in one process share them.
var (
	allocationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "drastack_claim_allocations_total",
		Help: "Allocation attempts of the claim controller by engine and result (Allocated, Unsatisfiable, SearchBoundExceeded, Invalid, NotSupported, Error).",
	}, []string{"engine", "result"})
	allocationLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "drastack_claim_allocation_latency_seconds",
		Help: "Time from the operator first seeing a claim that needs allocation (new, or deallocated; for a pod's claims, the pod) to the outcome of an allocation attempt, " +
			"by engine and result (Allocated, Unsatisfiable, SearchBoundExceeded, Invalid, NotSupported, Error). Restarts start the clock again.",
		// Milliseconds when the controller keeps up; minutes when claims
		// wait for devices.
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"engine", "result"})
	engineDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "drastack_claim_engine_duration_seconds",
		Help: "Time the allocation engine spent on one attempt (an immediate claim, or a pod's operator claims together), " +
			"by engine and result (as drastack_claim_allocations_total); API reads and writes excluded.",
		// Sub-millisecond for a claim on a small cluster; up to
		// spec.claims.allocationTimeout for a search that gives up.
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"engine", "result"})
	pendingClaims = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drastack_claims_pending",
		Help: "Unallocated claims the operator allocates, by the outcome of their last attempt (reason) and the state it puts them in: " +
			"waiting (NotAttempted, Conflict, Error), unsatisfiable (Unsatisfiable, SearchBoundExceeded), invalid (Invalid, NotSupported); every reason is present, zeros included.",
	}, []string{"reason", "state"})
	centralDevices = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drastack_claim_central_devices",
		Help: "Devices of the central partition (spec.claims.central: tainted for kube-scheduler, allocated by the operator alone) by driver; " +
			"state total, or allocated (held by an allocated claim). No series without central devices.",
	}, []string{"driver", "state"})
	writeConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "drastack_claim_write_conflicts_total",
		Help: "Claim writes refused because the claim changed since it was read; the claim is read again and the write retried.",
	})
	placementsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "drastack_claim_placements_total",
		Help: "Placements of pods' operator claims (all of a pod's operator claims on one node where the pod fits) by engine and result (Allocated, Unsatisfiable, SearchBoundExceeded, Invalid, NotSupported, Error).",
	}, []string{"engine", "result"})
	replacedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "drastack_claim_replacements_total",
		Help: "Allocations the operator took back to place them again: their pod stayed unschedulable for longer than spec.claims.placementTimeout after they were allocated, or the rest of the pod's placement did not commit.",
	})
	writesAmbiguous = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "drastack_claim_writes_ambiguous_total",
		Help: "Allocation writes that got no definite answer (a timeout, a 5xx, a reset connection, a 403); their reservations stay and they are sent again with the same precondition.",
	})
	unitsBroken = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "drastack_claim_placements_broken_total",
		Help: "Pod placements of which some claim's write can never commit; the written ones are taken back and the pod placed again as a whole.",
	})
	termSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "drastack_allocation_term_start_seconds",
		Help:    "Time from a new leader starting an allocation term to its first possible decision: acquiring the allocation fence and sweeping what an earlier term could still write.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	})
	reservations = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drastack_claim_reservations",
		Help: "Allocations the operator decided whose writes are not known to have committed (pending), and how many of those got no definite answer yet (ambiguous): their devices count as allocated until evidence ends them.",
	}, []string{"state"})
	oldestReservation = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "drastack_claim_reservation_oldest_seconds",
		Help: "Age of the oldest pending reservation (0 without one). A value that keeps growing means a write that never gets a definite answer (a 403, an unreachable API server).",
	})
	sweptTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "drastack_allocation_fence_swept_total",
		Help: "Claims and DeviceTaintRules the sweeps of new allocation terms fenced.",
	})
	gatedPods = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "drastack_claim_gated_pods",
		Help: "Pods held by the scheduling gate resource.drastack.io/allocation.",
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(allocationsTotal, allocationLatency, engineDuration, pendingClaims, centralDevices, writeConflicts, placementsTotal, replacedTotal, gatedPods,
			writesAmbiguous, unitsBroken, termSeconds, sweptTotal, reservations, oldestReservation)
	})
}

// observeLatency records, for each of n claims, the time from since (when
// this process saw the claim, or its pod, need allocation) to now, when
// an attempt ended in outcome.
func observeLatency(engine string, outcome claimpolicy.Outcome, since, now time.Time, n int) {
	h := allocationLatency.WithLabelValues(engine, string(outcome))
	for range n {
		h.Observe(now.Sub(since).Seconds())
	}
}

// observeEngine records the engine time of one attempt.
func observeEngine(engine string, outcome claimpolicy.Outcome, took time.Duration) {
	engineDuration.WithLabelValues(engine, string(outcome)).Observe(took.Seconds())
}

// pendingCounts counts unallocated claims by the reason their last
// outcome gives (claimpolicy.PendingOf), every reason present.
func pendingCounts(outcomes []claimpolicy.Outcome) map[claimpolicy.Pending]int {
	out := make(map[claimpolicy.Pending]int, len(claimpolicy.PendingReasons))
	for _, p := range claimpolicy.PendingReasons {
		out[p] = 0
	}
	for _, o := range outcomes {
		out[claimpolicy.PendingOf(o)]++
	}
	return out
}

// setPending sets drastack_claims_pending.
func setPending(counts map[claimpolicy.Pending]int) {
	for p, n := range counts {
		pendingClaims.WithLabelValues(p.Reason, string(p.State)).Set(float64(n))
	}
}

// centralGauge keeps drastack_claim_central_devices: the series of the
// drivers it was last given, and no others. Only the status writer's one
// goroutine uses it.
type centralGauge struct {
	drivers map[string]bool
}

// set replaces the series with sizes.
func (g *centralGauge) set(sizes map[string]central.DriverSize) {
	for d := range g.drivers {
		if _, ok := sizes[d]; !ok {
			centralDevices.DeletePartialMatch(prometheus.Labels{"driver": d})
		}
	}
	g.drivers = make(map[string]bool, len(sizes))
	for d, n := range sizes {
		g.drivers[d] = true
		centralDevices.WithLabelValues(d, "total").Set(float64(n.Total))
		centralDevices.WithLabelValues(d, "allocated").Set(float64(n.Allocated))
	}
}
