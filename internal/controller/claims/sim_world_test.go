package claims

// The simulated world: the API server (simStore) behind a fault injector,
// operator instances running the real Reconciler, ledger and fence over
// lagging informer caches, a kube-scheduler with its own lag and
// asynchronous binding, kube-controller-manager's claim clean-up, and a
// workload. Every choice comes from one seeded source, so a seed replays
// exactly. docs/allocation-protocol.md says what is checked.

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/fence"
	"github.com/drastack/drastack/internal/handover"
)

// The simulated cluster.
const (
	simDriver       = "gpu.sim.drastack.io"
	simNS           = "sim"
	simOperatorNS   = "drastack-system"
	simCentralClass = "gpu-central"
	simPlainClass   = "gpu"
	simNodes        = 3
	simDevices      = 3
)

func simNode(i int) string { return fmt.Sprintf("n%d", i) }

// simOptions shape a run.
type simOptions struct {
	steps int
	// faults injects request failures, delays and ambiguous answers.
	faults bool
	// leaders changes, pauses and crashes the leader.
	leaders bool
	// partition edits the DRAStack: pools leave the partition, and, with
	// joins, join it; with joins, another writer deletes central rules of
	// idle pools.
	partition bool
	joins     bool
	// webhookDown creates some operator pods without their gate.
	webhookDown bool
	// admitTolerations turns the operator's admission policy off: claims
	// that tolerate the central taint are created (problem 6).
	admitTolerations bool
	// leaveAfterWrite steers the partition edits: a pool the operator
	// just wrote an allocation of leaves the partition a few steps later.
	leaveAfterWrite bool
	// joinAfterAssume steers the partition edits: a pool kube-scheduler
	// just assumed an allocation of joins the partition.
	joinAfterAssume bool
	// gangs puts some operator pods into gangs (sim_gang_test.go).
	gangs bool
	// placementTimeout is the DRAStack's spec.claims.placementTimeout
	// (0: the default, longer than a run).
	placementTimeout time.Duration
	// hostPorts gives some pods a host port: kube-scheduler refuses a node
	// where a bound pod uses it, a check the operator's placement does not
	// make (internal/placement), so a placed pod can be refused.
	hostPorts bool
	// portConflicts steers the workload: every operator pod asks for the
	// host port (problem 7).
	portConflicts bool
}

// simWorld is one run.
type simWorld struct {
	seed    uint64
	rng     *rand.Rand
	opts    simOptions
	store   *simStore
	clock   time.Time
	step    int
	ops     []*simOperator
	sched   *simScheduler
	delayed []delayedRequest
	trace   []string
	hash    uint64
	names   int
	faultOn bool
	// lastWrite is the pool of the operator's latest allocation write
	// (leaveAfterWrite).
	lastWrite string
	// lastAssumed is the pool of kube-scheduler's latest assumed
	// allocation (joinAfterAssume).
	lastAssumed string
	// adminDeleted are the central rules an administrator deleted, and
	// excused the claims the operator allocated before it saw such a
	// deletion (excuse).
	adminDeleted map[types.UID]bool
	excused      map[types.UID]bool
	// allocations counts the operator's allocation writes answered
	// without an error: a run that allocates nothing checks nothing.
	allocations int
	// off is applied to every operator instance started.
	off protocolSwitches
	// takenBack is the first placement the operator took back against
	// I4 (checkTakeBack).
	takenBack *violation
	// setupLog is how many events of each kind setup wrote: every
	// informer's first list shows at least those.
	setupLog map[string]int
}

type delayedRequest struct {
	at    int
	from  string
	apply func() error
}

func newSimWorld(seed uint64, opts simOptions) *simWorld {
	w := &simWorld{seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), opts: opts, store: newSimStore(),
		clock: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), faultOn: opts.faults,
		adminDeleted: map[types.UID]bool{}, excused: map[types.UID]bool{}}
	if *simSeed != 0 {
		w.store.debug = w.logf
	}
	w.setup()
	w.setupLog = map[string]int{}
	for _, k := range simKinds {
		w.setupLog[k] = len(w.store.log[k])
	}
	w.sched = &simScheduler{w: w, engine: native.New(), cache: newSimCache(), assumed: map[types.UID]*resourceapi.AllocationResult{}, bound: map[types.UID]bool{}}
	for _, k := range simKinds {
		for {
			if _, ok := w.sched.cache.deliver(w.store, k); !ok {
				break
			}
		}
	}
	w.startOperator()
	return w
}

func (w *simWorld) now() time.Time { return w.clock }

func (w *simWorld) logf(format string, args ...any) {
	line := fmt.Sprintf("%5d ", w.step) + fmt.Sprintf(format, args...)
	w.trace = append(w.trace, line)
	h := fnv.New64a()
	_, _ = h.Write([]byte(line))
	w.hash = w.hash*31 + h.Sum64()
}

// setup stores the cluster: nodes with one node-local pool each, the two
// classes, and the DRAStack with pools n0 and n1 central.
func (w *simWorld) setup() {
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	for i := range simNodes {
		n := simNode(i)
		must(w.store.create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourcePods: *resourceQuantity("110")}}}))
		sl := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: n + "-gpu"},
			Spec: resourceapi.ResourceSliceSpec{Driver: simDriver, Pool: resourceapi.ResourcePool{Name: n, Generation: 1, ResourceSliceCount: 1}, NodeName: ptr.To(n)}}
		for d := range simDevices {
			sl.Spec.Devices = append(sl.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", d)})
		}
		must(w.store.create(sl))
	}
	must(w.store.create(&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: simPlainClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + simDriver + `"`}}}}}))
	must(w.store.create(&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: simCentralClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: central.ClassSelector(simCentralClass)}}}}}))
	// The initial central pools joined long ago: their rules exist, and
	// every informer's first list (kube-scheduler waits for all of them
	// before its first cycle) shows them.
	for _, pool := range []string{"n0", "n1"} {
		must(w.store.create(&resourceapi.DeviceTaintRule{
			ObjectMeta: metav1.ObjectMeta{Name: central.RuleName(simDriver, pool), Labels: central.RuleLabels(), Generation: 1,
				Annotations: map[string]string{handover.JoinedAnnotation: "1"}},
			Spec: resourceapi.DeviceTaintRuleSpec{Taint: central.Taint(),
				DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(simDriver), Pool: ptr.To(pool)}},
		}))
	}
	must(w.store.create(&v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName, Finalizers: []string{CleanupFinalizer}},
		Spec: v1alpha1.DRAStackSpec{Claims: v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, GatePods: ptr.To(true), PlacementTimeout: w.placementTimeout(),
			Central: []v1alpha1.CentralDevices{{Driver: simDriver, Pools: []string{"n0", "n1"}, Classes: []string{simCentralClass}, AllowImmediate: true}}}}}))
}

func (w *simWorld) placementTimeout() *metav1.Duration {
	if w.opts.placementTimeout == 0 {
		return nil
	}
	return &metav1.Duration{Duration: w.opts.placementTimeout}
}

// request sends one write of an operator instance through the fault
// injector: it commits now, fails before committing, commits and then
// fails (the client sees a timeout), or is queued and commits later.
func (w *simWorld) request(from string, obj client.Object, apply func(client.Object) error) error {
	if c, ok := obj.(*resourceapi.ResourceClaim); ok && c.Status.Allocation != nil && len(w.adminDeleted) > 0 {
		w.excuse(from, c)
	}
	if c, ok := obj.(*resourceapi.ResourceClaim); ok && c.Status.Allocation == nil {
		apply = w.checkTakeBack(c, apply)
	}
	if !w.faultOn {
		return apply(obj)
	}
	timeout := apierrors.NewTimeoutError("the request timed out", 1)
	switch p := w.rng.Float64(); {
	case p < 0.03:
		w.logf("%s: %s %s fails before committing", from, kindOf(obj), obj.GetName())
		return apierrors.NewInternalError(fmt.Errorf("etcd leader changed"))
	case p < 0.06:
		err := apply(obj)
		w.logf("%s: %s %s committed (%v), answered with a timeout", from, kindOf(obj), obj.GetName(), err)
		return timeout
	case p < 0.09 && w.opts.leaveAfterWrite:
		// Steered runs keep writes prompt.
		break
	case p < 0.09:
		cp := copyObj(obj)
		at := w.step + 1 + w.rng.IntN(30)
		w.delayed = append(w.delayed, delayedRequest{at: at, from: from, apply: func() error { return apply(cp) }})
		w.logf("%s: %s %s queued until step %d, answered with a timeout", from, kindOf(obj), obj.GetName(), at)
		return timeout
	}
	err := apply(obj)
	if c, ok := obj.(*resourceapi.ResourceClaim); ok && err == nil && c.Status.Allocation != nil {
		w.allocations++
		if w.opts.leaveAfterWrite {
			w.lastWrite = allocationNode(c.Status.Allocation)
		}
	}
	return err
}

// simOperator is one operator process.
type simOperator struct {
	name    string
	r       *Reconciler
	pl      *placementReconciler
	tr      *taintReconciler
	jn      *joinReconciler
	cache   *simCache
	queue   map[simItem]time.Time
	elected bool
	// feed are claim events the claim loop's handler has not handled yet.
	feed []simEvent
	// prevClaim says whether a claim was allocated in the cache.
	prevClaim map[string]bool
	// active: it runs reconciles (a deposed leader stays active until it
	// notices, at exitAt).
	active bool
	exitAt int
	ready  bool
}

type simItem struct {
	loop string // "claim", "pod", "taint"
	key  types.NamespacedName
}

func (w *simWorld) startOperator() *simOperator {
	w.names++
	op := &simOperator{name: fmt.Sprintf("op%d", w.names), cache: newSimCache(), queue: map[simItem]time.Time{}, elected: true, active: true,
		prevClaim: map[string]bool{}}
	cached := &simReader{w: w, cache: op.cache}
	api := &simReader{w: w}
	r := &Reconciler{
		Client:         &simWriter{simReader: cached, w: w, from: op.name},
		APIReader:      api,
		Engines:        map[string]allocator.Engine{string(v1alpha1.EngineNative): native.New()},
		Now:            w.now,
		FenceNamespace: simOperatorNS,
		serialWrites:   true,
		sleep:          func(context.Context, time.Duration) {},
	}
	r.fence = fence.New(fence.Options{Client: &simWriter{simReader: api, w: w, from: op.name}, Reader: api,
		Namespace: simOperatorNS, Identity: op.name, Sleep: func(time.Duration) {},
		NewTerm: func() string { w.names++; return fmt.Sprintf("t%d", w.names) },
		OnLost:  func() { r.ledger.SetReady(false) }})
	r.init()
	r.off = w.off
	r.podCache = cached
	r.taintRules = true
	r.source.taintRules = true
	op.r, op.pl, op.tr = r, &placementReconciler{r: r}, &taintReconciler{r: r}
	op.jn = newJoinReconciler(r)
	op.jn.newRoundID = func() string { w.names++; return fmt.Sprintf("r%d", w.names) }
	// The informers' first lists may be served from the watch cache, a
	// little behind.
	for _, k := range simKinds {
		n := max(len(w.store.log[k])-w.rng.IntN(3), w.setupLog[k])
		for op.cache.cursor[k] < n {
			w.deliverTo(op, k)
		}
	}
	w.ops = append(w.ops, op)
	w.logf("%s started", op.name)
	return op
}

// deliverTo delivers the next event of kind to op and runs its handlers,
// as the watches of setup.go do.
func (w *simWorld) deliverTo(op *simOperator, kind string) bool {
	var old client.Object
	if i := op.cache.cursor[kind]; kind == kPod && i < len(w.store.log[kind]) {
		old = op.cache.objs[kind][keyOf(w.store.log[kind][i].obj)]
	}
	ev, ok := op.cache.deliver(w.store, kind)
	if !ok {
		return false
	}
	r := op.r
	w.joinEvent(op, kind, old, ev)
	switch kind {
	case kClaim:
		// Two handlers of one informer run in no set order: the claim
		// loop's feeds the ledger (later, see feed), the placement loop's
		// queues the pods now.
		op.feed = append(op.feed, ev)
		c := ev.obj.(*resourceapi.ResourceClaim)
		w.enqueuePodsOf(op, c)
		if prev, ok := op.prevClaim[keyOf(c)]; ok && prev && (ev.typ == watch.Deleted || c.Status.Allocation == nil) {
			// Devices were freed: the pods that failed are retried
			// (retrigger).
			w.retriggerPods(op)
		}
		op.prevClaim[keyOf(c)] = ev.typ != watch.Deleted && c.Status.Allocation != nil
	case kPod:
		op.add("pod", keyNN(ev.obj))
		if ev.typ == watch.Deleted && ev.obj.(*corev1.Pod).Spec.NodeName != "" {
			w.retriggerPods(op)
		}
	case kSlice, kClass, kNode, kRule:
		r.ledger.Invalidate()
		op.add("taint", taintKey.NamespacedName)
		w.retriggerPods(op)
		w.retriggerClaims(op)
	case kStack:
		if ev.typ == watch.Deleted {
			r.cfg.set(nil)
		} else {
			r.cfg.set(ev.obj.(*v1alpha1.DRAStack))
		}
		r.ledger.Invalidate()
		op.add("taint", taintKey.NamespacedName)
		w.enqueueAll(op)
	}
	return true
}

// joinEvent runs the join loop's handlers (setupJoin) on an event.
func (w *simWorld) joinEvent(op *simOperator, kind string, old client.Object, ev simEvent) {
	j := op.jn
	look := false
	switch kind {
	case kStack, kRule:
		look = true
	case kSlice, kClass:
		look = handover.IsCanary(ev.obj)
	case kClaim:
		look = j.isWatched(ev.obj.GetUID())
	case kPod:
		p := ev.obj.(*corev1.Pod)
		switch {
		case ev.typ == watch.Deleted:
			look = j.podDeleted(p)
		case old != nil:
			look = j.podUpdated(old.(*corev1.Pod), p)
		default:
			look = j.podRelevant(p)
		}
	}
	if look {
		// An event makes the item ready at once, as a workqueue's Add
		// does for an item that waits for its requeue time.
		op.queue[simItem{"join", joinKey.NamespacedName}] = time.Time{}
	}
}

// handleFeed runs the claim loop's handler on the oldest claim event.
func (w *simWorld) handleFeed(op *simOperator) bool {
	if len(op.feed) == 0 {
		return false
	}
	ev := op.feed[0]
	op.feed = op.feed[1:]
	c := ev.obj.(*resourceapi.ResourceClaim)
	if ev.typ == watch.Deleted {
		op.r.ledger.ObserveDeleted(c)
	} else {
		op.r.ledger.Observe(c)
	}
	op.add("claim", keyNN(c))
	op.add("taint", taintKey.NamespacedName)
	return true
}

func keyNN(o client.Object) types.NamespacedName {
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
}

func (op *simOperator) add(loop string, key types.NamespacedName) {
	if _, ok := op.queue[simItem{loop, key}]; !ok {
		op.queue[simItem{loop, key}] = time.Time{}
	}
}

func (w *simWorld) enqueueAllPods(op *simOperator) {
	for _, k := range sortedKeys(op.cache.objs[kPod]) {
		op.add("pod", keyNN(op.cache.objs[kPod][k]))
	}
}

// retriggerPods queues the pods whose last placement failed (retrigger).
func (w *simWorld) retriggerPods(op *simOperator) {
	for _, k := range sortedKeys(op.cache.objs[kPod]) {
		p := op.cache.objs[kPod][k]
		if _, failed := op.r.pods.failureOf(keyNN(p)); failed {
			op.add("pod", keyNN(p))
		}
	}
}

// retriggerClaims queues the immediate claims whose last allocation failed.
func (w *simWorld) retriggerClaims(op *simOperator) {
	for _, k := range sortedKeys(op.cache.objs[kClaim]) {
		c := op.cache.objs[kClaim][k]
		if _, failed := op.r.claims.failureOf(keyNN(c)); failed {
			op.add("claim", keyNN(c))
		}
	}
}

// enqueuePodsOf queues the unscheduled pods that use c (podsOfClaim).
func (w *simWorld) enqueuePodsOf(op *simOperator, c *resourceapi.ResourceClaim) {
	for _, k := range sortedKeys(op.cache.objs[kPod]) {
		p := op.cache.objs[kPod][k].(*corev1.Pod)
		if p.Namespace != c.Namespace || p.Spec.NodeName != "" {
			continue
		}
		for _, ref := range p.Spec.ResourceClaims {
			if ref.ResourceClaimName != nil && *ref.ResourceClaimName == c.Name {
				op.add("pod", keyNN(p))
			}
		}
	}
}

func (w *simWorld) enqueueAll(op *simOperator) {
	w.enqueueAllPods(op)
	for _, k := range sortedKeys(op.cache.objs[kClaim]) {
		op.add("claim", keyNN(op.cache.objs[kClaim][k]))
	}
}

// beginTerm starts a term for an elected instance.
func (w *simWorld) beginTerm(op *simOperator) {
	err := op.r.beginTerm(context.Background())
	op.ready = err == nil
	w.logf("%s: term %s (%v)", op.name, op.r.fence.Term(), err)
	if op.ready {
		w.enqueueAll(op)
		op.add("taint", taintKey.NamespacedName)
		op.add("join", joinKey.NamespacedName)
	}
}

// reconcile runs one ready item of op.
func (w *simWorld) reconcile(op *simOperator) bool {
	var ready []simItem
	for it, at := range op.queue {
		if !at.After(w.clock) {
			ready = append(ready, it)
		}
	}
	if len(ready) == 0 {
		return false
	}
	slices.SortFunc(ready, func(a, b simItem) int {
		return strings.Compare(a.loop+"/"+a.key.String(), b.loop+"/"+b.key.String())
	})
	it := ready[w.rng.IntN(len(ready))]
	delete(op.queue, it)
	ctx := context.Background()
	var (
		res ctrlResult
		err error
	)
	switch it.loop {
	case "claim":
		res, err = op.r.Reconcile(ctx, reqOf(it.key.Namespace, it.key.Name))
	case "pod":
		res, err = op.pl.Reconcile(ctx, reqOf(it.key.Namespace, it.key.Name))
	case "taint":
		res, err = op.tr.Reconcile(ctx, taintKey)
	case "join":
		res, err = op.jn.Reconcile(ctx, joinKey)
	}
	w.logf("%s: reconcile %s %s -> %v %v", op.name, it.loop, it.key, res.RequeueAfter, err)
	switch {
	case err != nil:
		op.queue[it] = w.clock.Add(100 * time.Millisecond)
	case res.Requeue: //nolint:staticcheck // the join loop's endRound asks for it
		op.queue[it] = w.clock
	case res.RequeueAfter > 0:
		if at, ok := op.queue[it]; !ok || at.After(w.clock.Add(res.RequeueAfter)) {
			op.queue[it] = w.clock.Add(res.RequeueAfter)
		}
	}
	return true
}

// switchOff turns parts of the protocol off in every operator of the
// world, those started later too.
func (w *simWorld) switchOff(off protocolSwitches) *simWorld {
	for _, op := range w.ops {
		op.r.off = off
	}
	w.off = off
	return w
}
