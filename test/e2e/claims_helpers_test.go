//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/handover"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/internal/webhookcert"
	"github.com/drastack/drastack/test/cluster"
)

// clTimeout bounds the waits of the claim suites: allocation takes
// milliseconds, scheduling a pod about a second; the rest is a busy machine.
const clTimeout = 2 * time.Minute

// clOperator is one in-process run of the operator with its pod webhook,
// installed as `make deploy` installs it except that the API server calls
// the webhook by URL on 127.0.0.1 (the operator is a process of the test
// machine, not behind a Service); the operator makes its certificate and
// sets the configuration's caBundle itself, under its own RBAC.
type clOperator struct {
	stop func()
	port int
}

// clStartOperator runs the operator with the webhook on a free port of
// 127.0.0.1 and waits until the API server gates a dry-run pod through it.
func clStartOperator(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) *clOperator {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeployWebhookByURL(ctx, operatorDeployDir, fmt.Sprintf("https://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	stop := startOperator(ctx, t, c, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0", ProbeNamespace: ns,
		WebhookPort: port,
		WebhookHost: "127.0.0.1",
		// Fast status refresh so the suite sees ClaimsReady quickly.
		ClaimStatusInterval: 500 * time.Millisecond,
		ShutdownTimeout:     10 * time.Second,
	})
	return &clOperator{port: port, stop: stop}
}

// clWaitWebhook waits until a dry-run pod that uses a template with CEL
// constraints comes back with the scheduling gate: the webhook is
// registered, serving, and reads the DRAStack.
func clWaitWebhook(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, template string) {
	t.Helper()
	begin := time.Now()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		pod := claimPod(ns, "webhook-probe", template)
		got, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		return claimpolicy.HasGate(got), nil
	})
	if err != nil {
		t.Fatalf("the pod webhook does not gate pods: %v", err)
	}
	t.Logf("timing: operator started -> webhook gating pods in %s", since(begin))
}

// clApplyClaimsSpec sets spec.claims of the DRAStack (creating it if
// needed) and returns a function that restores what was there (deleting a
// DRAStack it created, and waiting until it is gone).
func clApplyClaimsSpec(ctx context.Context, t *testing.T, crc client.Client, spec v1alpha1.ClaimsSpec) func() {
	t.Helper()
	created, prev := writeStackSpec(ctx, t, crc, clTimeout, func(s *v1alpha1.DRAStackSpec) { s.Claims = spec })
	// Call it while the operator still runs: its finalizer
	// (claimsctrl.CleanupFinalizer) holds a DRAStack being deleted until it
	// has removed its DeviceTaintRules.
	return func() {
		if created {
			deleteStack(ctx, t, crc)
			return
		}
		writeStackSpec(ctx, t, crc, clTimeout, func(s *v1alpha1.DRAStackSpec) { s.Claims = prev.Claims })
	}
}

// clSetEngine switches spec.claims.engine, keeping the rest.
func clSetEngine(ctx context.Context, t *testing.T, crc client.Client, engine v1alpha1.Engine) {
	t.Helper()
	writeStackSpec(ctx, t, crc, clTimeout, func(s *v1alpha1.DRAStackSpec) { s.Claims.Engine = engine })
}

// clNodeSlice is a node-local slice of one pool named after the node.
func clNodeSlice(driver, node string, generation int64, devices []resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-gen%d", node, strings.Split(driver, ".")[0], generation)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: generation, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
			Devices:  devices,
		},
	}
}

func clIntAttrs(attrs map[string]int64) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for k, v := range attrs {
		out[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{IntValue: ptr.To(v)}
	}
	return out
}

func clCreateSlices(ctx context.Context, t *testing.T, c *cluster.Cluster, slices ...*resourceapi.ResourceSlice) {
	t.Helper()
	for _, s := range slices {
		if _, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create slice %s: %v", s.Name, err)
		}
	}
}

// clClaimSpec asks for count devices of class, with optional selector.
func clClaimSpec(class string, count int64, selector string) resourceapi.ResourceClaimSpec {
	req := resourceapi.DeviceRequest{Name: "devices", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
	if selector != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}
}

// clCEL is the CEL constraints annotation over all requests.
func clCEL(expr string) map[string]string {
	return map[string]string{allocator.CELConstraintsAnnotation: fmt.Sprintf(`[{"expression": %q}]`, expr)}
}

func clCreateTemplate(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, labels, annotations map[string]string, spec resourceapi.ResourceClaimSpec) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
			Spec:       spec,
		},
	}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim template %s: %v", name, err)
	}
}

func clCreateClaim(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, labels, annotations map[string]string, spec resourceapi.ResourceClaimSpec) *resourceapi.ResourceClaim {
	t.Helper()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
		Spec:       spec,
	}
	got, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create claim %s: %v", name, err)
	}
	return got
}

// clSharedPod is a pod that uses an existing claim by name.
func clSharedPod(ns, name, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:      "main",
				Image:     "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "devices"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "devices", ResourceClaimName: &claim}},
		},
	}
}

func clCreatePod(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return got
}

// clWaitClaim polls a claim until ok holds and returns it.
func clWaitClaim(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name, what string, ok func(*resourceapi.ResourceClaim) bool) *resourceapi.ResourceClaim {
	t.Helper()
	var last *resourceapi.ResourceClaim
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(ctx context.Context) (bool, error) {
		cl, err := c.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		last = cl
		return ok(cl), nil
	})
	if err != nil {
		t.Fatalf("claim %s/%s: waiting for %s: %v\nlast: %s\nevents: %s", ns, name, what, err, clClaimSummary(last), clClaimEvents(ctx, c, ns, name))
	}
	return last
}

func clAllocated(cl *resourceapi.ResourceClaim) bool { return cl.Status.Allocation != nil }

func clClaimSummary(cl *resourceapi.ResourceClaim) string {
	if cl == nil {
		return "<none>"
	}
	return fmt.Sprintf("allocated=%v reservedFor=%d finalizers=%v deleting=%v", cl.Status.Allocation != nil, len(cl.Status.ReservedFor), cl.Finalizers, cl.DeletionTimestamp != nil)
}

// clClaimEvents lists "reason: note" of the Events on a claim.
func clClaimEvents(ctx context.Context, c *cluster.Cluster, ns, name string) string {
	var out []string
	for _, e := range clEventsOn(ctx, c, ns, "ResourceClaim", name) {
		out = append(out, e.Reason+": "+e.Note)
	}
	return strings.Join(out, "\n  ")
}

func clEventsOn(ctx context.Context, c *cluster.Cluster, ns, kind, name string) []eventsv1.Event {
	list, err := c.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// clWaitClaimEvent waits for an Event with the reason on the claim whose
// note contains mention, and returns it.
func clWaitClaimEvent(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name, reason, mention string) eventsv1.Event {
	t.Helper()
	return clWaitEvent(ctx, t, c, ns, "ResourceClaim", name, reason, mention)
}

// clEventCount counts an Event with its series.
func clEventCount(e eventsv1.Event) int32 {
	if e.Series != nil {
		return e.Series.Count
	}
	return 1
}

// clPodClaimName waits until kube-controller-manager has created the claim
// of a template entry and returns its name.
func clPodClaimName(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, pod string) string {
	t.Helper()
	var name string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.ResourceClaimName != nil {
				name = *st.ResourceClaimName
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("kube-controller-manager created no claim for pod %s/%s: %v", ns, pod, err)
	}
	return name
}

// clDeviceAttrs looks up the attributes of allocated devices in the
// published pools.
func clDeviceAttrs(ctx context.Context, t *testing.T, c *cluster.Cluster, driver string, results []resourceapi.DeviceRequestAllocationResult) []map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	t.Helper()
	pools := clPoolsOf(ctx, t, c, driver)
	var out []map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	for _, r := range results {
		p := pools[r.Pool]
		if p == nil {
			t.Fatalf("device %s of unknown pool %s", r.Device, r.Pool)
		}
		i := slices.IndexFunc(p.Devices, func(d pool.Device) bool { return d.Device.Name == r.Device })
		if i < 0 {
			t.Fatalf("device %s not in pool %s", r.Device, r.Pool)
		}
		out = append(out, p.Devices[i].Device.Attributes)
	}
	return out
}

// clPoolsOf groups the slices of one driver into pools by name.
func clPoolsOf(ctx context.Context, t *testing.T, c *cluster.Cluster, driver string) map[string]*pool.Pool {
	t.Helper()
	slices := clAllSlices(ctx, t, c)
	out := map[string]*pool.Pool{}
	for _, p := range pool.Group(slices) {
		if p.Driver == driver {
			out[p.Pool] = p
		}
	}
	return out
}

func clAllSlices(ctx context.Context, t *testing.T, c *cluster.Cluster) []*resourceapi.ResourceSlice {
	t.Helper()
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list slices: %v", err)
	}
	out := make([]*resourceapi.ResourceSlice, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out
}

// clCheckNoRaces fails the test when any device (without adminAccess) is
// given to two allocated claims or any counter is over-consumed, the
// invariant of the claim controller, judged by the pool model the pool
// controller alarms with (DeviceDoubleAllocated, CounterOverconsumed). It
// returns how many claims are allocated.
func clCheckNoRaces(ctx context.Context, t *testing.T, c *cluster.Cluster) int {
	t.Helper()
	list, err := c.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list claims: %v", err)
	}
	for _, p := range doubleAllocations(clAllSlices(ctx, t, c), list.Items) {
		t.Errorf("given twice: %s", p)
	}
	n := 0
	for i := range list.Items {
		if list.Items[i].Status.Allocation != nil {
			n++
		}
	}
	return n
}

// doubleAllocations lists, as messages, every device given to two claims
// and every counter over-consumed by the allocated claims.
func doubleAllocations(slices []*resourceapi.ResourceSlice, claims []resourceapi.ResourceClaim) []string {
	pools := pool.Group(slices)
	l := pool.NewLedger()
	for _, p := range pools {
		l.SetPool(p)
	}
	for i := range claims {
		if claims[i].Status.Allocation != nil {
			l.AddClaim(&claims[i])
		}
	}
	var out []string
	now := time.Now()
	for _, p := range pools {
		for _, pr := range pool.Assess(p, l, now, now, time.Hour).Problems {
			if pr.Reason == pool.ReasonDeviceDoubleAllocated || pr.Reason == pool.ReasonCounterOverconsumed {
				out = append(out, fmt.Sprintf("pool %s/%s: %s %s: %s", p.ID.Driver, p.ID.Pool, pr.Reason, pr.Device, pr.Message))
			}
		}
	}
	return out
}

// clWaitStackClaims waits until the DRAStack reports ClaimsReady with the
// status and reason, and returns the claim counts.
func clWaitStackClaims(ctx context.Context, t *testing.T, crc client.Client, status metav1.ConditionStatus, reason string, ok func(v1alpha1.ClaimCounts) bool) v1alpha1.ClaimCounts {
	t.Helper()
	var last v1alpha1.DRAStackStatus
	err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		var st v1alpha1.DRAStack
		if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err != nil {
			return false, nil //nolint:nilerr // retried
		}
		last = st.Status
		for _, cond := range st.Status.Conditions {
			if cond.Type == v1alpha1.ConditionClaimsReady && cond.Status == status && cond.Reason == reason &&
				st.Status.Claims != nil && ok(*st.Status.Claims) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("DRAStack: waiting for ClaimsReady=%s (%s): %v; claims %+v, conditions %+v", status, reason, err, last.Claims, last.Conditions)
	}
	return *last.Claims
}

// clMetric reads a counter or gauge of the process's controller-runtime
// registry (the in-process operator's metrics), summed over labels that
// match.
func clMetric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := true
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					match = false
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// clHistogram reads the cumulative bucket counts (upper bound -> count) of
// a histogram of the process's controller-runtime registry, summed over
// the series whose label result is result.
func clHistogram(t *testing.T, name, result string) map[float64]uint64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	out := map[float64]uint64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "result" && l.GetValue() == result }) {
				continue
			}
			for _, b := range m.GetHistogram().GetBucket() {
				out[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
	}
	return out
}

// clQuantile is the upper bound of the bucket holding quantile q of the
// observations made between two clHistogram readings.
func clQuantile(before, after map[float64]uint64, q float64) string {
	var bounds []float64
	for b := range after {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return "n/a"
	}
	total := after[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	if total == 0 {
		return "n/a"
	}
	for _, b := range bounds {
		if float64(after[b]-before[b]) >= q*float64(total) {
			return fmt.Sprintf("<= %gs", b)
		}
	}
	return fmt.Sprintf("> %gs", bounds[len(bounds)-1])
}

// clDeleteNamespace removes a suite's namespace and waits until it is
// gone, so that later runs can create it again.
func clDeleteNamespace(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	_ = c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("namespace %s not deleted: %v", ns, err)
	}
}

// clRemoveWebhook unregisters the suite's webhook so that later
// suites do not call an operator that is gone.
func clRemoveWebhook(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, webhookcert.DefaultWebhookConfigName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete the webhook configuration: %v", err)
	}
}

// clSuiteSpec is the claim suite's spec.claims: every driver of the suite
// but openDriver is central, each serving its own class; tpu claims are
// allocated at once.
func clSuiteSpec() v1alpha1.ClaimsSpec {
	var central []v1alpha1.CentralDevices
	for _, d := range []struct{ driver, class string }{
		{ringDriver, ringClass}, {gridDriver, gridClass}, {tpuDriver, tpuClass}, {genDriver, genClass}, {placeDriver, placeClass},
	} {
		central = append(central, v1alpha1.CentralDevices{Driver: d.driver, Classes: []string{d.class}, AllowImmediate: true})
	}
	return v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, ImmediateClasses: []string{tpuClass}, GatePods: ptr.To(true), Central: central}
}

// clWaitCentral waits until the operator's DeviceTaintRules keep
// kube-scheduler off every device of the drivers.
func clWaitCentral(ctx context.Context, t *testing.T, c *cluster.Cluster, drivers ...string) {
	t.Helper()
	clWaitRules(ctx, t, c, "tainted", func(*resourceapi.DeviceTaintRule) bool { return true }, drivers)
}

// clWaitJoined waits until every pool rule of the operator for drivers
// has joined the partition (the join barrier ran): from then on the
// operator allocates their devices without waiting for the barrier.
func clWaitJoined(ctx context.Context, t *testing.T, c *cluster.Cluster, drivers ...string) {
	t.Helper()
	clWaitRules(ctx, t, c, "joined", handover.Joined, drivers)
}

// clWaitRules waits until each of drivers has an operator rule of the
// central taint and ready holds for all of them.
func clWaitRules(ctx context.Context, t *testing.T, c *cluster.Cluster, what string, ready func(*resourceapi.DeviceTaintRule) bool, drivers []string) {
	t.Helper()
	begin := time.Now()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		rules, err := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		covered, waiting := map[string]bool{}, map[string]bool{}
		for i := range rules.Items {
			r := &rules.Items[i]
			if central.Owned(r) && r.Spec.DeviceSelector != nil && r.Spec.DeviceSelector.Driver != nil && r.Spec.Taint.Key == central.TaintKey {
				covered[*r.Spec.DeviceSelector.Driver] = true
				if !ready(r) {
					waiting[*r.Spec.DeviceSelector.Driver] = true
				}
			}
		}
		for _, d := range drivers {
			if !covered[d] || waiting[d] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the operator's DeviceTaintRules of the central drivers %v are not all %s: %v", drivers, what, err)
	}
	t.Logf("timing: central devices %s in %s", what, since(begin))
}

// clWaitEvent waits for an Event with reason on an object of kind whose
// note mentions mention.
func clWaitEvent(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, kind, name, reason, mention string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		for _, e := range clEventsOn(ctx, c, ns, kind, name) {
			if e.Reason == reason && strings.Contains(e.Note, mention) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		var seen []string
		for _, e := range clEventsOn(ctx, c, ns, kind, name) {
			seen = append(seen, e.Reason+": "+e.Note)
		}
		t.Fatalf("%s %s/%s: no %s Event mentioning %q: %v; events: %v", kind, ns, name, reason, mention, err, seen)
	}
	return found
}

// clTaintNode adds a taint to a node; clUntaintNode removes them all.
func clTaintNode(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, taint corev1.Taint) {
	t.Helper()
	clUpdateNode(ctx, t, c, name, func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, taint) })
}

func clUntaintNode(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	clUpdateNode(ctx, t, c, name, func(n *corev1.Node) { n.Spec.Taints = nil })
}

func clUpdateNode(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, change func(*corev1.Node)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		change(n)
		_, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("update node %s: %v", name, err)
	}
}

// clWaitDriverFree waits until no claim of the namespace holds a device of
// the driver.
func clWaitDriverFree(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, driver string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		for _, cl := range list.Items {
			if cl.Status.Allocation == nil {
				continue
			}
			for _, r := range cl.Status.Allocation.Devices.Results {
				if r.Driver == driver {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("devices of %s still allocated: %v", driver, err)
	}
}
