package upstream

import (
	resourceapi "k8s.io/api/resource/v1"
)

// withDefaults returns the claims as the API server would store them: a
// request without allocationMode is ExactCount, and ExactCount without count
// means one device. kube-scheduler only sees stored objects, but claims read
// from YAML files (kubectl dra simulate) or built in tests may omit both, and
// the upstream allocator rejects an empty mode. Claims that need no default
// are passed through unchanged; the others are copied, never modified.
func withDefaults(claims []*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	out := claims
	copied := false
	for i, claim := range claims {
		if !needsDefaults(claim) {
			continue
		}
		if !copied {
			out = append([]*resourceapi.ResourceClaim(nil), claims...)
			copied = true
		}
		c := claim.DeepCopy()
		for r := range c.Spec.Devices.Requests {
			req := &c.Spec.Devices.Requests[r]
			if req.Exactly != nil {
				defaultCount(&req.Exactly.AllocationMode, &req.Exactly.Count)
			}
			for s := range req.FirstAvailable {
				sub := &req.FirstAvailable[s]
				defaultCount(&sub.AllocationMode, &sub.Count)
			}
		}
		out[i] = c
	}
	return out
}

func needsDefaults(claim *resourceapi.ResourceClaim) bool {
	for _, req := range claim.Spec.Devices.Requests {
		if req.Exactly != nil && missingCount(req.Exactly.AllocationMode, req.Exactly.Count) {
			return true
		}
		for _, sub := range req.FirstAvailable {
			if missingCount(sub.AllocationMode, sub.Count) {
				return true
			}
		}
	}
	return false
}

func missingCount(mode resourceapi.DeviceAllocationMode, count int64) bool {
	return mode == "" || (mode == resourceapi.DeviceAllocationModeExactCount && count == 0)
}

func defaultCount(mode *resourceapi.DeviceAllocationMode, count *int64) {
	if *mode == "" {
		*mode = resourceapi.DeviceAllocationModeExactCount
	}
	if *mode == resourceapi.DeviceAllocationModeExactCount && *count == 0 {
		*count = 1
	}
}
