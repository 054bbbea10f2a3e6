package verify

import (
	"k8s.io/utils/ptr"
)

// checkDevices checks each result's device on its own: it exists in an
// allocatable pool, matches its class and request, tolerates its taints,
// carries the request's adminAccess, is not given twice and is reachable
// from the node.
func (k *check) checkDevices() {
	seen := map[deviceID]bool{}
	for _, res := range k.results {
		id := res.id.String()
		if seen[res.id] && !(res.ShareID != nil && res.dev != nil && isShared(res.dev.Device)) {
			k.fail(RuleDoubleAllocation, id, "device is given twice in the claim")
		}
		seen[res.id] = true
		if holder, busy := k.inUse[res.id]; busy && !ptr.Deref(res.AdminAccess, false) {
			k.fail(RuleDoubleAllocation, id, "device is already allocated to claim %s", holder)
		}
		if !k.deviceExists(res) || res.req == nil {
			continue
		}
		k.checkSelectors(res)
		if taint, bad := untoleratedTaint(k.taintsOf(res), res.req.tolerations); k.features.DeviceTaints && bad {
			k.fail(RuleTaint, id, "taint %s=%s:%s is not tolerated by request %q", taint.Key, taint.Value, taint.Effect, res.req.name)
		}
		if got := ptr.Deref(res.AdminAccess, false); got != res.req.adminAccess {
			k.fail(RuleAdminAccess, id, "result has adminAccess %v, request %q asks for %v", got, res.req.name, res.req.adminAccess)
		}
		if k.nodeObj != nil && !reachable(res.dev, k.nodeObj) {
			k.fail(RuleNode, id, "device is not reachable from node %s", k.node)
		}
	}
}

// deviceExists reports whether the result's device is in a complete, valid
// pool at its current generation, failing RuleDevice otherwise.
func (k *check) deviceExists(res result) bool {
	id := res.id.String()
	switch {
	case res.pool == nil:
		k.fail(RuleDevice, id, "pool %s/%s does not exist", res.Driver, res.Pool)
	case res.dev == nil:
		k.fail(RuleDevice, id, "device does not exist in generation %d of its pool", res.pool.Generation)
	case !res.pool.Complete():
		k.fail(RuleDevice, id, "pool is incomplete (%d of %d slices)", len(res.pool.Slices), res.pool.ExpectedSlices)
	case !res.pool.Valid():
		k.fail(RuleDevice, id, "pool is invalid: %s", firstError(res.pool))
	default:
		return true
	}
	return false
}
