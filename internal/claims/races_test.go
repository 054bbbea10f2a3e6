package claims

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/pool"
)

const us = "drastack-claims"

var (
	// three devices, one of them shareable.
	plainPool = nodePool(device("a"), device("b"), sharedDevice("s"))
	// a counter set "mem" of 8 with partitions: whole (8), halves h0 h1
	// (4 each) and quarters q0..q3 (2 each).
	partitionPool = counterPool([]resourceapi.CounterSet{counterSet("mem", map[string]string{"gb": "8"})},
		consuming("whole", "mem", "gb", "8"),
		consuming("h0", "mem", "gb", "4"), consuming("h1", "mem", "gb", "4"),
		consuming("q0", "mem", "gb", "2"), consuming("q1", "mem", "gb", "2"),
		consuming("q2", "mem", "gb", "2"), consuming("q3", "mem", "gb", "2"))
)

func pools(slices []*resourceapi.ResourceSlice) []*pool.Pool { return pool.Group(slices) }

func TestPoolsAreValid(t *testing.T) {
	for name, s := range map[string][]*resourceapi.ResourceSlice{"plain": plainPool, "partitions": partitionPool} {
		for _, p := range pools(s) {
			if !p.Allocatable() {
				t.Errorf("%s pool is not allocatable: %+v", name, p.Problems)
			}
		}
	}
}

func TestFindRaces(t *testing.T) {
	for _, tc := range []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		claims []*resourceapi.ResourceClaim
		want   []string
	}{
		{"different devices: no race", plainPool, []*resourceapi.ResourceClaim{
			claim("x", allocated(0, "d/p/a")), claim("y", allocated(0, "d/p/b")),
		}, nil},
		{"one device given twice", plainPool, []*resourceapi.ResourceClaim{
			claim("x", allocated(0, "d/p/a")), claim("y", allocated(0, "d/p/a", "d/p/b")),
		}, []string{"device a of pool d/p is allocated to [ns/x ns/y]"}},
		{"adminAccess does not make a device busy", plainPool, []*resourceapi.ResourceClaim{
			claim("x", allocated(0, "d/p/a")), claim("y", allocated(0, "admin:d/p/a")),
		}, nil},
		{"a shareable device may be given twice", plainPool, []*resourceapi.ResourceClaim{
			claim("x", allocated(0, "d/p/s")), claim("y", allocated(0, "d/p/s")),
		}, nil},
		{"unknown pools and devices are the validator's business", plainPool, []*resourceapi.ResourceClaim{
			claim("x", allocated(0, "d/other/a")), claim("y", allocated(0, "d/other/a")),
			claim("z", allocated(0, "d/p/gone")), claim("w", allocated(0, "d/p/gone")),
		}, nil},
		{"partitions within the counter", partitionPool, []*resourceapi.ResourceClaim{
			claim("x", allocated(0, "d/p/h0")), claim("y", allocated(0, "d/p/q2", "d/p/q3")),
		}, nil},
		{"whole device and a half: counter given twice", partitionPool, []*resourceapi.ResourceClaim{
			claim("x", allocated(0, "d/p/whole")), claim("y", allocated(0, "d/p/h1")),
		}, []string{"counter gb of counter set mem in pool d/p is over-consumed by [ns/x ns/y]"}},
		{"same partition twice: a device and its counter", partitionPool, []*resourceapi.ResourceClaim{
			claim("x", allocated(0, "d/p/h0", "d/p/h1")), claim("y", allocated(0, "d/p/h0")),
		}, []string{"device h0 of pool d/p is allocated to [ns/x ns/y]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range FindRaces(pools(tc.slices), tc.claims) {
				got = append(got, r.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("FindRaces = %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestLosers(t *testing.T) {
	ours := func(sec int, devices ...string) []claimOpt {
		return []claimOpt{withCEL, allocated(sec, devices...), managedBy(us)}
	}
	scheduler := func(devices ...string) []claimOpt {
		return []claimOpt{allocated(0, devices...), managedBy("kube-scheduler"), reserved}
	}
	for _, tc := range []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		claims []*resourceapi.ResourceClaim
		want   []string // loser: reason
	}{
		{"no race: nobody loses", plainPool, []*resourceapi.ResourceClaim{
			claim("ours", ours(5, "d/p/a")...), claim("sched", scheduler("d/p/b")...),
		}, nil},
		{"kube-scheduler's allocation is never taken back", plainPool, []*resourceapi.ResourceClaim{
			claim("ours", ours(5, "d/p/a")...), claim("sched", scheduler("d/p/a")...),
		}, []string{"ours: DeviceDoubleAllocated"}},
		{"ours reserved by a pod stays, even when it collides", plainPool, []*resourceapi.ResourceClaim{
			claim("ours", append(ours(5, "d/p/a"), reserved)...), claim("sched", scheduler("d/p/a")...),
		}, nil},
		{"two of ours: the later allocation gives way", plainPool, []*resourceapi.ResourceClaim{
			claim("late", ours(9, "d/p/a")...), claim("early", ours(2, "d/p/a")...),
		}, []string{"late: DeviceDoubleAllocated"}},
		{"two of ours in the same second: the name decides", plainPool, []*resourceapi.ResourceClaim{
			claim("b", ours(2, "d/p/a")...), claim("a", ours(2, "d/p/a")...),
		}, []string{"b: DeviceDoubleAllocated"}},
		{"counter given twice: ours gives way to kube-scheduler's", partitionPool, []*resourceapi.ResourceClaim{
			claim("ours", ours(5, "d/p/q0")...), claim("sched", scheduler("d/p/whole")...),
		}, []string{"ours: CounterOverconsumed"}},
		{"only as many as needed give way", partitionPool, []*resourceapi.ResourceClaim{
			claim("sched", scheduler("d/p/h0")...),
			claim("first", ours(1, "d/p/q2")...),  // fits: 4+2
			claim("second", ours(2, "d/p/q3")...), // fits: 4+2+2 = 8
			claim("third", ours(3, "d/p/h1")...),  // 12 > 8: gives way
		}, []string{"third: CounterOverconsumed"}},
		{"a loser does not count against later claims", plainPool, []*resourceapi.ResourceClaim{
			claim("sched", scheduler("d/p/a")...),
			claim("first", ours(1, "d/p/a", "d/p/b")...), // loses on a, so b stays free
			claim("second", ours(2, "d/p/b")...),
		}, []string{"first: DeviceDoubleAllocated"}},
		{"unallocated claims are ignored", plainPool, []*resourceapi.ResourceClaim{
			claim("pending", withCEL), claim("ours", ours(1, "d/p/a")...),
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, l := range Losers(pools(tc.slices), tc.claims, func(c *resourceapi.ResourceClaim) bool { return Movable(c, us) }) {
				got = append(got, fmt.Sprintf("%s: %s", l.Claim.Name, l.Race.Reason))
				if !slices.Contains(l.Race.Claims, "ns/"+l.Claim.Name) || len(l.Race.Claims) < 2 {
					t.Errorf("race of %s does not name it and the claims it collided with: %v", l.Claim.Name, l.Race.Claims)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Losers = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestLosersResolveEveryRace: after the losers are deallocated, nothing is
// given twice any more, unless immovable claims collide among themselves.
// And the answer does not depend on the order of the input.
func TestLosersResolveEveryRace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ps := pools(partitionPool)
	devs := []string{"whole", "h0", "h1", "q0", "q1", "q2", "q3"}
	for round := range 500 {
		var claims []*resourceapi.ResourceClaim
		for i := range 1 + rng.IntN(6) {
			var picked []string
			for _, d := range devs {
				if rng.IntN(5) == 0 {
					picked = append(picked, "d/p/"+d)
				}
			}
			if len(picked) == 0 {
				continue
			}
			// Movable claims only: immovable collisions cannot be resolved.
			claims = append(claims, claim(fmt.Sprintf("c%d", i), withCEL, allocated(rng.IntN(3), picked...), managedBy(us)))
		}
		movable := func(c *resourceapi.ResourceClaim) bool { return Movable(c, us) }
		losers := Losers(ps, claims, movable)
		var kept []*resourceapi.ResourceClaim
		for _, c := range claims {
			if !slices.ContainsFunc(losers, func(l Loser) bool { return l.Claim == c }) {
				kept = append(kept, c)
			}
		}
		if races := FindRaces(ps, kept); len(races) > 0 {
			t.Fatalf("round %d: races remain after removing %d losers: %v", round, len(losers), races)
		}
		shuffled := slices.Clone(claims)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		again := Losers(ps, shuffled, movable)
		if !sameLosers(losers, again) {
			t.Fatalf("round %d: the losers depend on the input order", round)
		}
	}
}

func sameLosers(a, b []Loser) bool {
	names := func(ls []Loser) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Claim.Name)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(names(a), names(b))
}

// TestAssessAgrees checks that the pool validator's Degraded health
// (pool.Assess: DeviceDoubleAllocated, CounterOverconsumed) reports
// exactly the races FindRaces finds, so the claim controller and
// `kubectl get pool` never disagree about a device or counter given twice.
func TestAssessAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	devs := []string{"whole", "h0", "h1", "q0", "q1", "q2", "q3"}
	p := pools(partitionPool)[0]
	for round := range 500 {
		var claims []*resourceapi.ResourceClaim
		for i := range rng.IntN(5) {
			var picked []string
			for _, d := range devs {
				if rng.IntN(6) == 0 {
					picked = append(picked, "d/p/"+d)
				}
			}
			if len(picked) > 0 {
				claims = append(claims, claim(fmt.Sprintf("c%d", i), allocated(0, picked...)))
			}
		}
		l := pool.NewLedger()
		l.SetPool(p)
		for _, c := range claims {
			l.AddClaim(c)
		}
		report := pool.Assess(p, l, time.Now(), time.Time{}, time.Minute)
		var fromAssess, fromRaces []string
		for _, pr := range report.Problems {
			if pr.Reason == pool.ReasonDeviceDoubleAllocated || pr.Reason == pool.ReasonCounterOverconsumed {
				fromAssess = append(fromAssess, string(pr.Reason)+" "+pr.Device)
			}
		}
		for _, r := range FindRaces([]*pool.Pool{p}, claims) {
			fromRaces = append(fromRaces, string(r.Reason)+" "+r.Device)
		}
		slices.Sort(fromAssess)
		slices.Sort(fromRaces)
		if !slices.Equal(fromAssess, fromRaces) {
			t.Fatalf("round %d: pool.Assess reports %q, FindRaces %q", round, fromAssess, fromRaces)
		}
		if (len(fromRaces) > 0) != (report.Health == pool.HealthDegraded) {
			t.Fatalf("round %d: health %s with races %q", round, report.Health, fromRaces)
		}
	}
}

func TestCapacityIsExact(t *testing.T) {
	// 0.5 + 0.5 fits in 1; a third 0.5 does not. Quantities are compared
	// exactly, not rounded.
	half := counterPool([]resourceapi.CounterSet{counterSet("s", map[string]string{"c": "1"})},
		consuming("x", "s", "c", "500m"), consuming("y", "s", "c", "500m"), consuming("z", "s", "c", "500m"))
	ok := []*resourceapi.ResourceClaim{claim("a", allocated(0, "d/p/x")), claim("b", allocated(0, "d/p/y"))}
	if r := FindRaces(pools(half), ok); len(r) != 0 {
		t.Fatalf("two halves fit: %v", r)
	}
	over := append(ok, claim("c", allocated(0, "d/p/z")))
	if r := FindRaces(pools(half), over); len(r) != 1 || r[0].Reason != pool.ReasonCounterOverconsumed {
		t.Fatalf("three halves do not fit: %v", r)
	}
}
