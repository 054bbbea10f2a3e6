package claims

// The other actors of the simulation: kube-scheduler, kube-controller-
// manager, the workload and the operator's lifecycle, then the step loop
// and the invariants.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/handover"
)

type ctrlResult = ctrl.Result

func resourceQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// simScheduler is kube-scheduler: its own lagging informers, one
// scheduling cycle at a time, allocations assumed in the cycle and written
// by a binding cycle that runs later (PreBind: re-read the claim, refuse if
// allocated elsewhere; then Bind).
type simScheduler struct {
	// bound are pods it bound that its informer does not show bound yet.
	bound   map[types.UID]bool
	w       *simWorld
	engine  allocator.Engine
	cache   *simCache
	assumed map[types.UID]*resourceapi.AllocationResult
	binding []simBinding
}

type simBinding struct {
	at     int
	pod    types.NamespacedName
	node   string
	claims []*resourceapi.ResourceClaim // with the allocation to write, or as they are
	// fresh are the claims this cycle allocated (the others were).
	fresh []types.UID
}

// cycle runs one scheduling cycle for a random pending pod it can see.
func (s *simScheduler) cycle() {
	w := s.w
	var pending []*corev1.Pod
	for _, k := range sortedKeys(s.cache.objs[kPod]) {
		p := s.cache.objs[kPod][k].(*corev1.Pod)
		if p.Spec.NodeName != "" {
			delete(s.bound, p.UID)
		}
		if p.Spec.NodeName == "" && p.DeletionTimestamp == nil && len(p.Spec.SchedulingGates) == 0 && !s.inBinding(p) && !s.bound[p.UID] {
			pending = append(pending, p)
		}
	}
	if len(pending) == 0 {
		return
	}
	pod := pending[w.rng.IntN(len(pending))]
	var toAllocate, allocated []*resourceapi.ResourceClaim
	for _, ref := range pod.Spec.ResourceClaims {
		o, ok := s.cache.objs[kClaim][pod.Namespace+"/"+*ref.ResourceClaimName]
		if !ok {
			return
		}
		c := o.(*resourceapi.ResourceClaim)
		if c.DeletionTimestamp != nil {
			return
		}
		if c.Status.Allocation != nil {
			allocated = append(allocated, c)
		} else if a, ok := s.assumed[c.UID]; ok {
			cc := c.DeepCopy()
			cc.Status.Allocation = a
			allocated = append(allocated, cc)
		} else {
			toAllocate = append(toAllocate, c)
		}
	}
	node := ""
	for _, c := range allocated {
		n := allocationNode(c.Status.Allocation)
		if node != "" && n != "" && n != node {
			return
		}
		if n != "" {
			node = n
		}
	}
	if node != "" && s.portTaken(pod, node) {
		// Its claims pin the pod to a node its NodePorts filter refuses.
		s.verdict(pod, corev1.PodReasonUnschedulable, portsMessage())
		return
	}
	var results []allocator.Result
	if len(toAllocate) > 0 {
		in := s.inputs()
		sess, err := s.engine.NewSession(context.Background(), in)
		if err != nil {
			w.logf("kube-scheduler: session: %v", err)
			return
		}
		for i := range simNodes {
			n := simNode(i)
			if (node != "" && n != node) || s.portTaken(pod, n) {
				continue
			}
			res, err := sess.Allocate(context.Background(), toAllocate, allocator.Options{Node: n})
			if err == nil {
				results, node = res, n
				break
			}
		}
		if results == nil {
			// Its filter failed on every node: the verdict kube-scheduler
			// writes before its next cycle.
			s.verdict(pod, corev1.PodReasonUnschedulable, fmt.Sprintf("0/%d nodes are available: %d cannot allocate all claims.", simNodes, simNodes))
			return
		}
	}
	for i := 0; node == "" || s.portTaken(pod, node); i++ {
		if i == simNodes {
			s.verdict(pod, corev1.PodReasonUnschedulable, fmt.Sprintf("0/%d nodes are available: %d node(s) didn't have free ports for the requested pod ports.", simNodes, simNodes))
			return
		}
		node = simNode(i)
	}
	b := simBinding{at: w.step + 1 + w.rng.IntN(25), pod: keyNN(pod), node: node}
	for i, c := range toAllocate {
		cc := c.DeepCopy()
		a := results[i].Allocation.DeepCopy()
		a.AllocationTimestamp = ptr.To(metav1.NewTime(w.clock))
		cc.Status.Allocation = a
		s.assumed[c.UID] = a
		b.claims = append(b.claims, cc)
		b.fresh = append(b.fresh, c.UID)
		if w.opts.joinAfterAssume && allocationNode(a) != "" {
			w.lastAssumed = allocationNode(a)
		}
		w.logf("kube-scheduler: assumes %s gets %s", c.Name, deviceList(a))
	}
	b.claims = append(b.claims, allocated...)
	s.binding = append(s.binding, b)
	w.logf("kube-scheduler: pod %s assumed on %s (%d claims allocated, bound at step %d; it sees %d rules)", pod.Name, node, len(toAllocate), b.at, len(s.cache.objs[kRule]))
}

func (s *simScheduler) inBinding(p *corev1.Pod) bool {
	return slices.ContainsFunc(s.binding, func(b simBinding) bool { return b.pod == keyNN(p) })
}

// inputs is kube-scheduler's view: the real slices with the
// DeviceTaintRules it has seen, and what it sees allocated or assumed.
func (s *simScheduler) inputs() allocator.Inputs {
	var in allocator.Inputs
	for _, k := range sortedKeys(s.cache.objs[kSlice]) {
		in.Slices = append(in.Slices, s.cache.objs[kSlice][k].(*resourceapi.ResourceSlice))
	}
	for _, k := range sortedKeys(s.cache.objs[kClass]) {
		in.Classes = append(in.Classes, s.cache.objs[kClass][k].(*resourceapi.DeviceClass))
	}
	for _, k := range sortedKeys(s.cache.objs[kNode]) {
		in.Nodes = append(in.Nodes, s.cache.objs[kNode][k].(*corev1.Node))
	}
	for _, k := range sortedKeys(s.cache.objs[kRule]) {
		in.TaintRules = append(in.TaintRules, *s.cache.objs[kRule][k].(*resourceapi.DeviceTaintRule))
	}
	for _, k := range sortedKeys(s.cache.objs[kClaim]) {
		c := s.cache.objs[kClaim][k].(*resourceapi.ResourceClaim)
		if c.Status.Allocation != nil {
			delete(s.assumed, c.UID)
			in.Allocated = append(in.Allocated, c)
		} else if a, ok := s.assumed[c.UID]; ok {
			cc := c.DeepCopy()
			cc.Status.Allocation = a
			in.Allocated = append(in.Allocated, cc)
		}
	}
	f := allocator.FeaturesOf(nil)
	f.DeviceTaints, f.DeviceTaintRules, f.AdminAccess = true, true, true
	in.Features = &f
	return in
}

// bind runs the binding cycles that are due.
func (s *simScheduler) bind() {
	w := s.w
	keep := s.binding[:0]
	for _, b := range s.binding {
		if b.at > w.step {
			keep = append(keep, b)
			continue
		}
		written, err := s.preBind(b)
		if err != nil {
			// Unreserve: what this cycle wrote is deallocated again.
			for _, c := range written {
				s.unreserve(c, b)
			}
			// Unreserve what this cycle allocated. After a success the
			// assumed allocations, and the pod's binding, stay until the
			// informer shows them (the assume cache).
			for _, uid := range b.fresh {
				delete(s.assumed, uid)
			}
			// The binding failure's verdict, at the end of the cycle.
			if o, ok := w.store.get(kPod, b.pod.String()); ok {
				s.verdict(o.(*corev1.Pod), corev1.PodReasonSchedulerError, "running PreBind plugin \"DynamicResources\": "+err.Error())
			}
		} else {
			s.bound[s.podUID(b.pod)] = true
		}
		w.logf("kube-scheduler: binding pod %s on %s: %v", b.pod.Name, b.node, err)
	}
	s.binding = keep
}

func (s *simScheduler) preBind(b simBinding) ([]*resourceapi.ResourceClaim, error) {
	st := s.w.store
	var written []*resourceapi.ResourceClaim
	for _, want := range b.claims {
		o, ok := st.get(kClaim, keyOf(want))
		if !ok || o.GetUID() != want.UID {
			return written, fmt.Errorf("claim %s got deleted", want.Name)
		}
		c := o.(*resourceapi.ResourceClaim).DeepCopy()
		if c.DeletionTimestamp != nil {
			return written, fmt.Errorf("claim %s is being deleted", c.Name)
		}
		if c.Status.Allocation == nil && !slices.Contains(b.fresh, c.UID) {
			// Its cycle saw the claim allocated: its update of
			// reservedFor carries that resourceVersion, and the API
			// server refuses reservedFor without an allocation anyway.
			return written, fmt.Errorf("claim %s got deallocated", c.Name)
		}
		if c.Status.Allocation == nil {
			c.Status.Allocation = want.Status.Allocation
			if !slices.Contains(c.Finalizers, claimpolicy.Finalizer) {
				c.Finalizers = append(c.Finalizers, claimpolicy.Finalizer)
				if err := st.replace(c, ""); err != nil {
					return written, err
				}
				c.Status.Allocation = want.Status.Allocation
			}
		} else if !equalAlloc(c.Status.Allocation, want.Status.Allocation) && want.Status.Allocation != nil && s.assumedFor(want) {
			return written, fmt.Errorf("claim %s got allocated elsewhere", c.Name)
		}
		fresh := slices.Contains(b.fresh, c.UID)
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: b.pod.Name, UID: s.podUID(b.pod)})
		if err := st.replace(c, "status"); err != nil {
			return written, err
		}
		if fresh {
			written = append(written, c)
		}
	}
	o, ok := st.get(kPod, b.pod.String())
	if !ok {
		return written, fmt.Errorf("pod gone")
	}
	p := o.(*corev1.Pod).DeepCopy()
	if p.Spec.NodeName != "" || len(p.Spec.SchedulingGates) > 0 {
		return written, fmt.Errorf("pod changed")
	}
	p.Spec.NodeName = b.node
	return written, st.replace(p, "")
}

// unreserve deallocates a claim this binding allocated, if it is still
// allocated as written and reserved for this pod alone.
func (s *simScheduler) unreserve(written *resourceapi.ResourceClaim, b simBinding) {
	o, ok := s.w.store.get(kClaim, keyOf(written))
	if !ok || o.GetUID() != written.UID {
		return
	}
	c := o.(*resourceapi.ResourceClaim).DeepCopy()
	if !equalAlloc(c.Status.Allocation, written.Status.Allocation) {
		return
	}
	var kept []resourceapi.ResourceClaimConsumerReference
	for _, ref := range c.Status.ReservedFor {
		if ref.Name != b.pod.Name {
			kept = append(kept, ref)
		}
	}
	if len(kept) > 0 {
		return
	}
	c.Status.ReservedFor, c.Status.Allocation = nil, nil
	if err := s.w.store.replace(c, "status"); err == nil {
		s.w.logf("kube-scheduler: unreserve deallocated %s", c.Name)
	}
}

// verdict writes kube-scheduler's refusal of an unbound pod (PodScheduled
// False), as its updatePod does: only when the condition changes, with its
// managedFields entry stamped by the API server (whole seconds).
func (s *simScheduler) verdict(pod *corev1.Pod, reason, msg string) {
	w := s.w
	o, ok := w.store.get(kPod, keyOf(pod))
	if !ok || o.GetUID() != pod.UID {
		return
	}
	p := o.(*corev1.Pod).DeepCopy()
	if p.Spec.NodeName != "" {
		return
	}
	cond := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: msg}
	i := slices.IndexFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled })
	// lastTransitionTime moves only when the status flips (a gated pod's
	// condition was False from its creation).
	cond.LastTransitionTime = metaNow(w.clock)
	switch {
	case i < 0:
		p.Status.Conditions = append(p.Status.Conditions, cond)
	case p.Status.Conditions[i].Status == cond.Status && p.Status.Conditions[i].Reason == reason && p.Status.Conditions[i].Message == msg:
		return
	default:
		if p.Status.Conditions[i].Status == cond.Status {
			cond.LastTransitionTime = p.Status.Conditions[i].LastTransitionTime
		}
		p.Status.Conditions[i] = cond
	}
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: claimpolicy.SchedulerName, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
		Time: ptr.To(metav1.NewTime(w.clock.Truncate(time.Second)))}}
	if err := w.store.replace(p, "status"); err == nil {
		w.logf("kube-scheduler: pod %s refused (%s)", p.Name, reason)
	}
}

func (s *simScheduler) assumedFor(c *resourceapi.ResourceClaim) bool { return true }

func (s *simScheduler) podUID(key types.NamespacedName) types.UID {
	if o, ok := s.w.store.get(kPod, key.String()); ok {
		return o.GetUID()
	}
	return ""
}

// allocationNode is the node an allocation of node-local devices is for
// ("" for the canary's device, which every node reaches).
func allocationNode(a *resourceapi.AllocationResult) string {
	if a == nil || len(a.Devices.Results) == 0 || a.Devices.Results[0].Driver != simDriver {
		return ""
	}
	return a.Devices.Results[0].Pool
}

// kcm is kube-controller-manager's resourceclaim controller: a deleted
// claim nothing reserves is deallocated and released; reservations of
// pods that are gone are dropped.
func (w *simWorld) kcm() {
	st := w.store
	for _, o := range st.list(kClaim) {
		c := o.(*resourceapi.ResourceClaim).DeepCopy()
		var kept []resourceapi.ResourceClaimConsumerReference
		for _, ref := range c.Status.ReservedFor {
			if p, ok := st.get(kPod, c.Namespace+"/"+ref.Name); ok && p.GetUID() == ref.UID {
				kept = append(kept, ref)
			}
		}
		if len(kept) != len(c.Status.ReservedFor) {
			c.Status.ReservedFor = kept
			if err := st.replace(c, "status"); err != nil {
				continue
			}
			w.logf("kcm: claim %s unreserved", c.Name)
		}
		if c.DeletionTimestamp != nil && len(c.Status.ReservedFor) == 0 {
			if c.Status.Allocation != nil {
				c.Status.Allocation = nil
				if err := st.replace(c, "status"); err != nil {
					continue
				}
			}
			c.Finalizers = nil
			if err := st.replace(c, ""); err == nil {
				w.logf("kcm: claim %s released", c.Name)
			}
		}
	}
}

// workload creates and deletes pods and claims.
func (w *simWorld) workload() {
	st := w.store
	// The tenants' objects (the operator's namespace holds the join
	// barrier's canaries).
	operators := func(o client.Object) bool { return o.GetNamespace() != simNS }
	pods := slices.DeleteFunc(st.list(kPod), operators)
	claims := slices.DeleteFunc(st.list(kClaim), operators)
	switch p := w.rng.Float64(); {
	case p < 0.35 && len(pods) < 8 && len(claims) < 14:
		w.names++
		name := fmt.Sprintf("p%d", w.names)
		operator := w.rng.IntN(3) != 0
		n := 1
		if operator {
			n = 1 + w.rng.IntN(2)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: simNS, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
		if operator && w.rng.IntN(4) == 0 {
			// A pod of an immediate claim (a workload that knows its
			// devices before it starts): the claim loop allocates it.
			for _, o := range claims {
				if o.GetLabels()[claimpolicy.AllocationLabel] == claimpolicy.AllocationImmediate && o.GetDeletionTimestamp() == nil {
					pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "imm", ResourceClaimName: ptr.To(o.GetName())})
					n = 0
					break
				}
			}
		}
		for i := range n {
			c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: simNS, Name: fmt.Sprintf("%s-c%d", name, i)},
				Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: simPlainClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
				}}}}}
			if operator {
				c.Spec.Devices.Requests[0].Exactly.DeviceClassName = simCentralClass
				c.Annotations = map[string]string{allocator.CELConstraintsAnnotation: `[{"expression": "size(devices) == 1"}]`}
				c.Finalizers = []string{claimpolicy.Finalizer} // the claim webhook
			}
			_ = st.create(c)
			pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: fmt.Sprintf("c%d", i), ResourceClaimName: ptr.To(c.Name)})
		}
		w.gangPod(pod, operator)
		gated := operator && !(w.opts.webhookDown && w.rng.IntN(3) == 0)
		if gated {
			pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: claimpolicy.SchedulingGate}}
			pod.Status.Conditions = []corev1.PodCondition{w.gatedCondition()}
		}
		// Not for gang members: the gang's placement has its own checks
		// (sim_gang_test.go).
		ports := w.opts.hostPorts && !inGang(pod) && ((w.opts.portConflicts && operator) || w.rng.IntN(3) == 0)
		if ports {
			pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: simHostPort}}
		}
		_ = st.create(pod)
		w.logf("workload: pod %s (%d claims, operator %v, gated %v, host port %v)", name, n, operator, gated, ports)
	case p < 0.4 && len(pods) < 8 && len(claims) < 14:
		// A tenant's claim that tolerates the central taint, for an
		// ungated pod of kube-scheduler's class. The operator's admission
		// policy refuses it; without the policy it is created.
		if !w.opts.admitTolerations {
			w.logf("workload: a claim tolerating the central taint is refused by the admission policy")
			break
		}
		w.names++
		name := fmt.Sprintf("p%d", w.names)
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: simNS, Name: name + "-c0"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: simPlainClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
					Tolerations: []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists}}},
			}}}}}
		_ = st.create(c)
		_ = st.create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: simNS, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "c0", ResourceClaimName: ptr.To(c.Name)}}}})
		w.logf("workload: pod %s with a claim that tolerates the central taint", name)
	case p < 0.45 && len(claims) < 14:
		w.names++
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: simNS, Name: fmt.Sprintf("imm%d", w.names),
			Labels: map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}, Finalizers: []string{claimpolicy.Finalizer}},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: simCentralClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			}}}}}
		_ = st.create(c)
		w.logf("workload: immediate claim %s", c.Name)
	case p < 0.65 && len(pods) > 0:
		pod := pods[w.rng.IntN(len(pods))].(*corev1.Pod)
		_ = st.remove(pod, nil)
		if w.rng.IntN(4) == 0 {
			// Its claims stay (claims made directly, not from a template).
			w.logf("workload: pod %s deleted, its claims kept", pod.Name)
			break
		}
		for _, ref := range pod.Spec.ResourceClaims {
			if c, ok := st.get(kClaim, simNS+"/"+*ref.ResourceClaimName); ok {
				_ = st.remove(c, nil)
			}
		}
		w.logf("workload: pod %s and its claims deleted", pod.Name)
	case p < 0.8 && len(claims) > 0:
		// Someone labels a claim: a write of it under way conflicts.
		c := claims[w.rng.IntN(len(claims))].(*resourceapi.ResourceClaim).DeepCopy()
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels["touched"] = fmt.Sprint(w.step)
		if err := st.replace(c, ""); err == nil {
			w.logf("workload: claim %s labelled", c.Name)
		}
	case p < 0.85:
		for _, o := range claims {
			if o.GetLabels()[claimpolicy.AllocationLabel] == claimpolicy.AllocationImmediate {
				_ = st.remove(o, nil)
				w.logf("workload: immediate claim %s deleted", o.GetName())
				break
			}
		}
	}
}

// partitionEdit moves a pool in or out of the partition, or deletes a
// central rule as another writer would.
func (w *simWorld) partitionEdit() {
	st := w.store
	if w.rng.IntN(3) == 0 {
		if !w.opts.joins {
			return
		}
		// An admin's mistake the admission policies would refuse, on a
		// pool no allocation holds (deleting a held device's rule lets
		// kube-scheduler give it away whatever the operator does): the
		// operator must stop using the pool, restore the rule and let it
		// join again.
		for _, o := range st.list(kRule) {
			rule := o.(*resourceapi.DeviceTaintRule)
			if central.Owned(rule) && rule.Spec.DeviceSelector != nil && rule.Spec.DeviceSelector.Pool != nil && !w.poolHeld(*rule.Spec.DeviceSelector.Pool) && !w.writesInFlight() {
				w.adminDeleted[rule.UID] = true
				_ = st.remove(o, nil)
				w.logf("admin: central rule %s deleted", o.GetName())
				return
			}
		}
		return
	}
	o, _ := st.get(kStack, "/"+v1alpha1.DRAStackName)
	stack := o.(*v1alpha1.DRAStack).DeepCopy()
	pool := simNode(1 + w.rng.IntN(simNodes-1))
	if w.opts.leaveAfterWrite && w.lastWrite != "" && w.lastWrite != "n0" {
		pool = w.lastWrite
	}
	e := &stack.Spec.Claims.Central[0]
	if w.opts.joinAfterAssume && w.lastAssumed != "" && !slices.Contains(e.Pools, w.lastAssumed) {
		pool, w.lastAssumed = w.lastAssumed, ""
	}
	if i := slices.Index(e.Pools, pool); i >= 0 {
		e.Pools = slices.Delete(e.Pools, i, i+1)
	} else if w.opts.joins {
		e.Pools = append(e.Pools, pool)
	} else {
		return
	}
	if len(e.Pools) == 0 {
		e.Pools = []string{"n0"}
	}
	if err := st.replace(stack, ""); err == nil {
		w.logf("admin: central pools now %v", e.Pools)
	}
}

// writesInFlight says whether an operator's write may still commit: a
// reservation not ended, or a request queued in the API server.
func (w *simWorld) writesInFlight() bool {
	for _, op := range w.ops {
		if n, _ := op.r.ledger.Pending(); n > 0 {
			return true
		}
	}
	return len(w.delayed) > 0
}

// excuse notes an operator's allocation sent while its cache still showed
// a central rule of the pool that an administrator deleted: the operator
// could not know yet, and kube-scheduler may already give the device to
// another claim (what the admission policies exist to prevent). The
// protocol answers for what the operator decides once it sees the
// deletion: the pool is used again only after it joined again.
func (w *simWorld) excuse(from string, c *resourceapi.ResourceClaim) {
	pool := allocationNode(c.Status.Allocation)
	for _, op := range w.ops {
		if op.name != from {
			continue
		}
		for _, o := range op.cache.objs[kRule] {
			if sel := o.(*resourceapi.DeviceTaintRule).Spec.DeviceSelector; w.adminDeleted[o.GetUID()] && sel != nil && sel.Pool != nil && *sel.Pool == pool {
				w.excused[c.UID] = true
				w.logf("%s: allocation of %s sent before it saw the deletion of rule %s", from, c.Name, o.GetName())
			}
		}
	}
}

// poolHeld says whether an allocation uses a device of the pool.
func (w *simWorld) poolHeld(pool string) bool {
	for _, o := range w.store.list(kClaim) {
		if c := o.(*resourceapi.ResourceClaim); c.Status.Allocation != nil && allocationNode(c.Status.Allocation) == pool {
			return true
		}
	}
	return false
}

// leadership deposes, pauses or crashes the leader.
func (w *simWorld) leadership() {
	var leader *simOperator
	for _, op := range w.ops {
		if op.elected {
			leader = op
		}
	}
	if leader == nil {
		return
	}
	leader.elected = false
	if w.rng.IntN(2) == 0 {
		// Crashed: gone at once (its requests in flight still commit).
		leader.active = false
		w.logf("%s crashed", leader.name)
	} else {
		// Paused past its lease: keeps acting until it notices.
		leader.exitAt = w.step + 1 + w.rng.IntN(40)
		w.logf("%s lost its lease, acts until step %d", leader.name, leader.exitAt)
	}
	w.startOperator()
}

// stepOnce runs one step: a random actor does one thing.
func (w *simWorld) stepOnce(quiet bool) bool {
	w.step++
	w.clock = w.clock.Add(10 * time.Millisecond)
	// Requests queued in the API server commit when their time comes.
	var due []delayedRequest
	keep := w.delayed[:0]
	for _, d := range w.delayed {
		if d.at <= w.step {
			due = append(due, d)
		} else {
			keep = append(keep, d)
		}
	}
	w.delayed = keep
	for _, d := range due {
		err := d.apply()
		w.logf("%s: a queued request committed: %v", d.from, err)
	}
	var live []*simOperator
	for _, op := range w.ops {
		if op.active && op.exitAt > 0 && op.exitAt <= w.step {
			op.active = false
			w.logf("%s noticed it lost its lease and exits", op.name)
		}
		if op.active {
			live = append(live, op)
		}
	}
	w.ops = live
	for _, op := range w.ops {
		if op.elected && !op.ready {
			w.beginTerm(op)
			return true
		}
	}
	w.sched.bind()
	did := false
	switch p := w.rng.Float64(); {
	case p < 0.3:
		// An informer delivers one event.
		did = w.deliverSome()
	case p < 0.35:
		if len(w.ops) > 0 {
			did = w.handleFeed(w.ops[w.rng.IntN(len(w.ops))])
		}
	case p < 0.6:
		if len(w.ops) > 0 {
			did = w.reconcile(w.ops[w.rng.IntN(len(w.ops))])
		}
	case p < 0.7:
		w.sched.cycle()
		did = true
	case p < 0.75:
		w.kcm()
		did = true
	case quiet:
	case p < 0.9:
		w.workload()
		did = true
	case p < 0.92 && w.opts.partition && (w.step > 150 || (w.opts.leaveAfterWrite && w.lastWrite != "") || (w.opts.joinAfterAssume && w.lastAssumed != "")):
		// Once the cluster is busy: a pool that leaves then holds
		// allocations kube-scheduler would want.
		w.partitionEdit()
		did = true
	case p < 0.93 && w.opts.leaders:
		w.leadership()
		did = true
	}
	return did
}

// deliverSome delivers one event to a random informer of a random
// consumer.
func (w *simWorld) deliverSome() bool {
	caches := []func(string) bool{func(k string) bool {
		if _, ok := w.sched.cache.deliver(w.store, k); ok {
			return true
		}
		return false
	}}
	for _, op := range w.ops {
		caches = append(caches, func(k string) bool { return w.deliverTo(op, k) })
	}
	kinds := slices.Clone(simKinds)
	w.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	deliver := caches[w.rng.IntN(len(caches))]
	for _, k := range kinds {
		if deliver(k) {
			return true
		}
	}
	return false
}

// violation is a broken invariant.
type violation struct {
	step int
	what string
}

// checkDevices is I1: no device is in the allocations of two claims.
func (w *simWorld) checkDevices() *violation {
	holder := map[string]string{}
	for _, o := range w.store.list(kClaim) {
		c := o.(*resourceapi.ResourceClaim)
		if c.Status.Allocation == nil || w.excused[c.UID] {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				// Admin access shares the device (the join barrier's
				// canary claims).
				continue
			}
			d := r.Driver + "/" + r.Pool + "/" + r.Device
			if other, ok := holder[d]; ok && other != c.Name {
				return &violation{step: w.step, what: fmt.Sprintf("device %s is allocated to claims %s and %s", d, other, c.Name)}
			}
			holder[d] = c.Name
		}
	}
	return nil
}

// settle runs the world without faults, new work or leader changes until
// it is quiet, jumping the clock to the next requeue when nothing is
// ready.
func (w *simWorld) settle() {
	w.faultOn = false
	for range 400 {
		for len(w.delayed) > 0 || len(w.sched.binding) > 0 {
			w.stepOnce(true)
		}
		moved := false
		for _, op := range w.ops {
			for _, k := range simKinds {
				for w.deliverTo(op, k) {
					moved = true
				}
			}
			for w.handleFeed(op) {
				moved = true
			}
		}
		for _, k := range simKinds {
			for {
				if _, ok := w.sched.cache.deliver(w.store, k); !ok {
					break
				}
				moved = true
			}
		}
		w.kcm()
		w.sched.cycle()
		if len(w.sched.binding) > 0 {
			w.step += 30
			continue
		}
		for _, op := range w.ops {
			if op.elected && !op.ready {
				w.beginTerm(op)
				moved = true
			}
			for w.reconcile(op) {
				moved = true
			}
		}
		if moved || w.anyCacheBehind() {
			continue
		}
		next := time.Time{}
		for _, op := range w.ops {
			for _, at := range op.queue {
				if next.IsZero() || at.Before(next) {
					next = at
				}
			}
		}
		if next.IsZero() || next.Sub(w.clock) > 10*time.Minute {
			return
		}
		w.clock = next
	}
}

func (w *simWorld) anyCacheBehind() bool {
	for _, op := range w.ops {
		if len(op.feed) > 0 {
			return true
		}
	}
	for _, k := range simKinds {
		if w.sched.cache.behind(w.store, k) > 0 {
			return true
		}
		for _, op := range w.ops {
			if op.cache.behind(w.store, k) > 0 {
				return true
			}
		}
	}
	return false
}

// checkSettled checks I2 and I3 once the world is quiet: no pod of the
// operator holds half a placement, no reservation is left, and no pod
// waits for a placement that could be made.
func (w *simWorld) checkSettled() *violation {
	var leader *simOperator
	for _, op := range w.ops {
		if op.elected {
			leader = op
		}
	}
	if leader == nil {
		return &violation{step: w.step, what: "no leader after settling"}
	}
	if n, _ := leader.r.ledger.Pending(); n > 0 {
		return &violation{step: w.step, what: fmt.Sprintf("%d reservations never ended", n)}
	}
	if v := w.checkJoins(leader); v != nil {
		return v
	}
	cfg := leader.r.cfg.get()
	for _, o := range w.store.list(kPod) {
		p := o.(*corev1.Pod)
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || inGang(p) {
			continue
		}
		var placed, open []*resourceapi.ResourceClaim
		for _, ref := range p.Spec.ResourceClaims {
			co, ok := w.store.get(kClaim, p.Namespace+"/"+*ref.ResourceClaimName)
			if !ok {
				continue
			}
			c := co.(*resourceapi.ResourceClaim)
			if claimpolicy.SelectClaim(cfg, c) == claimpolicy.WhyNone || c.DeletionTimestamp != nil {
				continue
			}
			if c.Status.Allocation != nil {
				placed = append(placed, c)
			} else {
				open = append(open, c)
			}
		}
		if len(placed) > 0 && len(open) > 0 && claimpolicy.HasGate(p) {
			return &violation{step: w.step, what: fmt.Sprintf("pod %s is gated with claims %s allocated and %s not", p.Name, claimNames(placed), claimNames(open))}
		}
		if len(open) == 0 && len(placed) > 0 && claimpolicy.HasGate(p) {
			return &violation{step: w.step, what: fmt.Sprintf("pod %s is still gated with all its claims (%s) allocated", p.Name, claimNames(placed))}
		}
		if len(open) > 0 && w.placeable(leader, p, open) {
			return &violation{step: w.step, what: fmt.Sprintf("pod %s waits (gated %v) although its claims %s can be placed", p.Name, claimpolicy.HasGate(p), claimNames(open))}
		}
	}
	return w.checkGangs(leader)
}

// checkJoins is I3 for the join barrier: once the world is quiet, every
// central pool rule has joined, except while the round under way waits for
// a pod that is neither bound nor refused again (the residual of
// docs/allocation-protocol.md: kube-scheduler writes no new refusal when
// its verdict is unchanged; a rule made after the round began waits for
// the next round).
func (w *simWorld) checkJoins(leader *simOperator) *violation {
	j := leader.jn
	stuck := false
	if round := j.round; round != nil && round.refusal != nil {
		for _, ws := range round.waits {
			stuck = stuck || ws.open() > 0
		}
	}
	for _, o := range w.store.list(kRule) {
		rule := o.(*resourceapi.DeviceTaintRule)
		if !handover.PoolRule(rule) || handover.Joined(rule) || stuck {
			continue
		}
		state := "no round"
		if round := j.round; round != nil {
			state = fmt.Sprintf("round %s cleared %v attempt %d refused %v", round.id, round.cleared, round.attempt, round.refusal != nil)
		}
		return &violation{step: w.step, what: fmt.Sprintf("central rule %s (generation %d) has not joined after settling (%s)", rule.Name, rule.Generation, state)}
	}
	return nil
}

// settledSession is an engine session over the operator's view of the
// settled state with every allocation the store holds; false when the
// view or the session cannot be built.
func (w *simWorld) settledSession(op *simOperator) (allocator.Session, bool) {
	view, err := op.r.source.Read(context.Background())
	if err != nil {
		return nil, false
	}
	in := view.Inputs
	for _, o := range w.store.list(kClaim) {
		if c := o.(*resourceapi.ResourceClaim); c.Status.Allocation != nil {
			in.Allocated = append(in.Allocated, c)
		}
	}
	sess, err := w.sched.engine.NewSession(context.Background(), in)
	return sess, err == nil
}

// placeable asks the engine, on the settled state as the operator sees it,
// whether claims fit together on some node where kube-scheduler would let
// the pod run (its host port is free there).
func (w *simWorld) placeable(op *simOperator, pod *corev1.Pod, claims []*resourceapi.ResourceClaim) bool {
	sess, ok := w.settledSession(op)
	if !ok {
		return false
	}
	var forOp []*resourceapi.ResourceClaim
	for _, c := range claims {
		scoped, _ := op.r.scoped(op.r.cfg.get(), c)
		forOp = append(forOp, scoped)
	}
	for i := range simNodes {
		if w.sched.portTaken(pod, simNode(i)) {
			continue
		}
		if _, err := sess.Allocate(context.Background(), forOp, allocator.Options{Node: simNode(i)}); err == nil {
			return true
		}
	}
	return false
}

// run runs a world for opts.steps, checking I1 and I4 after every step,
// then settles it and checks I2 and I3.
func (w *simWorld) run() *violation {
	for range w.opts.steps {
		w.stepOnce(false)
		if v := w.checkDevices(); v != nil {
			return v
		}
		if w.takenBack != nil {
			return w.takenBack
		}
	}
	w.settle()
	if v := w.checkDevices(); v != nil {
		return v
	}
	if w.takenBack != nil {
		return w.takenBack
	}
	return w.checkSettled()
}

func (w *simWorld) lastTrace(n int) string {
	from := max(0, len(w.trace)-n)
	return strings.Join(w.trace[from:], "\n")
}

var _ client.Object = (*corev1.Pod)(nil)
