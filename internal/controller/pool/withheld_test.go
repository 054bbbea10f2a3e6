package pool

import (
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

func TestWithheldPools(t *testing.T) {
	st := &v1alpha1.DRAStack{}
	st.Spec.MultiHost = []v1alpha1.MultiHostSpec{{Name: "tpu", Driver: testDriver}, {Name: "other", Driver: "other.example.com"}}
	st.Status.MultiHost = []v1alpha1.MultiHostStatus{
		{Name: "tpu", Problems: []string{
			"MissingHost: pool rack-a: no usable host at position 0,1",
			"PoolWithheld: pool rack-a is withheld: 1 of 4 hosts are missing and the policy is Withhold",
			"PoolWithheld: malformed",
		}},
		{Name: "unknown-entry", Problems: []string{"PoolWithheld: pool x is withheld: 1 of 2 hosts are missing and the policy is Withhold"}},
	}
	got := withheldPools(st)
	if len(got) != 1 {
		t.Fatalf("withheldPools = %v, want rack-a of %s only", got, testDriver)
	}
	why := got[poolpkg.ID{Driver: testDriver, Pool: "rack-a"}]
	for _, want := range []string{"the central publisher withholds the pool (spec.multiHost tpu)", "1 of 4 hosts are missing"} {
		if !strings.Contains(why, want) {
			t.Errorf("reason %q lacks %q", why, want)
		}
	}
	if !configFrom(st).affectsStatus(configFrom(&v1alpha1.DRAStack{})) {
		t.Error("a pool withheld or no longer withheld does not revalidate the pools")
	}
}

// A multi-host pool the publisher withholds loses its slices. Its
// DevicePool says why (the publisher's words, REASON PoolWithheld), names
// the claims still allocated on its devices by namespace/name, and stays
// past the grace period while they exist; once they are gone it goes.
func TestWithheldPoolKeptWhileClaimsPointAtIt(t *testing.T) {
	id := pid("rack-a")
	cfg := defaultConfig()
	cfg.withheld = map[poolpkg.ID]string{id: "the central publisher withholds the pool (spec.multiHost tpu): pool rack-a is withheld: 1 of 4 hosts are missing and the policy is Withhold"}
	s := gpuSlice("rack-a-0", "rack-a", "", 1, 1, "chip-0", "chip-1")
	r := newTestReconciler()
	r.model.upsertSlice(nil, s)
	c := claim("train", alloc{"rack-a", "chip-0", false})
	r.model.upsertClaim(nil, c)
	v, _ := r.validate(id, nil, t0, cfg)
	stored := roundTrip(t, v.status)

	r.model.deleteSlice(s)
	for _, at := range []time.Duration{10 * time.Second, cfg.grace, 10 * cfg.grace} {
		v, ok := r.validate(id, &stored, t0.Add(at), cfg)
		if !ok || v.expired {
			t.Fatalf("after %s: exists %v, expired %v; want the DevicePool kept while claim default/train is allocated", at, ok, v.expired)
		}
		st := v.status
		if st.Reason != string(ReasonPoolWithheld) {
			t.Errorf("after %s: REASON %q, want %s", at, st.Reason, ReasonPoolWithheld)
		}
		var text string
		for _, p := range st.Problems {
			text += p.Reason + ": " + p.Message + "\n"
		}
		for _, want := range []string{"1 of 4 hosts are missing", "AllocatedDeviceMissing: device chip-0 is allocated to claim default/train"} {
			if !strings.Contains(text, want) {
				t.Errorf("after %s: problems lack %q:\n%s", at, want, text)
			}
		}
		if strings.Contains(text, "uid-train") {
			t.Errorf("after %s: a claim is named by its UID:\n%s", at, text)
		}
		stored = roundTrip(t, st)
	}

	r.model.deleteClaim(c)
	v, ok := r.validate(id, &stored, t0.Add(11*cfg.grace), cfg)
	if !ok || !v.expired {
		t.Errorf("claims gone: exists %v, expired %v; want the DevicePool deleted", ok, v.expired)
	}
}

// A pool that vanished without a publisher's reason, with a claim on it,
// shows the claim as its REASON before the grace period ends (not an
// empty one).
func TestVanishedPoolReasonNamesTheClaim(t *testing.T) {
	id := pid("node-1")
	s := gpuSlice("n1", "node-1", "node-1", 1, 1, "gpu-0")
	r := world{nodes: []string{"node-1"}}.reconciler()
	r.model.upsertSlice(nil, s)
	r.model.upsertClaim(nil, claim("infer", alloc{"node-1", "gpu-0", false}))
	v, _ := r.validate(id, nil, t0, defaultConfig())
	stored := roundTrip(t, v.status)
	r.model.deleteSlice(s)
	v, _ = r.validate(id, &stored, t0.Add(time.Second), defaultConfig())
	if v.status.Reason != string(poolpkg.ReasonAllocatedDeviceMissing) {
		t.Errorf("REASON %q, want %s", v.status.Reason, poolpkg.ReasonAllocatedDeviceMissing)
	}
}
