package verify

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/pool"
)

// request is a request or subrequest with the fields the checks need.
type request struct {
	// name is how results name it: "req" or "req/sub".
	name string
	// parent is the top-level request name.
	parent      string
	class       string
	selectors   []resourceapi.DeviceSelector
	mode        resourceapi.DeviceAllocationMode
	count       int64
	adminAccess bool
	tolerations []resourceapi.DeviceToleration
	// capacity are the capacity requests (KEP-5075), nil for none.
	capacity *resourceapi.CapacityRequirements
	// derived are the derived attributes (KEP-6080).
	derived []resourceapi.DeviceDerivedAttribute
}

// wantCount is the number of devices an ExactCount request asks for, with
// the API defaults applied (no mode means ExactCount, no count means one).
func (r *request) wantCount() int64 {
	if r.count == 0 {
		return 1
	}
	return r.count
}

func (r *request) all() bool { return r.mode == resourceapi.DeviceAllocationModeAll }

// result is one allocation result resolved against the claim and the pools.
type result struct {
	*resourceapi.DeviceRequestAllocationResult
	id deviceID
	// req is nil when the result names no request of the claim.
	req *request
	// dev is nil when the device does not exist at the current generation.
	dev  *pool.Device
	pool *pool.Pool
}

// requests indexes the claim's requests and subrequests by result name.
func (k *check) requests() map[string]*request {
	out := map[string]*request{}
	for _, r := range k.claim.Spec.Devices.Requests {
		if e := r.Exactly; e != nil {
			out[r.Name] = &request{
				name: r.Name, parent: r.Name, class: e.DeviceClassName, selectors: e.Selectors,
				mode: e.AllocationMode, count: e.Count, adminAccess: ptr.Deref(e.AdminAccess, false),
				tolerations: e.Tolerations, capacity: e.Capacity, derived: e.DerivedAttributes,
			}
			continue
		}
		for _, s := range r.FirstAvailable {
			name := r.Name + "/" + s.Name
			out[name] = &request{
				name: name, parent: r.Name, class: s.DeviceClassName, selectors: s.Selectors,
				mode: s.AllocationMode, count: s.Count, tolerations: s.Tolerations, capacity: s.Capacity, derived: s.DerivedAttributes,
			}
		}
	}
	return out
}

// resolveResults resolves every result's request and device and checks the
// naming of requests and subrequests.
func (k *check) resolveResults() {
	reqs := k.requests()
	chosen := map[string]string{} // parent -> first subrequest seen
	for i := range k.alloc.Devices.Results {
		r := &k.alloc.Devices.Results[i]
		res := result{DeviceRequestAllocationResult: r, id: resultID(r)}
		res.pool = k.pools[pool.ID{Driver: r.Driver, Pool: r.Pool}]
		res.dev = k.devices[res.id]
		res.req = reqs[r.Request]
		switch {
		case res.req != nil:
		case k.hasSubrequests(r.Request):
			k.fail(RuleSubrequest, res.id.String(), "result names request %q, which has subrequests: it must name one as %q", r.Request, r.Request+"/<subrequest>")
		case strings.Contains(r.Request, "/") && reqs[parentOf(r.Request)] != nil:
			k.fail(RuleSubrequest, res.id.String(), "result names subrequest %q, but request %q has no subrequests", r.Request, parentOf(r.Request))
		default:
			k.fail(RuleRequest, res.id.String(), "result names request %q, which the claim does not have", r.Request)
		}
		if res.req != nil && res.req.name != res.req.parent {
			if first, ok := chosen[res.req.parent]; !ok {
				chosen[res.req.parent] = res.req.name
			} else if first != res.req.name {
				k.fail(RuleSubrequest, res.id.String(), "request %q got devices from subrequests %q and %q; exactly one subrequest must be chosen", res.req.parent, first, res.req.name)
			}
		}
		k.results = append(k.results, res)
	}
}

func (k *check) hasSubrequests(name string) bool {
	for _, r := range k.claim.Spec.Devices.Requests {
		if r.Name == name {
			return len(r.FirstAvailable) > 0
		}
	}
	return false
}

func parentOf(name string) string {
	if i := strings.Index(name, "/"); i >= 0 {
		return name[:i]
	}
	return name
}

// checkCounts checks that every request got its devices: ExactCount exactly
// count, All exactly every matching device.
func (k *check) checkCounts() {
	byReq := map[string][]result{}
	for _, res := range k.results {
		if res.req != nil {
			byReq[res.req.name] = append(byReq[res.req.name], res)
		}
	}
	reqs := k.requests()
	for _, r := range k.claim.Spec.Devices.Requests {
		var req *request
		if r.Exactly != nil {
			req = reqs[r.Name]
		} else {
			// The chosen subrequest is the one results name; with none, the
			// request got nothing at all.
			for _, s := range r.FirstAvailable {
				if len(byReq[r.Name+"/"+s.Name]) > 0 {
					req = reqs[r.Name+"/"+s.Name]
					break
				}
			}
		}
		if req == nil || len(byReq[req.name]) == 0 {
			k.fail(RuleCount, "", "request %q got no devices", r.Name)
			continue
		}
		got := byReq[req.name]
		if req.all() {
			k.checkAll(req, got)
			continue
		}
		if int64(len(got)) != req.wantCount() {
			k.fail(RuleCount, "", "request %q got %d devices, want exactly %d", req.name, len(got), req.wantCount())
		}
	}
}
