package handover

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
)

// ServeView returns the engine inputs in which CouldServe asks whether a
// claim could get a device of some pools, as kube-scheduler could have
// decided before it saw their rule: only those pools' slices, with every
// taint removed (its view may have lacked a taint) and no allocation
// counted (it may have seen a device free that is taken now). A node-local
// pool whose node is not in nodes gets a bare Node of that name, so that
// a lagging node cache never hides a pool.
func ServeView(slices []*resourceapi.ResourceSlice, pools func(central.PoolID) bool, classes []*resourceapi.DeviceClass, nodes []*corev1.Node, features allocator.Features) allocator.Inputs {
	in := allocator.Inputs{Classes: classes, Features: &features}
	known := map[string]bool{}
	for _, n := range nodes {
		if n != nil {
			known[n.Name] = true
			in.Nodes = append(in.Nodes, n)
		}
	}
	for _, s := range slices {
		if s == nil || !pools(central.PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}) {
			continue
		}
		cp := s.DeepCopy()
		for i := range cp.Spec.Devices {
			cp.Spec.Devices[i].Taints = nil
		}
		in.Slices = append(in.Slices, cp)
		if n := cp.Spec.NodeName; n != nil && *n != "" && !known[*n] {
			known[*n] = true
			in.Nodes = append(in.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: *n}})
		}
	}
	if len(in.Nodes) == 0 {
		// Node-less pools still need a node to be allocated for.
		in.Nodes = append(in.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "drastack-any-node"}})
	}
	return in
}

// Server answers CouldServe for one ServeView.
type Server struct {
	sess    allocator.Session
	classes map[string]bool
}

// NewServer starts a session of engine e on in (a ServeView).
func NewServer(ctx context.Context, e allocator.Engine, in allocator.Inputs) (*Server, error) {
	sess, err := e.NewSession(ctx, in)
	if err != nil {
		return nil, err
	}
	s := &Server{sess: sess, classes: map[string]bool{}}
	for _, c := range in.Classes {
		if c != nil {
			s.classes[c.Name] = true
		}
	}
	return s, nil
}

// CouldServe says whether some request (or subrequest) of claim could get
// one device of the view's pools: each is tried alone, for one device,
// without the claim's constraints, since kube-scheduler may give a claim's
// requests devices of different pools. Anything but a definite
// "unsatisfiable" (a class the operator's cache does not have yet, an
// invalid claim, an engine error, a search bound) counts as "could": the
// answer only ever makes the operator wait longer.
func (s *Server) CouldServe(ctx context.Context, claim *resourceapi.ResourceClaim) bool {
	for _, req := range singleRequests(claim) {
		if !s.classes[req.Exactly.DeviceClassName] {
			return true
		}
		one := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
			Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
		}
		_, err := s.sess.Allocate(ctx, []*resourceapi.ResourceClaim{one}, allocator.Options{})
		if err == nil || !errors.Is(err, allocator.ErrUnsatisfiable) {
			return true
		}
	}
	return false
}

// singleRequests turns every request and subrequest of claim into a
// request for exactly one device with the same class, selectors,
// tolerations, admin access and capacity.
func singleRequests(claim *resourceapi.ResourceClaim) []resourceapi.DeviceRequest {
	var out []resourceapi.DeviceRequest
	one := func(name string, r resourceapi.ExactDeviceRequest) {
		r.AllocationMode, r.Count = resourceapi.DeviceAllocationModeExactCount, 1
		out = append(out, resourceapi.DeviceRequest{Name: name, Exactly: &r})
	}
	for _, req := range claim.Spec.Devices.Requests {
		if req.Exactly != nil {
			one(req.Name, *req.Exactly.DeepCopy())
		}
		for _, sub := range req.FirstAvailable {
			sub = *sub.DeepCopy()
			one(req.Name, resourceapi.ExactDeviceRequest{
				DeviceClassName: sub.DeviceClassName, Selectors: sub.Selectors, Tolerations: sub.Tolerations, Capacity: sub.Capacity,
			})
		}
	}
	return out
}
