package claims

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
)

// samples is how many observations a histogram child holds.
func samples(t *testing.T, h *prometheus.HistogramVec, labels ...string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(labels...).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// histCounts reads the sample counts of the latency and engine
// histograms by result, for the native engine.
func histCounts(t *testing.T) map[string][2]uint64 {
	out := map[string][2]uint64{}
	for _, r := range []claimpolicy.Outcome{claimpolicy.OutcomeAllocated, claimpolicy.OutcomeUnsatisfiable} {
		out[string(r)] = [2]uint64{samples(t, allocationLatency, "native", string(r)), samples(t, engineDuration, "native", string(r))}
	}
	return out
}

// TestMetricsOfAttempts: each engine run is timed once by result; each
// claim's latency is observed when its allocation commits, or when an
// attempt fails (once per claim of a pod's placement).
func TestMetricsOfAttempts(t *testing.T) {
	ctx := context.Background()
	t.Run("immediate claims", func(t *testing.T) {
		e := newEnv(t, interceptor.Funcs{}, stack("mh"), gpuClass(), node("n1", "4"),
			poolSlice("mh", "a"), immediateClaim("i1"), immediateClaim("i2"), immediateClaim("i3"))
		e.tainted()
		before := histCounts(t)
		for _, name := range []string{"i1", "i2", "i3"} {
			if _, err := e.r.Reconcile(ctx, reqOf(tns, name)); err != nil {
				t.Fatal(err)
			}
		}
		// mh has two devices: two allocated, one unsatisfiable.
		checkDeltas(t, before, histCounts(t), map[string][2]uint64{"Allocated": {2, 2}, "Unsatisfiable": {1, 1}})
	})
	t.Run("pods' placements", func(t *testing.T) {
		e := newEnv(t, interceptor.Funcs{}, placementCluster(
			celClaim("c1", "b"), celClaim("c2", "b"), gatedPod("fits", "2", "c1", "c2"),
			celClaim("c3", "b"), celClaim("c4", "b"), gatedPod("too-big", "100", "c3", "c4"),
			celClaim("c5", "zzz"), gatedPod("no-model", "1", "c5"))...)
		e.tainted()
		before := histCounts(t)
		p := &placementReconciler{r: e.r}
		for _, name := range []string{"fits", "too-big", "no-model"} {
			if _, err := p.Reconcile(ctx, reqOf(tns, name)); err != nil {
				t.Fatal(err)
			}
		}
		// fits: one engine run, two claims allocated. too-big fits no
		// node: the engine never runs, its two claims failed. no-model:
		// one run, one claim failed.
		checkDeltas(t, before, histCounts(t), map[string][2]uint64{"Allocated": {2, 1}, "Unsatisfiable": {3, 1}})
	})
}

func checkDeltas(t *testing.T, before, after, want map[string][2]uint64) {
	t.Helper()
	for r, w := range want {
		if got := [2]uint64{after[r][0] - before[r][0], after[r][1] - before[r][1]}; got != w {
			t.Errorf("result %s: %d latency and %d engine observations, want %d and %d", r, got[0], got[1], w[0], w[1])
		}
	}
}

// TestPendingAndCentralGauges: the status writer sets a pending series
// for every reason, zeros included, and the partition's size per driver,
// whose series go when no device is central any more.
func TestPendingAndCentralGauges(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, interceptor.Funcs{}, stack("mh"), gpuClass(), node("n1", "4"),
		poolSlice("mh", "a"), nodeSlice("n1", "a"), immediateClaim("i1"), immediateClaim("i2"), immediateClaim("i3"), celClaim("waits", "a"))
	e.tainted()
	for _, name := range []string{"i1", "i2", "i3"} {
		if _, err := e.r.Reconcile(ctx, reqOf(tns, name)); err != nil {
			t.Fatal(err)
		}
	}
	w := &statusWriter{r: e.r}
	if err := w.write(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(pendingClaims); n != len(claimpolicy.PendingReasons) {
		t.Errorf("%d pending series, want one per reason (%d)", n, len(claimpolicy.PendingReasons))
	}
	want := map[string]float64{"Unsatisfiable": 1, "NotAttempted": 1}
	for _, p := range claimpolicy.PendingReasons {
		if got := testutil.ToFloat64(pendingClaims.WithLabelValues(p.Reason, string(p.State))); got != want[p.Reason] {
			t.Errorf("drastack_claims_pending{reason=%q, state=%q} = %v, want %v", p.Reason, p.State, got, want[p.Reason])
		}
	}
	// Central: pool mh, both of its devices allocated.
	for state, want := range map[string]float64{"total": 2, "allocated": 2} {
		if got := testutil.ToFloat64(centralDevices.WithLabelValues(tdrv, state)); got != want {
			t.Errorf("drastack_claim_central_devices{driver=%q, state=%q} = %v, want %v", tdrv, state, got, want)
		}
	}

	// No central entry left: the driver's series go.
	st := e.stack()
	st.Spec.Claims.Central = nil
	if err := e.c.Update(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := w.write(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(centralDevices); n != 0 {
		t.Errorf("%d central series left without central devices", n)
	}
}

// TestCentralGaugeKeepsOnlyCurrentDrivers: a driver that leaves the
// partition takes its series with it; the others stay.
func TestCentralGaugeKeepsOnlyCurrentDrivers(t *testing.T) {
	var g centralGauge
	g.set(map[string]central.DriverSize{"x.example.com": {Total: 4, Allocated: 1}, "y.example.com": {Total: 2}})
	g.set(map[string]central.DriverSize{"y.example.com": {Total: 3, Allocated: 3}})
	defer g.set(nil)
	if n := testutil.CollectAndCount(centralDevices); n != 2 {
		t.Errorf("%d series, want y.example.com's total and allocated", n)
	}
	if got := testutil.ToFloat64(centralDevices.WithLabelValues("y.example.com", "allocated")); got != 3 {
		t.Errorf("allocated = %v, want 3", got)
	}
}
