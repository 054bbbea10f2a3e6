//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	"github.com/drastack/drastack/internal/controller/publisher"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/handover"
	"github.com/drastack/drastack/internal/stack"
	"github.com/drastack/drastack/test/cluster"
)

// The spec-safety suites (spec_guard_test.go, spec_fuzz_test.go) share
// one working stack: the example driver on two kwok nodes, whose slices
// the test publishes as the plugin would, and a multi-host TPU entry over
// four hosts (one 2x2 domain), whose devices are central; a claim holds a
// GPU and another a TPU device. Edits are judged against it.
const (
	sgNamespace = "spec-guard"
	sgDriverNS  = "guard-drivers"
	sgGPU       = "gpu.guard.e2e.drastack.io"
	sgTPU       = "tpu.guard.e2e.drastack.io"
	sgGPULabel  = "e2e.drastack.io/guard-gpu"
	sgTPULabel  = "e2e.drastack.io/guard-tpu"
	sgDomain    = "e2e.drastack.io/guard-domain"
	sgCoords    = "e2e.drastack.io/guard-coords"
	// sgHeldClass is the class the held claims name: no central class, so
	// the claim controller leaves them as the test wrote them.
	sgHeldClass = "held.guard.e2e.drastack.io"
	sgTimeout   = 2 * time.Minute
)

var sgGPUNodes = []string{"guard-gpu-0", "guard-gpu-1"}

func sgTPUNode(x, y int) string { return fmt.Sprintf("guard-tpu-a-%d-%d", x, y) }

// sgTPUNodes are the four hosts of domain a.
func sgTPUNodes() []string {
	var out []string
	for x := 0; x < 2; x++ {
		for y := 0; y < 2; y++ {
			out = append(out, sgTPUNode(x, y))
		}
	}
	return out
}

// sgMultiHost is the TPU entry (or one like it, for edits).
func sgMultiHost(name, driverName string) v1alpha1.MultiHostSpec {
	return v1alpha1.MultiHostSpec{
		Name: name, Driver: driverName,
		NodeSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{sgTPULabel: "true"}},
		DomainLabel:      sgDomain,
		CoordinatesLabel: sgCoords,
		HostGrid:         []int32{2, 2}, ChipsPerHost: []int32{2, 2},
		Partitions:        []string{"2x2", "2x4", "4x4"},
		MissingHostPolicy: v1alpha1.MissingHostWithhold,
	}
}

// sgDriver is the example driver on the GPU nodes.
func sgDriver() v1alpha1.DriverSpec {
	return v1alpha1.DriverSpec{
		Name: sgGPU, Profile: v1alpha1.DriverProfileExample,
		NodeSelector:   map[string]string{sgGPULabel: "true"},
		UpdateStrategy: v1alpha1.DriverUpdateStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		RemovalPolicy:  v1alpha1.RemovalPolicyDrain,
	}
}

// sgBaseSpec is the working stack every edit starts from.
func sgBaseSpec() v1alpha1.DRAStackSpec {
	return v1alpha1.DRAStackSpec{
		Namespace: sgDriverNS,
		Drivers:   []v1alpha1.DriverSpec{sgDriver()},
		MultiHost: []v1alpha1.MultiHostSpec{sgMultiHost("tpu", sgTPU)},
		Claims:    v1alpha1.ClaimsSpec{Central: []v1alpha1.CentralDevices{{Driver: sgTPU, Classes: []string{sgTPU}, AllowImmediate: true}}},
	}
}

// sgState is what a spec-safety suite shares between its steps.
type sgState struct {
	crc  client.Client
	stop func()
}

// sgStart builds the working stack: nodes, the operator, the base spec,
// the GPU slices published as the plugin, the TPU pool published, and the
// two held claims.
func sgStart(ctx context.Context, t *testing.T, c *cluster.Cluster) *sgState {
	t.Helper()
	var nodes []cluster.NodeSpec
	for _, n := range sgGPUNodes {
		nodes = append(nodes, cluster.NodeSpec{Name: n, Labels: map[string]string{sgGPULabel: "true"}})
	}
	for x := 0; x < 2; x++ {
		for y := 0; y < 2; y++ {
			nodes = append(nodes, cluster.NodeSpec{Name: sgTPUNode(x, y), Labels: map[string]string{
				sgTPULabel: "true", sgDomain: "a", sgCoords: fmt.Sprintf("%d.%d", x, y)}})
		}
	}
	s := &sgState{crc: prepareFeature(ctx, t, c, sgNamespace, nodes...)}
	s.stop = drvStartOperator(ctx, t, c, sgNamespace)
	sgWrite(ctx, t, s.crc, sgBaseSpec())
	drvPublish(ctx, t, c, sgDriverNS, sgGPU, sgGPUNodes...)
	drvWaitStack(ctx, t, s.crc, "the GPU driver Ready and the TPU pool published", func(st *v1alpha1.DRAStack) bool {
		d := drvStatus(st, sgGPU)
		return d != nil && d.Ready && len(st.Status.MultiHost) == 1 && st.Status.MultiHost[0].Pools == 1
	})
	sgHold(ctx, t, c, "holds-gpu", sgGPU, sgGPUNodes[0], "gpu-0")
	sgHold(ctx, t, c, "holds-tpu", sgTPU, "tpu-a", "tpu-2x2-at-0-0")
	return s
}

// sgStop deletes the DRAStack (waiting until the operator removed
// everything), stops the operator and deletes the suite's nodes.
func sgStop(ctx context.Context, t *testing.T, c *cluster.Cluster, s *sgState) {
	t.Helper()
	if s == nil {
		return
	}
	var st v1alpha1.DRAStack
	if err := s.crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err == nil {
		_ = s.crc.Delete(ctx, &st)
		// The held claims would keep a Drain removal waiting.
		_ = c.Client.ResourceV1().ResourceClaims(sgNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		if err := wait.PollUntilContextTimeout(ctx, pollInterval, sgTimeout, true, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(s.crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &v1alpha1.DRAStack{})), nil
		}); err != nil {
			t.Errorf("the DRAStack was not removed: %v", err)
		}
	}
	if s.stop != nil {
		s.stop()
	}
	sgDeleteNamespace(ctx, t, c, sgNamespace)
	for _, n := range append(slices.Clone(sgGPUNodes), sgTPUNodes()...) {
		if err := c.DeleteNode(ctx, n); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("%v", err)
		}
	}
}

// sgHold creates a claim with one device allocated as an allocator would
// write it (no pod; the class is no central class, so the claim
// controller does not touch it).
func sgHold(ctx context.Context, t *testing.T, c *cluster.Cluster, name, driverName, pool, device string) {
	t.Helper()
	cl := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: sgNamespace, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: sgHeldClass},
		}}}},
	}
	cl, err := c.Client.ResourceV1().ResourceClaims(sgNamespace).Create(ctx, cl, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "r", Driver: driverName, Pool: pool, Device: device,
	}}}}
	if _, err := c.Client.ResourceV1().ResourceClaims(sgNamespace).UpdateStatus(ctx, cl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sgWrite replaces the DRAStack spec (creating the DRAStack) and returns
// the generation written; an error is fatal.
func sgWrite(ctx context.Context, t *testing.T, crc client.Client, spec v1alpha1.DRAStackSpec) int64 {
	t.Helper()
	gen, err := sgTryWrite(ctx, crc, spec)
	if err != nil {
		t.Fatalf("write DRAStack spec: %v", err)
	}
	return gen
}

// sgTryWrite replaces the DRAStack spec and returns the generation
// written, or the API server's refusal (admission). Conflicts are retried.
func sgTryWrite(ctx context.Context, crc client.Client, spec v1alpha1.DRAStackSpec) (int64, error) {
	var gen int64
	var refused error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, sgTimeout, true, func(ctx context.Context) (bool, error) {
		var st v1alpha1.DRAStack
		err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st)
		if apierrors.IsNotFound(err) {
			st = v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}, Spec: *spec.DeepCopy()}
			err = crc.Create(ctx, &st)
		} else if err == nil {
			st.Spec = *spec.DeepCopy()
			err = crc.Update(ctx, &st)
		}
		switch {
		case err == nil:
			gen = st.Generation
			return true, nil
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			refused = err
			return true, nil
		}
		return false, nil // conflicts and transient errors
	})
	if err != nil {
		return 0, err
	}
	return gen, refused
}

// sgStack reads the DRAStack.
func sgStack(ctx context.Context, t *testing.T, crc client.Client) *v1alpha1.DRAStack {
	t.Helper()
	var st v1alpha1.DRAStack
	if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// sgWaitJudged waits until the operator has judged generation gen: SpecValid
// and the publisher report it (the publisher done, nothing left retiring),
// and, when the spec is invalid, the driver lifecycle controller and the
// publisher have held it (SpecInvalid at gen). It returns the DRAStack.
func sgWaitJudged(ctx context.Context, t *testing.T, crc client.Client, gen int64) *v1alpha1.DRAStack {
	t.Helper()
	return drvWaitStack(ctx, t, crc, fmt.Sprintf("generation %d judged", gen), func(st *v1alpha1.DRAStack) bool {
		valid := sgCondition(st, v1alpha1.ConditionSpecValid)
		pub := sgCondition(st, publisher.ConditionPublished)
		if valid == nil || valid.ObservedGeneration != gen || pub == nil || pub.ObservedGeneration != gen {
			return false
		}
		if valid.Status == metav1.ConditionTrue {
			return pub.Reason == publisher.ReasonPublished
		}
		p := sgCondition(st, v1alpha1.ConditionProgressing)
		return p != nil && p.ObservedGeneration == gen && p.Reason == driverctrl.ReasonSpecInvalid && pub.Reason == publisher.ReasonSpecInvalid
	})
}

func sgCondition(st *v1alpha1.DRAStack, typ string) *metav1.Condition {
	for i := range st.Status.Conditions {
		if st.Status.Conditions[i].Type == typ {
			return &st.Status.Conditions[i]
		}
	}
	return nil
}

// sgWaitInvalid writes an invalid spec, waits until it is held, checks
// that SpecValid names every text of mention and says that nothing
// changes, and returns the DRAStack.
func sgWaitInvalid(ctx context.Context, t *testing.T, crc client.Client, spec v1alpha1.DRAStackSpec, mention ...string) *v1alpha1.DRAStack {
	t.Helper()
	gen := sgWrite(ctx, t, crc, spec)
	st := sgWaitJudged(ctx, t, crc, gen)
	c := sgCondition(st, v1alpha1.ConditionSpecValid)
	if c.Status != metav1.ConditionFalse || c.Reason != stack.ReasonInvalidSpec {
		t.Fatalf("SpecValid %s/%s: %s, want False/InvalidSpec", c.Status, c.Reason, c.Message)
	}
	t.Logf("SpecValid False: %s", c.Message)
	for _, m := range append(mention, stack.Frozen) {
		if !strings.Contains(c.Message, m) {
			t.Errorf("SpecValid does not mention %q: %s", m, c.Message)
		}
	}
	if r := sgCondition(st, v1alpha1.ConditionReady); r == nil || r.Status == metav1.ConditionTrue {
		t.Errorf("Ready is True with an invalid spec")
	}
	return st
}

// fingerprint describes what runs, object by object: by identity (UID and
// generation: any delete, create or change shows) or by content (what
// the objects say: equal after an edit and its revert).
type fingerprint map[string]string

// sgFingerprint reads what runs: the stack's DaemonSets, Deployments,
// DeviceClasses and namespaces, the publisher's slices, every
// DeviceTaintRule, and the allocations of the suite's claims.
func sgFingerprint(ctx context.Context, t *testing.T, c *cluster.Cluster, identity bool) fingerprint {
	t.Helper()
	fp := fingerprint{}
	sel := metav1.ListOptions{LabelSelector: driver.LabelStack + "=" + v1alpha1.DRAStackName}
	id := func(m metav1.Object, content any) string {
		if identity {
			return fmt.Sprintf("%s/%d", m.GetUID(), m.GetGeneration())
		}
		data, _ := json.Marshal(content)
		return string(data)
	}
	dss, err := c.Client.AppsV1().DaemonSets("").List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for i := range dss.Items {
		d := &dss.Items[i]
		fp["DaemonSet "+d.Namespace+"/"+d.Name] = id(d, d.Spec.Template)
	}
	deps, err := c.Client.AppsV1().Deployments("").List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for i := range deps.Items {
		d := &deps.Items[i]
		fp["Deployment "+d.Namespace+"/"+d.Name] = id(d, d.Spec.Template)
	}
	classes, err := c.Client.ResourceV1().DeviceClasses().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for i := range classes.Items {
		d := &classes.Items[i]
		fp["DeviceClass "+d.Name] = id(d, d.Spec)
	}
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for i := range nss.Items {
		n := &nss.Items[i]
		if n.DeletionTimestamp == nil {
			fp["Namespace "+n.Name] = id(n, n.Labels)
		}
	}
	slices, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string][]string{}
	for i := range slices.Items {
		s := &slices.Items[i]
		if len(s.OwnerReferences) == 0 || s.OwnerReferences[0].Kind != "DRAStack" {
			continue
		}
		if identity {
			fp["ResourceSlice "+s.Name] = id(s, nil)
			continue
		}
		key := "pool " + s.Spec.Driver + "/" + s.Spec.Pool.Name
		for _, d := range s.Spec.Devices {
			// timeAdded is the API server's stamp of when the slice was
			// written: a pool published again after an edit and its
			// revert has the same taints at a later time.
			taints := append([]resourceapi.DeviceTaint(nil), d.Taints...)
			for j := range taints {
				taints[j].TimeAdded = nil
			}
			data, _ := json.Marshal(taints)
			pools[key] = append(pools[key], d.Name+string(data))
		}
	}
	for k, devs := range pools {
		slicesSort(devs)
		fp[k] = strings.Join(devs, ",")
	}
	rules, err := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rules.Items {
		r := &rules.Items[i]
		if handover.IsCanary(r) {
			continue // the join barrier's probe of a round, named after it
		}
		spec := r.Spec
		spec.Taint.TimeAdded = nil // the API server's stamp, as for slices
		fp["DeviceTaintRule "+r.Name] = id(r, spec)
	}
	claims, err := c.Client.ResourceV1().ResourceClaims(sgNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range claims.Items {
		cl := &claims.Items[i]
		if cl.Name == "long-selector" {
			continue // the guard suite's claim that no device can serve
		}
		var alloc any
		if cl.Status.Allocation != nil {
			alloc = cl.Status.Allocation.Devices.Results
		}
		data, _ := json.Marshal(alloc)
		fp["ResourceClaim "+cl.Name] = string(cl.UID) + " " + string(data)
	}
	return fp
}

func slicesSort(s []string) { slices.Sort(s) }

// diff lists what differs between two fingerprints, or "".
func (fp fingerprint) diff(other fingerprint) string {
	var out []string
	keys := map[string]bool{}
	for k := range fp {
		keys[k] = true
	}
	for k := range other {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		a, inA := fp[k]
		b, inB := other[k]
		switch {
		case !inA:
			out = append(out, "+ "+k)
		case !inB:
			out = append(out, "- "+k)
		case a != b:
			out = append(out, "~ "+k)
		}
	}
	return strings.Join(out, "\n")
}

// sgWaitContent waits until what runs says what want says (after a valid
// edit and its revert) and fails with the difference otherwise.
func sgWaitContent(ctx context.Context, t *testing.T, c *cluster.Cluster, want fingerprint, what string) {
	t.Helper()
	var last fingerprint
	// The reads use ctx, not the poll's: one cut short by the poll's
	// deadline would fail the test without the difference.
	err := wait.PollUntilContextTimeout(ctx, pollInterval, sgTimeout, true, func(context.Context) (bool, error) {
		last = sgFingerprint(ctx, t, c, false)
		return last.diff(want) == "", nil
	})
	if err != nil {
		t.Fatalf("%s: what runs is not back as it was: %v\n%s", what, err, want.diff(last))
	}
}

// sgDeleteNamespace deletes a namespace and waits until it is gone, so
// that the next suite may create it again.
func sgDeleteNamespace(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	_ = c.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if err := wait.PollUntilContextTimeout(ctx, pollInterval, sgTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("namespace %s not deleted: %v", name, err)
	}
}
