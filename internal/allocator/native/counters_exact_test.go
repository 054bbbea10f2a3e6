package native

import (
	"fmt"
	"math/big"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drastack/drastack/internal/allocator"
)

// counterPool is one pool "p" reachable from every node: a counter set
// "set" with one counter "c" of the given capacity, and devices d0, d1, ...
// consuming the given amounts of it.
func counterPool(capacity string, uses ...string) []*resourceapi.ResourceSlice {
	var devs []resourceapi.Device
	for i, u := range uses {
		devs = append(devs, consumes(dev(fmt.Sprintf("d%d", i)), "set", map[string]string{"c": u}))
	}
	return []*resourceapi.ResourceSlice{
		poolSlice("p-devices", "p", 2, devs...),
		counterSlice("p-counters", "p", 2, "set", map[string]string{"c": capacity}),
	}
}

// TestExactCounters: counters compare as resource.Quantity does, at every
// scale from 1n to beyond 1e18, neither capped nor rounded.
func TestExactCounters(t *testing.T) {
	runCases(t, []testCase{
		// Refused by kube-scheduler; an engine that caps large values
		// (both at the same cap) allocates it.
		{name: "5e15 of a 3e15 counter does not fit", slices: counterPool("3e15", "5e15"),
			claim: claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
		{name: "3e15 of a 3e15 counter fits", slices: counterPool("3e15", "3e15"),
			claim: claim("c", req("r", 1)), want: []string{"r=p/d0"}},
		{name: "3e15+1 of a 3e15 counter does not fit", slices: counterPool("3e15", "3000000000000001"),
			claim: claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
		// Rounding both up to a thousandth gives 1m + 1m <= 2m.
		{name: "1m and 950u of a 1900u counter do not both fit", slices: counterPool("1900u", "1m", "950u"),
			claim: claim("c", req("r", 2)), wantErr: allocator.ErrUnsatisfiable},
		{name: "either of 1m and 950u fits a 1900u counter", slices: counterPool("1900u", "1m", "950u"),
			claim: claim("c", req("r", 1)), want: []string{"r=p/d1"}},
		{name: "950u and 950u fill a 1900u counter exactly", slices: counterPool("1900u", "950u", "950u"),
			claim: claim("c", req("r", 2)), want: []string{"r=p/d0", "r=p/d1"}},
		// Rounding consumption up gives 1m + 1m > 1m.
		{name: "two halves of a milli-unit fit", slices: counterPool("1m", "500u", "500u"),
			claim: claim("c", req("r", 2)), want: []string{"r=p/d0", "r=p/d1"}},
		{name: "three halves of a milli-unit do not", slices: counterPool("1m", "500u", "500u", "500u"),
			claim: claim("c", req("r", 3)), wantErr: allocator.ErrUnsatisfiable},
		{name: "nano-units fit exactly", slices: counterPool("3n", "1n", "1n", "1n"),
			claim: claim("c", req("r", 3)), want: []string{"r=p/d0", "r=p/d1", "r=p/d2"}},
		{name: "one nano-unit too many", slices: counterPool("2n", "1n", "1n", "1n"),
			claim: claim("c", req("r", 3)), wantErr: allocator.ErrUnsatisfiable},
		// 1e18 - 1n and 1n fill 1e18 exactly: 1e27 nano-units, beyond int64.
		{name: "1e18 filled to the last nano-unit", slices: counterPool("1e18", "999999999999999999999999999n", "1n"),
			claim: claim("c", req("r", 2)), want: []string{"r=p/d0", "r=p/d1"}},
		{name: "1e18 overfilled by one nano-unit", slices: counterPool("1e18", "999999999999999999999999999n", "1n", "1n"),
			claim: claim("c", req("r", 3)), wantErr: allocator.ErrUnsatisfiable},
		{name: "1e18 counter and 1e18 device", slices: counterPool("1e18", "1e18"),
			claim: claim("c", req("r", 1)), want: []string{"r=p/d0"}},
		{name: "1e18 counter and 1e18+1 device", slices: counterPool("1e18", "1000000000000000001"),
			claim: claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
		{name: "two 5e17 devices fill 1e18", slices: counterPool("1e18", "5e17", "5e17"),
			claim: claim("c", req("r", 2)), want: []string{"r=p/d0", "r=p/d1"}},
		{name: "binary and decimal suffixes compare exactly", slices: counterPool("1Gi", "512Mi", "536870912"),
			claim: claim("c", req("r", 2)), want: []string{"r=p/d0", "r=p/d1"}},
		{name: "1Gi is not 1G", slices: counterPool("1G", "512Mi", "512Mi"),
			claim: claim("c", req("r", 2)), wantErr: allocator.ErrUnsatisfiable},
		// Recorded claims consume exactly too.
		{name: "950u left after 1m of 1900u refuses 950u", slices: counterPool("1900u", "1m", "950u"),
			allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "p", "d0")},
			claim:     claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
		{name: "900u left after 1m of 1900u takes 900u", slices: counterPool("1900u", "1m", "900u"),
			allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "p", "d0")},
			claim:     claim("c", req("r", 1)), want: []string{"r=p/d1"}},
		{name: "1n left of 1e18 takes 1n", slices: counterPool("1e18", "999999999999999999999999999n", "1n"),
			allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "p", "d0")},
			claim:     claim("c", req("r", 1)), want: []string{"r=p/d1"}},
		// An over-consumed counter (1n over) blocks the pool, as upstream.
		{name: "overdrawn by 1n in big arithmetic blocks the pool", slices: counterPool("1e18", "999999999999999999999999999n", "2n", "0"),
			allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "p", "d0", "p", "d1")},
			claim:     claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
		{name: "overdrawn by 1u blocks the pool", slices: counterPool("1m", "500u", "501u", "0"),
			allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "p", "d0", "p", "d1")},
			claim:     claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
		{name: "consumed exactly does not block the pool", slices: counterPool("1m", "500u", "500u", "0"),
			allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "p", "d0", "p", "d1")},
			claim:     claim("c", req("r", 1)), want: []string{"r=p/d2"}},
	})
}

// TestScaleCounter checks the representation: a common unit that makes
// every value whole, int64 while the sum of all values is safe, big
// arithmetic beyond.
func TestScaleCounter(t *testing.T) {
	for _, tc := range []struct {
		capacity string
		uses     []string
		small    bool
		want     []string // capacity, then uses, as integers of the common unit
	}{
		{capacity: "7", uses: []string{"1", "3"}, small: true, want: []string{"7", "1", "3"}},
		{capacity: "1900u", uses: []string{"1m", "950u"}, small: true, want: []string{"1900", "1000", "950"}},
		{capacity: "3e15", uses: []string{"5e15"}, small: true, want: []string{"3", "5"}},
		{capacity: "1Gi", uses: []string{"512Mi"}, small: true, want: []string{"1073741824", "536870912"}},
		{capacity: "2n", uses: []string{"1"}, small: true, want: []string{"2", "1000000000"}},
		{capacity: "1e18", uses: []string{"1n"}, small: false, want: []string{"1000000000000000000000000000", "1"}},
		{capacity: "9e18", uses: nil, small: true, want: []string{"9"}},
		{capacity: "4611686018427387904", uses: []string{"1"}, small: false, want: []string{"4611686018427387904000000000", "1000000000"}},
		{capacity: "5", uses: []string{"-1"}, small: false, want: []string{"5", "-1"}},
	} {
		t.Run(tc.capacity, func(t *testing.T) {
			var uses []resource.Quantity
			for _, u := range tc.uses {
				uses = append(uses, resource.MustParse(u))
			}
			sc := scaleCounter(resource.MustParse(tc.capacity), uses)
			if sc.small != tc.small {
				t.Fatalf("small = %v, want %v", sc.small, tc.small)
			}
			var got []string
			if sc.small {
				got = append(got, fmt.Sprint(sc.capacity))
				for _, u := range sc.uses {
					got = append(got, fmt.Sprint(u))
				}
			} else {
				got = append(got, sc.bigCapacity.String())
				for _, u := range sc.bigUses {
					got = append(got, u.String())
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFootprintRanks: the smallest share of the counters is preferred,
// compared exactly. Shares that differ only past float64 precision still
// order correctly, and equal shares tie (then snapshot order decides).
func TestFootprintRanks(t *testing.T) {
	s := &Session{devs: make([]device, 5)}
	tiny := new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Exp(big.NewInt(10), big.NewInt(30), nil))
	third := big.NewRat(1, 3)
	s.rankFootprints([]*big.Rat{
		new(big.Rat).Add(third, tiny), // just above a third
		third,
		nil,              // no counters
		big.NewRat(2, 6), // a third again
		new(big.Rat).Set(tiny),
	})
	want := []int32{3, 2, 0, 2, 1}
	for i, w := range want {
		if got := s.devs[i].footprint; got != w {
			t.Errorf("device %d: rank %d, want %d", i, got, w)
		}
	}
}
