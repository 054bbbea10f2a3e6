package claims

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
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
		Help: "Time from the operator first seeing a claim that needs allocation (new, or deallocated) to its allocation being written, by engine; for a pod's claims, from first seeing the pod. Restarts start the clock again.",
		// Milliseconds when the controller keeps up; minutes when claims
		// wait for devices.
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"engine"})
	pendingClaims = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drastack_claims_pending",
		Help: "Unallocated claims the operator allocates, by state: waiting (for an attempt), unsatisfiable (waiting for devices), invalid (waiting for the claim or the configuration to change).",
	}, []string{"state"})
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
		ctrlmetrics.Registry.MustRegister(allocationsTotal, allocationLatency, pendingClaims, writeConflicts, placementsTotal, replacedTotal, gatedPods,
			writesAmbiguous, unitsBroken, termSeconds, sweptTotal, reservations, oldestReservation)
	})
}
