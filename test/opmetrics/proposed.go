package opmetrics

// Proposed are the metrics of the claim controller that issue 26 asks for
// and internal/controller/claims does not register yet (a family listed
// with labels it lacks is pending too). The dashboard's panels and the
// promtool tests already use them; the catalog accepts them as pending, the
// e2e suite reports their panels as pending instead of failing, and
// TestProposedArePending fails as soon as the operator registers one as
// written here, so that its entry is deleted.
var Proposed = []Family{
	{
		Name:   "drastack_claim_allocation_latency_seconds",
		Kind:   Histogram,
		Labels: []string{"engine", "result"},
		Help: "Time from the operator first seeing a claim that needs allocation (new, or deallocated; for a pod's claims, the pod) to the outcome of an allocation attempt, " +
			"by engine and result (Allocated, Unsatisfiable, SearchBoundExceeded, Invalid, NotSupported, Error). Restarts start the clock again.",
	},
	{
		Name:   "drastack_claim_engine_duration_seconds",
		Kind:   Histogram,
		Labels: []string{"engine", "result"},
		Help: "Time the allocation engine spent on one attempt (an immediate claim, or a pod's operator claims together), " +
			"by engine and result (as drastack_claim_allocations_total); API reads and writes excluded.",
	},
	{
		Name:   "drastack_claims_pending",
		Kind:   Gauge,
		Labels: []string{"reason", "state"},
		Help: "Unallocated claims the operator allocates, by the outcome of their last attempt (reason) and the state it puts them in: " +
			"waiting (NotAttempted, Conflict, Error), unsatisfiable (Unsatisfiable, SearchBoundExceeded), invalid (Invalid, NotSupported); every reason is present, zeros included.",
	},
	{
		Name:   "drastack_claim_central_devices",
		Kind:   Gauge,
		Labels: []string{"driver", "state"},
		Help: "Devices of the central partition (spec.claims.central: tainted for kube-scheduler, allocated by the operator alone) by driver; " +
			"state total, or allocated (held by an allocated claim). No series without central devices.",
	},
}
