package scale

import (
	"context"
	"fmt"
	"sort"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	ctrlpool "github.com/drastack/drastack/internal/controller/pool"
	"github.com/drastack/drastack/internal/handover"
	"github.com/drastack/drastack/internal/pool"
)

// modelGrace is the incomplete grace period given to the model: the check
// compares health and counts, and a pool that is incomplete is Incomplete
// with or without the IncompletePool problem.
const modelGrace = time.Hour

// maxMismatches bounds the mismatches a check reports.
const maxMismatches = 10

// snapshot is what the check reads from the watch cache.
type snapshot struct {
	slices []*resourceapi.ResourceSlice
	claims []resourceapi.ResourceClaim
	rules  []*resourceapi.DeviceTaintRule
	pools  map[string]*v1alpha1.DevicePool
}

func readSnapshot(ctx context.Context, r client.Reader) (*snapshot, error) {
	noCopy := client.UnsafeDisableDeepCopy
	var sl resourceapi.ResourceSliceList
	var cl resourceapi.ResourceClaimList
	var rl resourceapi.DeviceTaintRuleList
	var dl v1alpha1.DevicePoolList
	for _, l := range []client.ObjectList{&sl, &cl, &rl, &dl} {
		if err := r.List(ctx, l, noCopy); err != nil {
			return nil, fmt.Errorf("list %T from the watch cache: %w", l, err)
		}
	}
	s := &snapshot{claims: cl.Items, pools: make(map[string]*v1alpha1.DevicePool, len(dl.Items))}
	for i := range sl.Items {
		if handover.IsCanarySlice(&sl.Items[i]) {
			continue // the join barrier's probe: no DevicePool of its own
		}
		s.slices = append(s.slices, &sl.Items[i])
	}
	for i := range rl.Items {
		s.rules = append(s.rules, &rl.Items[i])
	}
	for i := range dl.Items {
		s.pools[dl.Items[i].Name] = &dl.Items[i]
	}
	return s, nil
}

// mismatches compares every DevicePool with what the pure pool model
// (internal/pool: Group, Ledger, AssessPool) computes from the same
// slices, claims and DeviceTaintRules: the set of DevicePools, and in each
// the generation, slice counts, health and every device count (total,
// allocated, tainted, available, shared and each unavailable reason). It
// returns at most maxMismatches descriptions, the number of pools, and how
// many mismatches there are in all.
func (s *snapshot) mismatches(now time.Time) ([]string, int, int) {
	pools := pool.Group(s.slices)
	ledger := pool.NewLedger()
	for _, p := range pools {
		ledger.SetPool(p)
	}
	for i := range s.claims {
		if s.claims[i].Status.Allocation != nil {
			ledger.AddClaim(&s.claims[i])
		}
	}
	var out []string
	wrong := 0
	add := func(format string, args ...any) {
		wrong++
		if len(out) < maxMismatches {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	seen := make(map[string]bool, len(pools))
	for _, p := range pools {
		name := ctrlpool.Name(p.ID)
		seen[name] = true
		dp := s.pools[name]
		if dp == nil {
			add("pool %s: no DevicePool %s", p.ID, name)
			continue
		}
		r := pool.AssessPool(p, ledger, pool.AssessInput{Now: now, Grace: modelGrace, TaintRules: s.rules})
		want := expectedStatus(&r)
		got := observedStatus(&dp.Status)
		if got != want {
			add("DevicePool %s: status %+v, model %+v", name, got, want)
		}
	}
	var extra []string
	for name := range s.pools {
		if !seen[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		add("DevicePool %s has no pool in the slices", name)
	}
	return out, len(pools), wrong
}

// compared is the part of a DevicePool status the check compares.
type compared struct {
	Generation                                          int64
	Slices, Expected                                    int32
	Health                                              string
	Total, Allocated, Tainted, Available, Shared        int32
	Unusable, UnavailAllocated, UnavailTainted, Blocked int32
}

func expectedStatus(r *pool.Report) compared {
	return compared{
		Generation: r.Generation, Slices: int32(r.Slices), Expected: int32(r.ExpectedSlices), Health: string(r.Health),
		Total: int32(r.Devices.Total), Allocated: int32(r.Devices.Allocated), Tainted: int32(r.Devices.Tainted),
		Available: int32(r.Availability.Available), Shared: int32(r.Availability.Shared),
		Unusable: int32(r.Availability.PoolUnusable), UnavailAllocated: int32(r.Availability.Allocated),
		UnavailTainted: int32(r.Availability.Tainted), Blocked: int32(r.Availability.BlockedByCounters),
	}
}

func observedStatus(st *v1alpha1.DevicePoolStatus) compared {
	d := st.Devices
	return compared{
		Generation: st.Generation, Slices: st.Slices.Current, Expected: st.Slices.Expected, Health: string(st.Health),
		Total: d.Total, Allocated: d.Allocated, Tainted: d.Tainted, Available: d.Available, Shared: d.Shared,
		Unusable: d.Unavailable.PoolUnusable, UnavailAllocated: d.Unavailable.Allocated,
		UnavailTainted: d.Unavailable.Tainted, Blocked: d.Unavailable.BlockedByCounters,
	}
}

// doubleAllocations lists devices that two allocated claims hold (admin
// access aside).
func doubleAllocations(claims []resourceapi.ResourceClaim) []string {
	holder := map[string]string{}
	var out []string
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			d := r.Driver + "/" + r.Pool + "/" + r.Device
			if other, ok := holder[d]; ok && other != c.Name {
				out = append(out, fmt.Sprintf("%s held by %s and %s", d, other, c.Name))
				continue
			}
			holder[d] = c.Name
		}
	}
	return out
}
