package native

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// manyGPUs is node n1 with n plain devices gpu-00, gpu-01, ...
func manyGPUs(n int) []*resourceapi.ResourceSlice {
	devs := make([]resourceapi.Device, n)
	for i := range devs {
		devs[i] = dev(fmt.Sprintf("gpu-%02d", i))
	}
	return []*resourceapi.ResourceSlice{nodeSlice("n1", devs...)}
}

// countBy counts the devices of each request in a "request=pool/device" list.
func countBy(got []string) map[string]int {
	n := map[string]int{}
	for _, g := range got {
		n[strings.SplitN(g, "=", 2)[0]]++
	}
	return n
}

// TestPerClaimLimit: a claim holds at most 32 devices
// (resourceapi.AllocationResultsMaxSize). A firstAvailable subrequest that
// cannot fit under that limit is skipped for the next one, as
// kube-scheduler does, and the search does not walk the device choices of
// an alternative that leaves no room for the claim's later requests.
func TestPerClaimLimit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gpus     int
		claim    *resourceapi.ResourceClaim
		maxSteps int64
		// central: allocate among nodes n0 and n1 (n1 has the devices).
		central bool
		// want is the device count per request name; nil expects failure.
		want      map[string]int
		wantErr   error
		wantField string
	}{{
		name:  "a subrequest above 32 devices is skipped",
		gpus:  36,
		claim: claim("c", firstAvailable("r", subReq("huge", 33), subReq("small", 2))),
		want:  map[string]int{"r/small": 2},
	}, {
		name:  "a subrequest far above 32 devices is skipped",
		gpus:  4,
		claim: claim("c", firstAvailable("r", subReq("huge", 1_000_000), subReq("small", 4))),
		want:  map[string]int{"r/small": 4},
	}, {
		name:  "exactly 32 devices fit",
		gpus:  36,
		claim: claim("c", firstAvailable("r", subReq("max", 32), subReq("small", 1))),
		want:  map[string]int{"r/max": 32},
	}, {
		name:      "only subrequests above 32: the claim cannot be valid",
		gpus:      36,
		claim:     claim("c", firstAvailable("r", subReq("a", 33), subReq("b", 40))),
		wantField: "spec.devices.requests",
	}, {
		name:      "an exactly request above 32 is invalid",
		gpus:      36,
		claim:     claim("c", req("r", 33)),
		wantField: "spec.devices.requests[0].exactly.count",
	}, {
		// kube-scheduler counts an All request's devices on the node
		// against the limit before it searches: an error, not a shortage.
		name:      "a request for all of 36 devices is invalid on that node",
		gpus:      36,
		claim:     claim("c", allMode(req("r", 0))),
		wantField: "spec.devices.requests",
	}, {
		name:  "a request for all of 32 devices is allocated",
		gpus:  32,
		claim: claim("c", allMode(req("r", 0))),
		want:  map[string]int{"r": 32},
	}, {
		name:      "all of 31 devices and one more are invalid",
		gpus:      31,
		claim:     claim("c", allMode(req("a", 0)), firstAvailable("b", subReq("x", 2), subReq("y", 2))),
		wantField: "spec.devices.requests",
	}, {
		name:      "a request for all of 36 devices is invalid when allocating centrally",
		gpus:      36,
		claim:     claim("c", allMode(req("r", 0))),
		central:   true,
		wantField: "spec.devices.requests",
	}, {
		// The case: 30 devices for r0 leave 2 for r1's 16. The
		// search must move to r0's 16 at once, not try all C(36,30)
		// choices of 30 devices (about 1.9 million).
		name:     "an earlier choice that leaves no room is skipped without search",
		gpus:     36,
		claim:    claim("c", firstAvailable("r0", subReq("big", 30), subReq("small", 16)), req("r1", 16)),
		maxSteps: 100,
		want:     map[string]int{"r0/small": 16, "r1": 16},
	}, {
		// Here r1 itself has a fallback that fits after r0's 30, so r0
		// keeps its first choice.
		name:     "a later fallback that fits keeps the earlier first choice",
		gpus:     36,
		claim:    claim("c", firstAvailable("r0", subReq("big", 30), subReq("small", 16)), firstAvailable("r1", subReq("a", 16), subReq("b", 2))),
		maxSteps: 100,
		want:     map[string]int{"r0/big": 30, "r1/b": 2},
	}, {
		// Room for r1 and r2 only if r0 takes its smaller subrequest:
		// r2 needs at least 3 more, and 20+10+3 > 32.
		name:     "the limit counts the smallest alternative of every later request",
		gpus:     40,
		claim:    claim("c", firstAvailable("r0", subReq("a", 20), subReq("b", 10)), req("r1", 10), firstAvailable("r2", subReq("x", 5), subReq("y", 3))),
		maxSteps: 100,
		want:     map[string]int{"r0/b": 10, "r1": 10, "r2/x": 5},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := allocator.Inputs{Slices: manyGPUs(tc.gpus)}
			if tc.central {
				in.Nodes = []*corev1.Node{node("n0", nil), node("n1", nil)}
			}
			s := newTestSession(t, in)
			got, _, err := allocateOne(t, s, tc.claim, allocator.Options{MaxSteps: tc.maxSteps})
			if tc.want == nil {
				if err == nil {
					t.Fatalf("allocated %v, want an error", got)
				}
				checkError(t, err, tc.wantErr, tc.wantField, "")
				return
			}
			if err != nil {
				if errors.Is(err, allocator.ErrSearchBound) {
					t.Fatalf("search not pruned: %v", err)
				}
				t.Fatalf("Allocate: %v", err)
			}
			if fmt.Sprint(countBy(got)) != fmt.Sprint(tc.want) {
				t.Errorf("devices per request %v, want %v", countBy(got), tc.want)
			}
		})
	}
}
