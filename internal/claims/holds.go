package claims

import (
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/pool"
)

// Hold claims repair kube-scheduler's view after a lost race.
//
// kube-scheduler 1.36 keeps the devices in use as a set fed by claim
// events (allocatedDevices in its DRA plugin): an allocation adds its
// devices, a deallocation or deletion removes them. When a device is given
// twice and one holder is deallocated, the set forgets the device although
// the other holder still has it, and kube-scheduler gives it out again:
// one race becomes another, between its own claims, that nobody can undo.
//
// So when the operator takes back a device that another claim keeps, it
// writes a hold: a claim of its own, owned by the keeper, whose allocation
// names the device again. kube-scheduler sees one more allocation of it
// after the deallocation and keeps it in the set. The hold goes when the
// keeper releases the device (its owner reference removes it with the
// keeper; the controller removes it when the keeper is only deallocated).
// Holds are never the operator's claims to allocate and never part of a
// race.
const (
	// HoldLabel marks a hold claim; its value is "true".
	HoldLabel = "resource.drastack.io/hold"
	// HoldDeviceAnnotation names the held device, driver/pool/device.
	HoldDeviceAnnotation = "resource.drastack.io/hold-device"
	// HoldRequest is the request name of a hold claim.
	HoldRequest = "hold"
	// HoldNamePrefix starts the generated name of a hold claim.
	HoldNamePrefix = "drastack-hold-"
)

// IsHold reports whether a claim is a hold.
func IsHold(c *resourceapi.ResourceClaim) bool { return c.Labels[HoldLabel] == "true" }

// WithoutHolds returns the claims that are not holds.
func WithoutHolds(claims []*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	return slices.DeleteFunc(slices.Clone(claims), IsHold)
}

// Keep is one device of a losing claim that another allocation keeps.
type Keep struct {
	// Result is the losing claim's allocation result for the device.
	Result resourceapi.DeviceRequestAllocationResult
	// Keeper is the claim that keeps the device (the first by name when
	// several do).
	Keeper *resourceapi.ResourceClaim
}

// KeptDevices lists the devices of loser's allocation that other
// allocated claims (holds included) also hold without adminAccess:
// deallocating loser makes kube-scheduler forget them, so each needs a
// hold unless a hold for it exists already. Shareable devices are not
// tracked that way and need none.
func KeptDevices(pools []*pool.Pool, loser *resourceapi.ResourceClaim, allocated []*resourceapi.ResourceClaim) []Keep {
	if loser.Status.Allocation == nil {
		return nil
	}
	ix := indexPools(pools)
	var out []Keep
	for _, r := range loser.Status.Allocation.Devices.Results {
		if r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		if p := ix[pool.ID{Driver: r.Driver, Pool: r.Pool}]; p != nil {
			if i, ok := p.byID[r.Device]; ok && shared(p.p.Devices[i].Device) {
				continue
			}
		}
		var keeper *resourceapi.ResourceClaim
		held := false
		for _, c := range sortedClaims(allocated) {
			if c.UID == loser.UID || c.Status.Allocation == nil || !holds(c, r) {
				continue
			}
			if IsHold(c) {
				held = true
				break
			}
			if keeper == nil {
				keeper = c
			}
		}
		if keeper != nil && !held {
			out = append(out, Keep{Result: r, Keeper: keeper})
		}
	}
	return out
}

func holds(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) bool {
	return slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(x resourceapi.DeviceRequestAllocationResult) bool {
		return x.Driver == r.Driver && x.Pool == r.Pool && x.Device == r.Device && (x.AdminAccess == nil || !*x.AdminAccess)
	})
}

// DeviceKey is driver/pool/device.
func DeviceKey(r resourceapi.DeviceRequestAllocationResult) string {
	return r.Driver + "/" + r.Pool + "/" + r.Device
}

// HoldClaim is the hold for a kept device, without its allocation (see
// HoldAllocation): created in the keeper's namespace, owned by the keeper,
// asking for one device of the class the keeper's request used.
func HoldClaim(k Keep) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: HoldNamePrefix,
			Namespace:    k.Keeper.Namespace,
			Labels:       map[string]string{HoldLabel: "true"},
			Annotations:  map[string]string{HoldDeviceAnnotation: DeviceKey(k.Result)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: resourceapi.SchemeGroupVersion.String(),
				Kind:       "ResourceClaim",
				Name:       k.Keeper.Name,
				UID:        k.Keeper.UID,
			}},
		},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: HoldRequest,
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: requestClass(k.Keeper, k.Result.Request),
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           1,
			},
		}}}},
	}
}

// HoldAllocation is the hold's status.allocation: the kept device, on the
// keeper's nodes.
func HoldAllocation(k Keep, now time.Time) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: HoldRequest, Driver: k.Result.Driver, Pool: k.Result.Pool, Device: k.Result.Device,
		}}},
		AllocationTimestamp: ptr.To(metav1.NewTime(now.Truncate(time.Second))),
	}
	if k.Keeper.Status.Allocation != nil && k.Keeper.Status.Allocation.NodeSelector != nil {
		a.NodeSelector = k.Keeper.Status.Allocation.NodeSelector.DeepCopy()
	}
	return a
}

// requestClass is the DeviceClass of a claim's request ("req" or
// "req/sub"); a placeholder when the claim does not say (a hold's class is
// never used to allocate).
func requestClass(c *resourceapi.ResourceClaim, request string) string {
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil && r.Name == request {
			return r.Exactly.DeviceClassName
		}
		for _, sub := range r.FirstAvailable {
			if r.Name+"/"+sub.Name == request {
				return sub.DeviceClassName
			}
		}
	}
	return "drastack-hold"
}

// holdWriteGrace is how long a hold may stay without its allocation: the
// two writes that make it take milliseconds; one still unallocated after
// this failed half way and holds nothing.
const holdWriteGrace = 30 * time.Second

// StaleHolds lists the holds to delete: those whose keeper (their owner)
// no longer holds the device (it was deallocated, deleted or replaced, so
// kube-scheduler has rightly forgotten the device and the hold only
// blocks it), and those left without an allocation by a failed write.
// claims are all claims, allocated or not.
func StaleHolds(claims []*resourceapi.ResourceClaim, now time.Time) []*resourceapi.ResourceClaim {
	byUID := map[string]*resourceapi.ResourceClaim{}
	for _, c := range claims {
		byUID[string(c.UID)] = c
	}
	var out []*resourceapi.ResourceClaim
	for _, h := range claims {
		if !IsHold(h) || h.DeletionTimestamp != nil {
			continue
		}
		if h.Status.Allocation == nil {
			if now.Sub(h.CreationTimestamp.Time) > holdWriteGrace {
				out = append(out, h)
			}
			continue
		}
		var keeper *resourceapi.ResourceClaim
		if len(h.OwnerReferences) == 1 {
			keeper = byUID[string(h.OwnerReferences[0].UID)]
		}
		if keeper == nil || !allocates(keeper, h.Annotations[HoldDeviceAnnotation]) {
			out = append(out, h)
		}
	}
	return out
}

// allocates reports whether a claim's allocation names the device
// driver/pool/device.
func allocates(c *resourceapi.ResourceClaim, device string) bool {
	if c.Status.Allocation == nil {
		return false
	}
	return slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return DeviceKey(r) == device
	})
}

// String names a kept device for messages.
func (k Keep) String() string {
	return fmt.Sprintf("%s (kept by %s/%s)", DeviceKey(k.Result), k.Keeper.Namespace, k.Keeper.Name)
}
