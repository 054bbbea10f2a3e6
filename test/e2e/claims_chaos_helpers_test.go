//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/drastack/drastack/internal/claimpolicy"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/fence"
	"github.com/drastack/drastack/test/cluster"
)

// The machinery of TestClaimsChaos: replicas of the operator binary behind
// a stand-in Service, an independent watcher of claims, pods and leases,
// and a stream of mixed objects created at a steady rate.

// leaderLeaseName is the leader-election Lease of the operator
// (internal/operator's LeaderElectionID).
const leaderLeaseName = "drastack.drastack.io"

// chReplica is one replica of the operator: the cmd/manager binary run
// with the Deployment's arguments, its own ports on 127.0.0.1, and the
// ServiceAccount's token.
type chReplica struct {
	name        string
	proc        *cluster.OperatorProcess
	metricsAddr string
	startedAt   time.Time
}

// chBuildManager compiles cmd/manager into dir, so that the replicas are
// the binary that ships, started with the flags the Deployment gives it.
func chBuildManager(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	begin := time.Now()
	exe := filepath.Join(dir, "manager")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", exe, "./cmd/manager")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/manager: %v\n%s", err, out)
	}
	t.Logf("timing: go build ./cmd/manager in %s", since(begin))
	return exe
}

// chStartReplica starts a replica with the Deployment's flags (among them
// --leader-elect) and addresses of its own, and adds it to the service as
// an endpoint whose readiness is its /readyz.
func (s *chState) startReplica(t *testing.T) *chReplica {
	t.Helper()
	ports, err := cluster.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	webhook, health, metrics := ports[0], ports[1], ports[2]
	s.replicaSeq++
	name := fmt.Sprintf("operator-%d", s.replicaSeq)
	args, err := cluster.DeploymentArgs(operatorDeployDir, map[string]string{
		"--webhook-port":              strconv.Itoa(webhook),
		"--webhook-host":              "127.0.0.1",
		"--health-probe-bind-address": fmt.Sprintf("127.0.0.1:%d", health),
		"--metrics-bind-address":      fmt.Sprintf("127.0.0.1:%d", metrics),
		// The test reads each replica's leader and restore metrics over
		// plain HTTP on loopback; the HTTPS endpoint behind the API
		// server's authorization is TestObservability's.
		"--metrics-secure": "false",
		// In a pod these come from the ServiceAccount's namespace file.
		"--leader-election-namespace": s.id.Namespace,
		"--namespace":                 s.id.Namespace,
		"--probe-namespace":           chNamespaceA,
	})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := cluster.StartOperatorProcess(name, s.exe, args, s.id.KubeconfigPath, s.logDir)
	if err != nil {
		t.Fatal(err)
	}
	r := &chReplica{name: name, proc: proc, metricsAddr: fmt.Sprintf("127.0.0.1:%d", metrics), startedAt: time.Now()}
	s.svc.SetEndpoint(name, fmt.Sprintf("127.0.0.1:%d", webhook), fmt.Sprintf("http://127.0.0.1:%d/readyz", health))
	s.replicas = append(s.replicas, r)
	s.started = append(s.started, r)
	s.logs = append(s.logs, proc.LogPath)
	t.Logf("started replica %s (pid %d): %s", name, proc.Pid(), strings.Join(args, " "))
	return r
}

// dropReplica forgets a replica that exited: the service stops probing it.
func (s *chState) dropReplica(r *chReplica) {
	s.svc.RemoveEndpoint(r.name)
	s.replicas = slices.DeleteFunc(s.replicas, func(o *chReplica) bool { return o == r })
}

// metric sums the samples of a metric of the replica's /metrics (0 when
// absent); an error when the replica does not answer.
func (r *chReplica) metric(ctx context.Context, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.metricsAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return sumMetric(resp.Body, name)
}

// sumMetric adds the values of every sample of name in a Prometheus text
// exposition.
func sumMetric(r io.Reader, name string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		value := rest
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			value = line[i+1:]
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// waitLeader waits until exactly one running replica reports itself the
// leader (controller-runtime's leader_election_master_status) and returns
// it.
func (s *chState) waitLeader(ctx context.Context, t *testing.T) *chReplica {
	t.Helper()
	var leader *chReplica
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, clTimeout, true, func(ctx context.Context) (bool, error) {
		var leaders []*chReplica
		for _, r := range s.replicas {
			if r.proc.Exited() {
				continue
			}
			v, err := r.metric(ctx, "leader_election_master_status")
			if err != nil {
				return false, nil //nolint:nilerr // retried: a replica starting
			}
			if v >= 1 {
				leaders = append(leaders, r)
			}
		}
		if len(leaders) == 1 {
			leader = leaders[0]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no single leader among the replicas: %v", err)
	}
	return leader
}

// chLeaseChange is a new holder of one of the operator's Leases, as the
// watcher saw it.
type chLeaseChange struct {
	at     time.Time
	lease  string
	holder string
}

// chWatch is the test's own view of the cluster, from its own watches:
// who holds which device (stWatch.track: a device taken while another
// claim holds it is a violation, at every change seen), when each claim
// is first seen and allocated and by whom, when each pod runs, and every
// change of holder of the operator's Leases.
type chWatch struct {
	*stWatch
	allocatedBy map[string]string
	lastAlloc   map[string]string
	running     map[string]time.Time
	// strictPools, when set, are pools of chDriver that only the operator
	// may allocate from at that moment; an allocation of one of their
	// devices written by another field manager is a violation.
	strictPools map[string]bool
	partition   []string
	// allocs are the allocations seen, in the order seen (a claim
	// allocated again appears again).
	allocs       []chAlloc
	leases       []chLeaseChange
	leaseHolders map[string]string
}

// chAlloc is an allocation the watcher saw.
type chAlloc struct {
	at      time.Time
	key, by string
	results []resourceapi.DeviceRequestAllocationResult
}

// chKey names an object by namespace and name.
func chKey(ns, name string) string { return ns + "/" + name }

// chOwnNamespace tells the suite's namespaces.
func chOwnNamespace(ns string) bool { return ns == chNamespaceA || ns == chNamespaceB }

// chOperatorClaim: a claim of the central class, which only the operator
// may allocate.
func chOperatorClaim(cl *resourceapi.ResourceClaim) bool {
	for _, r := range cl.Spec.Devices.Requests {
		if r.Exactly != nil && r.Exactly.DeviceClassName == chCentralClass {
			return true
		}
	}
	return false
}

func startChaosWatch(t *testing.T, c *cluster.Cluster, operatorNS string) *chWatch {
	t.Helper()
	w := &chWatch{
		stWatch: &stWatch{seenAt: map[string]time.Time{}, allocatedAt: map[string]time.Time{}, runningAt: map[string]time.Time{},
			holders: map[string]string{}, held: map[string][]string{}, reported: map[string]bool{}, stop: make(chan struct{})},
		allocatedBy: map[string]string{}, lastAlloc: map[string]string{}, running: map[string]time.Time{}, leaseHolders: map[string]string{},
	}
	// Claims of every namespace: no device may be in two allocations,
	// whoever made them.
	f := informers.NewSharedInformerFactory(c.Client, 0)
	onClaim := func(obj any) {
		cl, ok := obj.(*resourceapi.ResourceClaim)
		if !ok {
			return
		}
		now := time.Now()
		key := chKey(cl.Namespace, cl.Name)
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, seen := w.seenAt[key]; !seen {
			w.seenAt[key] = now
		}
		if cl.Status.Allocation == nil {
			w.track(key, nil)
			delete(w.lastAlloc, key)
			return
		}
		results := cl.Status.Allocation.Devices.Results
		w.track(key, results)
		rk := resultsKey(results)
		if w.lastAlloc[key] == rk {
			return
		}
		w.lastAlloc[key] = rk
		by := claimpolicy.AllocatedBy(cl)
		if _, seen := w.allocatedAt[key]; !seen {
			w.allocatedAt[key] = now
			w.allocatedBy[key] = by
		}
		w.allocs = append(w.allocs, chAlloc{at: now, key: key, by: by, results: slices.Clone(results)})
		if !chOwnNamespace(cl.Namespace) {
			return
		}
		if chOperatorClaim(cl) != (by == claimsctrl.FieldManager) {
			w.partition = append(w.partition, fmt.Sprintf("claim %s (operator's: %v) allocated %s by %q", key, chOperatorClaim(cl), rk, by))
		}
		if by != claimsctrl.FieldManager {
			for _, r := range results {
				if r.Driver == chDriver && w.strictPools[r.Pool] {
					w.partition = append(w.partition, fmt.Sprintf("central device %s/%s allocated to %s by %q", r.Pool, r.Device, key, by))
				}
			}
		}
	}
	onClaimDelete := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if cl, ok := obj.(*resourceapi.ResourceClaim); ok {
			key := chKey(cl.Namespace, cl.Name)
			w.mu.Lock()
			w.track(key, nil)
			delete(w.lastAlloc, key)
			w.mu.Unlock()
		}
	}
	if _, err := f.Resource().V1().ResourceClaims().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onClaim, UpdateFunc: func(_, o any) { onClaim(o) }, DeleteFunc: onClaimDelete,
	}); err != nil {
		t.Fatal(err)
	}
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || !chOwnNamespace(p.Namespace) || p.Status.Phase != corev1.PodRunning {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, seen := w.running[chKey(p.Namespace, p.Name)]; !seen {
			w.running[chKey(p.Namespace, p.Name)] = time.Now()
		}
	}
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, o any) { onPod(o) },
	}); err != nil {
		t.Fatal(err)
	}
	lf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(operatorNS))
	onLease := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || (l.Name != leaderLeaseName && l.Name != fence.DefaultName) || l.Spec.HolderIdentity == nil {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.leaseHolders[l.Name] != *l.Spec.HolderIdentity {
			w.leaseHolders[l.Name] = *l.Spec.HolderIdentity
			w.leases = append(w.leases, chLeaseChange{at: time.Now(), lease: l.Name, holder: *l.Spec.HolderIdentity})
		}
	}
	if _, err := lf.Coordination().V1().Leases().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onLease, UpdateFunc: func(_, o any) { onLease(o) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(w.stop)
	lf.Start(w.stop)
	f.WaitForCacheSync(w.stop)
	lf.WaitForCacheSync(w.stop)
	return w
}

// setStrict makes the pools only the operator may allocate from (nil:
// none, while a test moves devices in and out of the partition).
func (w *chWatch) setStrict(pools ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.strictPools = map[string]bool{}
	for _, p := range pools {
		w.strictPools[p] = true
	}
}

// check fails the test for every device seen in two allocations and every
// allocation seen on the wrong side of the partition since the last call.
func (w *chWatch) check(t *testing.T) {
	t.Helper()
	w.checkViolations(t)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.partition {
		t.Errorf("seen by the watcher: %s", v)
	}
	w.partition = nil
}

// leaseChangeAfter returns when the lease first changed holder after
// from, false when it did not.
func (w *chWatch) leaseChangeAfter(lease string, from time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.leases {
		if l.lease == lease && l.at.After(from) {
			return l.at, true
		}
	}
	return time.Time{}, false
}

// emptiestNode returns the node among nodes whose pool of chDriver has
// the fewest devices held, as the watcher sees them.
func (w *chWatch) emptiestNode(nodes []int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	held := map[int]int{}
	for d := range w.holders {
		for _, n := range nodes {
			if strings.HasPrefix(d, chDriver+"/"+chNode(n)+"/") {
				held[n]++
			}
		}
	}
	best := nodes[0]
	for _, n := range nodes {
		if held[n] < held[best] {
			best = n
		}
	}
	return best
}

// leaseChanges counts the changes of holder of the lease seen in
// (from, to].
func (w *chWatch) leaseChanges(lease string, from, to time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.leases {
		if l.lease == lease && l.at.After(from) && !l.at.After(to) {
			n++
		}
	}
	return n
}

// firstOperatorAllocation returns when the watcher first saw the operator
// allocate a claim that it first saw after from: a claim that a process
// stopped or killed at from never saw, so its allocation is the work of
// the process that took over.
func (w *chWatch) firstOperatorAllocation(from time.Time) (time.Time, string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.allocs {
		if a.at.After(from) && a.by == claimsctrl.FieldManager && w.seenAt[a.key].After(from) {
			return a.at, a.key, true
		}
	}
	return time.Time{}, "", false
}

// firstAllocationOfPool returns the first allocation seen after from of a
// device of chDriver's pool, by the operator (operator true) or by anyone
// else.
func (w *chWatch) firstAllocationOfPool(pool string, from time.Time, operator bool) (chAlloc, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.allocs {
		if !a.at.After(from) || (a.by == claimsctrl.FieldManager) != operator {
			continue
		}
		for _, r := range a.results {
			if r.Driver == chDriver && r.Pool == pool {
				return a, true
			}
		}
	}
	return chAlloc{}, false
}

// tryAllocationOfPool waits up to clTimeout for firstAllocationOfPool.
func (w *chWatch) tryAllocationOfPool(ctx context.Context, pool string, from time.Time, operator bool) (chAlloc, bool) {
	var a chAlloc
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(context.Context) (bool, error) {
		var ok bool
		a, ok = w.firstAllocationOfPool(pool, from, operator)
		return ok, nil
	})
	return a, err == nil
}

// waitAllocationOfPool waits for firstAllocationOfPool.
func (w *chWatch) waitAllocationOfPool(ctx context.Context, t *testing.T, pool string, from time.Time, operator bool) chAlloc {
	t.Helper()
	a, ok := w.tryAllocationOfPool(ctx, pool, from, operator)
	if !ok {
		t.Fatalf("no allocation of a device of pool %s (by the operator: %v) after %s", pool, operator, from.Format(time.RFC3339Nano))
	}
	return a
}

// waitLeaseChange waits until the lease changes holder after from and
// returns when the watcher saw it.
func (w *chWatch) waitLeaseChange(ctx context.Context, t *testing.T, lease string, from time.Time) time.Time {
	t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(context.Context) (bool, error) {
		var ok bool
		at, ok = w.leaseChangeAfter(lease, from)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("Lease %s did not change holder: %v", lease, err)
	}
	return at
}

// waitFirstOperatorAllocation waits for firstOperatorAllocation(from).
func (w *chWatch) waitFirstOperatorAllocation(ctx context.Context, t *testing.T, from time.Time, what string) time.Time {
	t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(context.Context) (bool, error) {
		var ok bool
		at, _, ok = w.firstOperatorAllocation(from)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: the operator allocated no new claim: %v", what, err)
	}
	return at
}

// chObject is one thing a stream creates, in namespace ns.
type chObject struct {
	kind, ns, name string
}

func (o chObject) key() string { return chKey(o.ns, o.name) }

// podKinds are the stream's kinds that are pods (the others are claims).
var podKinds = map[string]string{
	// kind -> claim template
	kindCEL:      "cel",
	kindOpen:     "open",
	kindAny:      "any",
	kindAnyMover: "any-mover",
}

// The kinds of objects a stream creates.
const (
	// kindImmediate: a claim with the Immediate label for one central
	// device; the operator allocates it at once, on any node.
	kindImmediate = "imm"
	// kindImmMover: the same, for a device of the mover pool only.
	kindImmMover = "imm-mover"
	// kindCEL: a pod whose claim asks for two adjacent central devices
	// (a CEL constraint kube-scheduler cannot evaluate); gated by the
	// webhook, placed by the operator.
	kindCEL = "cel"
	// kindOpen: an ordinary pod for a device of the open driver.
	kindOpen = "open"
	// kindAny: an ordinary pod of a class that matches both drivers:
	// kube-scheduler may give it any device that is not central.
	kindAny = "any"
	// kindAnyMover: an ordinary pod for a device of the mover pool only.
	kindAnyMover = "any-mover"
)

// chStream creates objects at a steady rate in the background, each in its
// own goroutine so that a create that waits (a webhook that hangs) does
// not hold back the next.
type chStream struct {
	start     time.Time
	done      chan struct{}
	wg        sync.WaitGroup
	mu        sync.Mutex
	objs      []chObject
	createdAt map[string]time.Time
	// ungated are the CEL pods the API server admitted without the
	// operator's scheduling gate (the webhook was not reached).
	ungated []string
	errs    []error
}

// stream creates n objects, one every interval, cycling through mix and
// alternating between the two namespaces; names start with prefix.
func (s *chState) stream(ctx context.Context, c *cluster.Cluster, prefix string, mix []string, n int, interval time.Duration) *chStream {
	st := &chStream{start: time.Now(), done: make(chan struct{}), createdAt: map[string]time.Time{}}
	go func() {
		defer close(st.done)
		for i := range n {
			if d := time.Until(st.start.Add(time.Duration(i) * interval)); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			ns := []string{chNamespaceA, chNamespaceB}[i%2]
			o := chObject{kind: mix[i%len(mix)], ns: ns, name: fmt.Sprintf("%s%s-%d", prefix, mix[i%len(mix)], i)}
			st.wg.Add(1)
			go func() {
				defer st.wg.Done()
				st.create(ctx, c, o)
			}()
		}
	}()
	return st
}

func (st *chStream) create(ctx context.Context, c *cluster.Cluster, o chObject) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	begin := time.Now()
	var err error
	gated := true
	switch o.kind {
	case kindImmediate, kindImmMover:
		sel := ""
		if o.kind == kindImmMover {
			sel = chMoverSelector
		}
		_, err = c.Client.ResourceV1().ResourceClaims(o.ns).Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: o.name, Labels: map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}},
			Spec:       clClaimSpec(chCentralClass, 1, sel),
		}, metav1.CreateOptions{})
	default:
		var pod *corev1.Pod
		pod, err = c.Client.CoreV1().Pods(o.ns).Create(ctx, claimPod(o.ns, o.name, podKinds[o.kind]), metav1.CreateOptions{})
		gated = err == nil && claimpolicy.HasGate(pod)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.errs = append(st.errs, fmt.Errorf("create %s %s: %w", o.kind, o.key(), err))
		return
	}
	st.objs = append(st.objs, o)
	st.createdAt[o.key()] = begin
	if o.kind == kindCEL && !gated {
		st.ungated = append(st.ungated, o.key())
	}
}

// at sleeps until offset after the stream's start.
func (st *chStream) at(offset time.Duration) {
	if d := time.Until(st.start.Add(offset)); d > 0 {
		time.Sleep(d)
	}
}

// wait waits until every object was created (or failed to be), fails the
// test for each failure, and returns the objects.
func (st *chStream) wait(t *testing.T) []chObject {
	t.Helper()
	<-st.done
	st.wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, err := range st.errs {
		t.Error(err)
	}
	return slices.Clone(st.objs)
}

// count returns how many objects of the kinds were created.
func chCount(objs []chObject, kinds ...string) int {
	n := 0
	for _, o := range objs {
		if slices.Contains(kinds, o.kind) {
			n++
		}
	}
	return n
}

// waitSettled waits until every claim of objs is allocated and every pod
// runs, as the watcher sees them, and returns how long that took from
// from.
func (w *chWatch) waitSettled(ctx context.Context, t *testing.T, c *cluster.Cluster, objs []chObject, from time.Time) time.Duration {
	t.Helper()
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, chSettleTimeout, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		missing = missing[:0]
		for _, o := range objs {
			var ok bool
			if _, pod := podKinds[o.kind]; pod {
				_, ok = w.running[o.key()]
			} else {
				_, ok = w.allocatedAt[o.key()]
			}
			if !ok {
				missing = append(missing, o.key())
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		var b strings.Builder
		for _, key := range missing[:min(3, len(missing))] {
			ns, name, _ := strings.Cut(key, "/")
			if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				fmt.Fprintf(&b, "pod %s:\n%s", key, diagnose(ctx, c, ns, p))
			} else {
				fmt.Fprintf(&b, "claim %s events: %s\n", key, clClaimEvents(ctx, c, ns, name))
			}
		}
		t.Fatalf("%d of %d objects not allocated or running: %v (first: %v)\n%s", len(missing), len(objs), err, missing[:min(5, len(missing))], b.String())
	}
	return time.Since(from)
}

// chLogForbidden returns the lines of a replica's log where the API server
// refused it something: its RBAC must be enough for all it does.
func chLogForbidden(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "is forbidden") {
			out = append(out, line)
		}
	}
	return out
}
