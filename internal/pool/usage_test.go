package pool

import (
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
)

// usageOf builds a ledger over the MIG pool and returns the pool usage and
// a device-index lookup.
func usageOf(t *testing.T, ss ...*resourceapi.ResourceSlice) (*Ledger, *PoolUsage, func(string) int) {
	t.Helper()
	p := onlyPool(t, ss...)
	l := NewLedger()
	u := l.SetPool(p)
	idx := func(name string) int {
		i, ok := u.Index(name)
		if !ok {
			t.Fatalf("no device %s", name)
		}
		return i
	}
	return l, u, idx
}

// state renders CanAllocate for each device, e.g. "half-0:+ half-1:- full:-".
func canAllocate(u *PoolUsage) []string {
	var out []string
	for i, d := range u.Pool().Devices {
		mark := "-"
		if u.CanAllocate(i) {
			mark = "+"
		}
		out = append(out, d.Device.Name+":"+mark)
	}
	return out
}

func TestLedgerClaimsConsumeCounters(t *testing.T) {
	l, u, _ := usageOf(t, migSlices()...)
	steps := []struct {
		do   func()
		want []string
	}{
		{func() {}, []string{"half-0:+", "half-1:+", "full:+"}},
		{func() { l.AddClaim(claim("a", result{"p", "half-0", false})) }, []string{"half-0:-", "half-1:+", "full:-"}},
		{func() { l.AddClaim(claim("b", result{"p", "half-1", false})) }, []string{"half-0:-", "half-1:-", "full:-"}},
		{func() { l.RemoveClaim(claim("a")) }, []string{"half-0:+", "half-1:-", "full:-"}},
		{func() { l.RemoveClaimKey("ns/b") }, []string{"half-0:+", "half-1:+", "full:+"}},
		{func() { l.AddClaim(claim("c", result{"p", "full", false})) }, []string{"half-0:-", "half-1:-", "full:-"}},
		// Re-adding a claim replaces its allocation.
		{func() { l.AddClaim(claim("c", result{"p", "half-1", false})) }, []string{"half-0:+", "half-1:-", "full:-"}},
		// A claim whose allocation was cleared is removed.
		{func() { l.AddClaim(claim("c")) }, []string{"half-0:+", "half-1:+", "full:+"}},
	}
	for i, s := range steps {
		s.do()
		if got := canAllocate(u); !slices.Equal(got, s.want) {
			t.Fatalf("step %d: %v, want %v", i, got, s.want)
		}
	}
	for _, b := range u.Balances() {
		if !b.Consumed.IsZero() {
			t.Errorf("after removing every claim %s/%s consumed %s", b.CounterSet, b.Counter, b.Consumed.String())
		}
	}
	if l.Claims() != 0 {
		t.Errorf("%d claims left", l.Claims())
	}
}

func TestAdminAccessDoesNotUseDevices(t *testing.T) {
	// kube-scheduler's foreachAllocatedDevice skips results with
	// adminAccess: the device stays free and its counters unconsumed.
	l, u, idx := usageOf(t, migSlices()...)
	l.AddClaim(claim("admin", result{"p", "full", true}))
	if u.InUse(idx("full")) || u.Allocated(idx("full")) || !u.CanAllocate(idx("half-0")) {
		t.Fatalf("admin allocation made devices busy: %v", canAllocate(u))
	}
	ex, admin, claims := l.Holders(ID{drv, "p"}, "full")
	if ex != 0 || admin != 1 || !slices.Equal(claims, []string{"ns/admin"}) {
		t.Fatalf("Holders = %d, %d, %v", ex, admin, claims)
	}
	l.RemoveClaim(claim("admin"))
	if ex, admin, _ := l.Holders(ID{drv, "p"}, "full"); ex != 0 || admin != 0 {
		t.Fatalf("after remove Holders = %d, %d", ex, admin)
	}
}

func TestOverconsumedPoolBlocksCounterDevices(t *testing.T) {
	// Upstream compares every counter of the pool after adding a device, so
	// existing over-consumption blocks all counter-consuming devices, even
	// ones whose own counters are free.
	ss := []*resourceapi.ResourceSlice{
		mkSlice("counters", "p", 1, 2, sets(cset("gpu-0-cs", "mem0=1", "mem1=1", "spare=1"))),
		mkSlice("devices", "p", 1, 2, devs(
			dev("half-0", consumes("gpu-0-cs", "mem0=1")),
			dev("full", consumes("gpu-0-cs", "mem0=1", "mem1=1")),
			dev("other", consumes("gpu-0-cs", "spare=1")),
			dev("plain"),
		)),
	}
	l, u, idx := usageOf(t, ss...)
	l.AddClaim(claim("a", result{"p", "half-0", false}))
	if !u.Fits(idx("other")) {
		t.Fatal("other should fit before over-consumption")
	}
	l.AddClaim(claim("b", result{"p", "full", false}))
	if !u.Overconsumed() {
		t.Fatal("pool should be over-consumed")
	}
	if u.Fits(idx("other")) {
		t.Error("other fits although the pool is over-consumed")
	}
	if !u.CanAllocate(idx("plain")) {
		t.Error("a device without counters is blocked by over-consumption")
	}
	l.RemoveClaim(claim("b"))
	if u.Overconsumed() || !u.Fits(idx("other")) {
		t.Error("removing the over-consuming claim did not restore the pool")
	}
}

func TestTakeReleaseForTentativeChoices(t *testing.T) {
	_, u, idx := usageOf(t, migSlices()...)
	h0, full := idx("half-0"), idx("full")
	u.Take(h0)
	if u.CanAllocate(full) || u.CanAllocate(h0) {
		t.Fatal("Take did not consume")
	}
	u.Take(h0) // a second allocation of the same device consumes nothing more
	u.Release(h0)
	if u.CanAllocate(full) {
		t.Fatal("one Release of two Takes freed the device")
	}
	u.Release(h0)
	u.Release(h0) // extra Release is ignored
	if !u.CanAllocate(full) || !u.CanAllocate(h0) {
		t.Fatal("Release did not restore")
	}
	for _, b := range u.Balances() {
		if !b.Consumed.IsZero() {
			t.Errorf("%s consumed %s after releasing all", b.Counter, b.Consumed.String())
		}
	}
}

func TestTakeReleaseAllocationFree(t *testing.T) {
	_, u, idx := usageOf(t, migSlices()...)
	h0, full := idx("half-0"), idx("full")
	allocs := testing.AllocsPerRun(100, func() {
		if u.CanAllocate(h0) {
			u.Take(h0)
		}
		_ = u.Fits(full)
		u.Release(h0)
	})
	if allocs != 0 {
		t.Errorf("hot path allocates %.1f times per run", allocs)
	}
}

func TestSharedDeviceIsNeverInUse(t *testing.T) {
	ss := []*resourceapi.ResourceSlice{
		mkSlice("c", "p", 1, 2, sets(cset("cs", "bw=10"))),
		mkSlice("d", "p", 1, 2, devs(dev("nic", shared(), consumes("cs", "bw=6")), dev("nic2", consumes("cs", "bw=6")))),
	}
	l, u, idx := usageOf(t, ss...)
	l.AddClaim(claim("a", result{"p", "nic", false}))
	nic, nic2 := idx("nic"), idx("nic2")
	if u.InUse(nic) || !u.Allocated(nic) || !u.CanAllocate(nic) {
		t.Errorf("shared device: InUse=%v Allocated=%v CanAllocate=%v", u.InUse(nic), u.Allocated(nic), u.CanAllocate(nic))
	}
	if u.CanAllocate(nic2) {
		t.Error("nic2 fits although nic's counters are consumed")
	}
	l.AddClaim(claim("b", result{"p", "nic", false}))
	if got := u.Balances()[0].Consumed; got.CmpInt64(6) != 0 {
		t.Errorf("two allocations of a shared device consumed %s, want 6 (once)", got.String())
	}
}

func TestSetPoolReappliesAllocations(t *testing.T) {
	l := NewLedger()
	// The claim arrives before the pool.
	l.AddClaim(claim("a", result{"p", "half-0", false}))
	if l.Usage(ID{drv, "p"}) != nil {
		t.Fatal("usage exists before SetPool")
	}
	u := l.SetPool(onlyPool(t, migSlices()...))
	i, _ := u.Index("half-0")
	full, _ := u.Index("full")
	if !u.InUse(i) || u.Fits(full) {
		t.Fatal("allocation recorded before the pool was not applied")
	}
	// A new generation drops half-0: nothing is consumed any more, and the
	// allocation is still remembered (for AllocatedDeviceMissing).
	next := onlyPool(t, mkSlice("counters", "p", 2, 2, sets(cset("gpu-0-cs", "mem0=1", "mem1=1", "memory=40Gi"))),
		mkSlice("devices", "p", 2, 2, devs(dev("full", consumes("gpu-0-cs", "mem0=1", "mem1=1", "memory=40Gi")))))
	u = l.SetPool(next)
	if !u.CanAllocate(0) {
		t.Error("full is blocked by an allocation of a device that no longer exists")
	}
	if ex, _, _ := l.Holders(next.ID, "half-0"); ex != 1 {
		t.Error("allocation forgotten by SetPool")
	}
	l.RemovePool(next.ID)
	if l.Usage(next.ID) != nil {
		t.Error("RemovePool kept the usage")
	}
	l.RemoveClaim(claim("a"))
	if len(l.pools) != 0 {
		t.Errorf("ledger keeps %d empty pool states", len(l.pools))
	}
}

func TestCloneIsIndependent(t *testing.T) {
	l, u, idx := usageOf(t, migSlices()...)
	l.AddClaim(claim("a", result{"p", "half-0", false}))
	c := l.Clone()
	cu := c.Usage(u.Pool().ID)
	cu.Take(idx("half-1"))
	c.AddClaim(claim("b", result{"p", "full", false}))
	if !u.CanAllocate(idx("half-1")) || u.Overconsumed() {
		t.Error("changes to the clone leaked into the original")
	}
	c.RemoveClaim(claim("a"))
	if ex, _, _ := l.Holders(u.Pool().ID, "half-0"); ex != 1 {
		t.Error("removing from the clone changed the original")
	}
}

func TestFractionalAndHugeCounters(t *testing.T) {
	ss := []*resourceapi.ResourceSlice{
		mkSlice("c", "p", 1, 2, sets(cset("cs", "frac=1", "huge=1Ei", "tiny=1m", "odd=1500u"))),
		mkSlice("d", "p", 1, 2, devs(
			dev("a", consumes("cs", "frac=0.5")),
			dev("b", consumes("cs", "frac=0.5")),
			dev("c", consumes("cs", "frac=1m")),
			dev("big", consumes("cs", "huge=512Pi")),
			dev("nano", consumes("cs", "tiny=1n")),
			dev("two-milli", consumes("cs", "odd=2m")),
		)),
	}
	l, u, idx := usageOf(t, ss...)
	l.AddClaim(claim("x", result{"p", "a", false}, result{"p", "b", false}))
	if u.CanAllocate(idx("c")) {
		t.Error("0.001 more of a fully used fractional counter fits")
	}
	if !u.CanAllocate(idx("big")) {
		t.Error("512Pi of 1Ei does not fit")
	}
	if !u.CanAllocate(idx("nano")) {
		t.Error("1n of 1m does not fit")
	}
	if u.CanAllocate(idx("two-milli")) {
		t.Error("2m fits into 1500u")
	}
}

// TestExactCounterArithmetic: counters are compared exactly, whatever their
// magnitude or precision (kube-scheduler adds resource.Quantity values).
// Rounding to thousandths or capping large values, as an earlier version
// did, gets each of these wrong.
func TestExactCounterArithmetic(t *testing.T) {
	ss := []*resourceapi.ResourceSlice{
		mkSlice("c", "p", 1, 2, sets(cset("cs", "fine=1900u", "huge=3e15", "wide=1e18"))),
		mkSlice("d", "p", 1, 2, devs(
			dev("one-milli", consumes("cs", "fine=1m")),
			dev("u950", consumes("cs", "fine=950u")),
			dev("u900", consumes("cs", "fine=900u")),
			dev("too-big", consumes("cs", "huge=5e15")),
			dev("nano", consumes("cs", "wide=1n")),
			dev("almost-all", consumes("cs", "wide=999999999999999999999999999n")),
		)),
	}
	l, u, idx := usageOf(t, ss...)
	for _, d := range []string{"one-milli", "u950", "u900", "nano", "almost-all"} {
		if !u.CanAllocate(idx(d)) {
			t.Errorf("%s does not fit an empty pool", d)
		}
	}
	if u.CanAllocate(idx("too-big")) {
		t.Error("5e15 fits a counter of 3e15")
	}

	// 1m + 950u = 1950u > 1900u; 1m + 900u = 1900u fits exactly.
	l.AddClaim(claim("a", result{"p", "one-milli", false}))
	if u.CanAllocate(idx("u950")) {
		t.Error("950u fits after 1m of 1900u")
	}
	if !u.CanAllocate(idx("u900")) {
		t.Error("900u does not fit after 1m of 1900u")
	}

	// 1e18 in nano units is 1e27: kept in big.Int, still exact.
	l.AddClaim(claim("w", result{"p", "almost-all", false}))
	if !u.CanAllocate(idx("nano")) {
		t.Error("the last 1n of 1e18 does not fit")
	}
	u.Take(idx("nano"))
	if u.Overconsumed() {
		t.Error("exactly 1e18 of 1e18 is over-consumed")
	}
	u.Release(idx("nano"))

	// 5e15 of a 3e15 counter: over-consumed, which blocks every
	// counter-consuming device of the pool and makes the pool Degraded.
	l.AddClaim(claim("h", result{"p", "too-big", false}))
	if !u.Overconsumed() || u.CanAllocate(idx("u900")) {
		t.Errorf("5e15 of 3e15: Overconsumed %v, u900 fits %v", u.Overconsumed(), u.CanAllocate(idx("u900")))
	}
	r := Assess(u.Pool(), l, t0, time.Time{}, grace)
	if r.Health != HealthDegraded || !slices.ContainsFunc(r.Problems, func(p Problem) bool {
		return p.Reason == ReasonCounterOverconsumed && strings.Contains(p.Message, "consume 5e15, capacity is 3e15")
	}) {
		t.Errorf("report %s %v", r.Health, r.Problems)
	}
	got := map[string]string{}
	for _, b := range u.Balances() {
		got[b.Counter] = b.Consumed.String() + "/" + b.Capacity.String()
	}
	want := map[string]string{"fine": "1m/1900u", "huge": "5e15/3e15", "wide": "999999999999999999999999999e-9/1e18"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("balance %s = %s, want %s", k, got[k], v)
		}
	}
}
