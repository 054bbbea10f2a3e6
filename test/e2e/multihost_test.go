//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/controller/publisher"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/test/cluster"
)

// The multi-host suite: two interconnect domains "a" and "b" of 4x4 kwok
// hosts with 2x2 chips each (an 8x8 chip grid per domain), published by the
// operator's central publisher from DRAStack spec.multiHost. Per complete
// domain: 16 2x2 devices (one host), 8 2x4 (two hosts), 4 4x4 (four hosts)
// and one 8x8 (all sixteen hosts), 29 devices in one counter slice and one
// device slice.
const (
	mhNamespace   = "multihost"
	mhDriver      = "tpu.e2e.drastack.io"
	mhClass       = "tpu.e2e.drastack.io"
	mhSelectLabel = "e2e.drastack.io/tpu"
	mhDomainLabel = "e2e.drastack.io/tpu-domain"
	mhCoordsLabel = "e2e.drastack.io/tpu-coords"
	mhEntry       = "tpu"
	mhBadEntry    = "bad"
	mhDevices     = 29
	mhHostsX      = 4 // hosts of a domain along dimension 0
	mhHostsY      = 4 // hosts of a domain along dimension 1
	mhHosts       = mhHostsX * mhHostsY
	mhTimeout     = 90 * time.Second
)

var mhDomains = []string{"a", "b"}

func mhNode(domain string, x, y int) string { return fmt.Sprintf("tpu-%s-%d-%d", domain, x, y) }

// mhNodes are every node of the two domains.
func mhNodes() []string {
	var out []string
	for _, d := range mhDomains {
		for x := 0; x < mhHostsX; x++ {
			for y := 0; y < mhHostsY; y++ {
				out = append(out, mhNode(d, x, y))
			}
		}
	}
	return out
}

// mhSpec is the suite's spec.multiHost: the valid entry and an entry of
// the same driver with a shape that does not tile the grid (3 chips do not
// divide 8), which must be rejected without touching the valid one. The
// bad entry selects other nodes (none): two entries of one driver over the
// same hosts are a spec error of their own (stack.Check).
func mhSpec(policy v1alpha1.MissingHostPolicy) []v1alpha1.MultiHostSpec {
	valid := v1alpha1.MultiHostSpec{
		Name:              mhEntry,
		Driver:            mhDriver,
		NodeSelector:      &metav1.LabelSelector{MatchLabels: map[string]string{mhSelectLabel: "true"}},
		DomainLabel:       mhDomainLabel,
		CoordinatesLabel:  mhCoordsLabel,
		HostGrid:          []int32{mhHostsX, mhHostsY},
		ChipsPerHost:      []int32{2, 2},
		Partitions:        []string{"2x2", "2x4", "4x4", "8x8"},
		MissingHostPolicy: policy,
	}
	bad := *valid.DeepCopy()
	bad.Name = mhBadEntry
	bad.Partitions = []string{"2x2", "3x4"}
	bad.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{mhSelectLabel: "bad"}}
	return []v1alpha1.MultiHostSpec{valid, bad}
}

type mhKey struct{}

// mhState is what the steps of the suite share.
type mhState struct {
	crc          client.Client
	stopOperator func()
	createdStack bool
	prevSpec     []v1alpha1.MultiHostSpec
}

func mhFrom(ctx context.Context, t *testing.T) *mhState {
	t.Helper()
	s, ok := ctx.Value(mhKey{}).(*mhState)
	if !ok {
		t.Fatal("multi-host suite state missing: Setup failed")
	}
	return s
}

// TestMultiHost runs the central publisher on the real control plane.
func TestMultiHost(t *testing.T) {
	feature := features.New("central publisher for multi-host devices").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			createNamespace(ctx, t, c.Client, mhNamespace)
			begin := time.Now()
			var specs []cluster.NodeSpec
			for _, d := range mhDomains {
				for x := 0; x < mhHostsX; x++ {
					for y := 0; y < mhHostsY; y++ {
						specs = append(specs, cluster.NodeSpec{Name: mhNode(d, x, y), Labels: map[string]string{
							mhSelectLabel: "true", mhDomainLabel: d, mhCoordsLabel: fmt.Sprintf("%d.%d", x, y),
						}})
					}
				}
			}
			if err := c.InstallCRDs(CRDDir); err != nil {
				t.Fatal(err)
			}
			if err := c.AddNodes(ctx, specs...); err != nil {
				t.Fatal(err)
			}
			t.Logf("timing: %d labelled kwok nodes Ready in %s", len(specs), since(begin))
			if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(mhClass, mhDriver, ""), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}

			s := &mhState{}
			var err error
			if s.crc, err = client.New(c.Config, client.Options{Scheme: operator.Scheme()}); err != nil {
				t.Fatal(err)
			}
			s.stopOperator = runOperator(ctx, t, c, mhNamespace)
			s.createdStack, s.prevSpec = applyMultiHost(ctx, t, s.crc, mhSpec(""))
			return context.WithValue(ctx, mhKey{}, s)
		}).
		Assess("each complete domain is one valid pool of a counter slice and a device slice, owned by the DRAStack", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), mhFrom(ctx, t)
			begin := time.Now()
			pools := waitPools(ctx, t, c, fmt.Sprintf("both pools complete with %d devices", mhDevices), func(ps map[string]*pool.Pool) bool {
				return len(ps) == 2 && settled(ps["tpu-a"], mhDevices) && settled(ps["tpu-b"], mhDevices)
			})
			t.Logf("timing: DRAStack written -> both pools published and settled in %s", since(begin))
			var stack v1alpha1.DRAStack
			if err := s.crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &stack); err != nil {
				t.Fatal(err)
			}
			for name, p := range pools {
				for _, pr := range p.Problems {
					t.Errorf("pool %s: %s %s: %s", name, pr.Severity, pr.Reason, pr.Message)
				}
				if len(p.Slices) != 2 || len(p.Slices[0].Spec.SharedCounters) == 0 || len(p.Slices[1].Spec.Devices) != mhDevices {
					t.Errorf("pool %s: want a counter slice, then a device slice of %d devices", name, mhDevices)
				}
				for _, sl := range p.Slices {
					if len(sl.OwnerReferences) != 1 || sl.OwnerReferences[0].UID != stack.UID {
						t.Errorf("slice %s is not owned by the DRAStack: %v", sl.Name, sl.OwnerReferences)
					}
				}
			}
			waitEntryStatus(ctx, t, s.crc, mhEntry, "two pools published without problems", func(st v1alpha1.MultiHostStatus) bool {
				return st.Pools == 2 && int(st.Hosts) == len(mhDomains)*mhHosts && st.Devices == 2*mhDevices && st.Slices == 4 && len(st.Problems) == 0
			})
			waitHealthyDevicePools(ctx, t, s.crc, "tpu-a", "tpu-b")
			return ctx
		}).
		Assess("an entry topology rejects is reported and publishes nothing", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), mhFrom(ctx, t)
			st := waitEntryStatus(ctx, t, s.crc, mhBadEntry, "an InvalidTopology problem naming the shape", func(st v1alpha1.MultiHostStatus) bool {
				return st.Pools == 0 && len(st.Problems) > 0 &&
					strings.HasPrefix(st.Problems[0], publisher.ReasonInvalidTopology+":") && strings.Contains(st.Problems[0], "3x4")
			})
			t.Logf("status of the rejected entry: %s", st.Problems[0])
			waitEvent(ctx, t, c, publisher.EventTopologyRejected, "multiHost "+mhBadEntry)
			for name := range currentPools(ctx, t, c) {
				if strings.HasPrefix(name, mhBadEntry+"-") {
					t.Errorf("pool %s of the rejected entry is published", name)
				}
			}
			return ctx
		}).
		Assess("kube-scheduler puts a pod with a 2x4 claim on one of the device's hosts, and counters keep overlapping shapes apart", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			pools := currentPools(ctx, t, c)
			begin := time.Now()
			createTemplate(ctx, t, c, "tpu-2x4", `device.attributes["`+mhDriver+`"].shape == "2x4"`)
			p1 := createPod(ctx, t, c, "slice-2x4", "tpu-2x4")
			p1 = waitPodRunning(ctx, t, c, mhNamespace, p1.Name)
			t.Logf("timing: 2x4 pod created -> Running in %s", since(begin))
			dev1 := podDevice(ctx, t, c, pools, p1)
			domain := *dev1.Attributes["domain"].StringValue
			hosts1 := dev1.Attributes["hosts"].StringValues
			if len(hosts1) != 2 || !slices.Contains(hosts1, p1.Spec.NodeName) {
				t.Fatalf("pod on node %s, device %s spans %v: want two hosts including the pod's node", p1.Spec.NodeName, dev1.Name, hosts1)
			}
			t.Logf("2x4 device %s on hosts %v of domain %s, pod on %s", dev1.Name, hosts1, domain, p1.Spec.NodeName)

			// The domain's only 8x8 device overlaps every other device of
			// the domain: the scheduler must find it unavailable.
			inDomain := `device.attributes["` + mhDriver + `"].domain == "` + domain + `"`
			createTemplate(ctx, t, c, "tpu-8x8", `device.attributes["`+mhDriver+`"].shape == "8x8" && `+inDomain)
			p2 := createPod(ctx, t, c, "whole-domain", "tpu-8x8")
			waitUnschedulable(ctx, t, c, p2.Name)

			// One of the domain's four 4x4 devices overlaps the 2x4; the
			// scheduler must take one of the other three.
			createTemplate(ctx, t, c, "tpu-4x4", `device.attributes["`+mhDriver+`"].shape == "4x4" && `+inDomain)
			p3 := waitPodRunning(ctx, t, c, mhNamespace, createPod(ctx, t, c, "slice-4x4", "tpu-4x4").Name)
			dev3 := podDevice(ctx, t, c, pools, p3)
			hosts3 := dev3.Attributes["hosts"].StringValues
			if len(hosts3) != 4 || !slices.Contains(hosts3, p3.Spec.NodeName) {
				t.Errorf("4x4 pod on node %s, device %s spans %v: want four hosts including the pod's node", p3.Spec.NodeName, dev3.Name, hosts3)
			}
			for _, h := range hosts1 {
				if slices.Contains(hosts3, h) {
					t.Errorf("4x4 device %s (hosts %v) shares host %s with the allocated 2x4 %s", dev3.Name, hosts3, h, dev1.Name)
				}
			}
			if p, err := c.Client.CoreV1().Pods(mhNamespace).Get(ctx, p2.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
				t.Errorf("the 8x8 pod got scheduled while the domain was partly allocated (%v)", err)
			}

			// Releasing both frees the counters: the 8x8 pod runs.
			begin = time.Now()
			deletePods(ctx, t, c, p1.Name, p3.Name)
			p2 = waitPodRunning(ctx, t, c, mhNamespace, p2.Name)
			t.Logf("timing: 2x4 and 4x4 pods deleted -> 8x8 pod Running in %s", since(begin))
			dev2 := podDevice(ctx, t, c, pools, p2)
			if hosts := dev2.Attributes["hosts"].StringValues; len(hosts) != mhHosts || !slices.Contains(hosts, p2.Spec.NodeName) {
				t.Errorf("8x8 pod on node %s, device %s spans %v: want the %d hosts of domain %s", p2.Spec.NodeName, dev2.Name, hosts, mhHosts, domain)
			}
			deletePods(ctx, t, c, p2.Name)
			return ctx
		}).
		Assess("a cordoned host withholds its pool, and uncordoning publishes it again", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), mhFrom(ctx, t)
			node := mhNode("b", 0, 0)
			begin := time.Now()
			setUnschedulable(ctx, t, c, node, true)
			waitPools(ctx, t, c, "pool tpu-b withheld, tpu-a untouched", func(ps map[string]*pool.Pool) bool {
				return ps["tpu-b"] == nil && settled(ps["tpu-a"], mhDevices)
			})
			t.Logf("timing: cordon -> pool withheld in %s", since(begin))
			waitEntryStatus(ctx, t, s.crc, mhEntry, "NodeUnschedulable and PoolWithheld reported", func(st v1alpha1.MultiHostStatus) bool {
				return st.Pools == 1 && hasProblem(st, publisher.ReasonNodeUnschedulable, node) && hasProblem(st, "PoolWithheld", "tpu-b")
			})
			waitEvent(ctx, t, c, publisher.EventTopologyProblems, "multiHost "+mhEntry)
			begin = time.Now()
			setUnschedulable(ctx, t, c, node, false)
			waitPools(ctx, t, c, "pool tpu-b published again", func(ps map[string]*pool.Pool) bool {
				return settled(ps["tpu-a"], mhDevices) && settled(ps["tpu-b"], mhDevices)
			})
			t.Logf("timing: uncordon -> pool published in %s", since(begin))
			return ctx
		}).
		Assess("with PublishAvailable, removing a node republishes its pool at a new generation without the devices that needed it", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), mhFrom(ctx, t)
			applyMultiHost(ctx, t, s.crc, mhSpec(v1alpha1.MissingHostPublishAvailable))
			before := currentPools(ctx, t, c)
			gone := mhNode("a", 1, 3)
			begin := time.Now()
			if err := c.DeleteNode(ctx, gone); err != nil {
				t.Fatal(err)
			}
			// Host 1.3 is in one 2x2, one 2x4 (hosts 1.2-1.3), one 4x4
			// (hosts 0.2-1.3) and the 8x8.
			after := waitPools(ctx, t, c, fmt.Sprintf("pool tpu-a republished with %d devices", mhDevices-4), func(ps map[string]*pool.Pool) bool {
				return settled(ps["tpu-a"], mhDevices-4) && settled(ps["tpu-b"], mhDevices)
			})
			t.Logf("timing: node deleted -> pool republished in %s", since(begin))
			if a, b := after["tpu-a"].Generation, before["tpu-a"].Generation; a <= b {
				t.Errorf("pool tpu-a generation %d after the change, %d before: want a new generation", a, b)
			}
			unchanged(t, before["tpu-b"], after["tpu-b"])
			for _, d := range after["tpu-a"].Devices {
				if slices.Contains(d.Device.Attributes["hosts"].StringValues, gone) || d.NodeName == gone ||
					(d.NodeSelector != nil && strings.Contains(d.NodeSelector.String(), gone)) {
					t.Errorf("device %s still needs the removed node %s", d.Device.Name, gone)
				}
			}
			for _, pr := range after["tpu-a"].Problems {
				t.Errorf("pool tpu-a: %s %s: %s", pr.Severity, pr.Reason, pr.Message)
			}
			waitEntryStatus(ctx, t, s.crc, mhEntry, fmt.Sprintf("%d devices and the missing host reported", 2*mhDevices-4), func(st v1alpha1.MultiHostStatus) bool {
				return st.Pools == 2 && st.Devices == 2*mhDevices-4 && hasProblem(st, "MissingHost", "1.3")
			})
			return ctx
		}).
		Assess("relabelling a host moves it to another domain's pool, and back; a node added completes its pool", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), mhFrom(ctx, t)
			before := currentPools(ctx, t, c)
			moved := mhNode("b", 0, 0)
			begin := time.Now()
			setLabel(ctx, t, c, moved, mhDomainLabel, "c")
			// Host 0.0 of b carries one device of each shape; alone in
			// domain c it is a pool with only its 2x2.
			after := waitPools(ctx, t, c, "tpu-b without the host, tpu-c with it", func(ps map[string]*pool.Pool) bool {
				return settled(ps["tpu-b"], mhDevices-4) && settled(ps["tpu-c"], 1)
			})
			t.Logf("timing: relabel -> two pools republished in %s", since(begin))
			if hosts := after["tpu-c"].Devices[0].Device.Attributes["hosts"].StringValues; !slices.Equal(hosts, []string{moved}) {
				t.Errorf("pool tpu-c device on hosts %v, want [%s]", hosts, moved)
			}
			unchanged(t, before["tpu-a"], after["tpu-a"])
			waitEntryStatus(ctx, t, s.crc, mhEntry, "three pools", func(st v1alpha1.MultiHostStatus) bool { return st.Pools == 3 })

			setLabel(ctx, t, c, moved, mhDomainLabel, "b")
			waitPools(ctx, t, c, "tpu-c gone, tpu-b complete again", func(ps map[string]*pool.Pool) bool {
				return ps["tpu-c"] == nil && settled(ps["tpu-b"], mhDevices)
			})

			begin = time.Now()
			back := mhNode("a", 1, 3)
			if err := c.AddNodes(ctx, cluster.NodeSpec{Name: back, Labels: map[string]string{
				mhSelectLabel: "true", mhDomainLabel: "a", mhCoordsLabel: "1.3",
			}}); err != nil {
				t.Fatal(err)
			}
			waitPools(ctx, t, c, "tpu-a complete again", func(ps map[string]*pool.Pool) bool {
				return settled(ps["tpu-a"], mhDevices) && settled(ps["tpu-b"], mhDevices)
			})
			t.Logf("timing: node added (and Ready) -> pool complete in %s", since(begin))
			waitEntryStatus(ctx, t, s.crc, mhEntry, "two complete pools without problems", func(st v1alpha1.MultiHostStatus) bool {
				return st.Pools == 2 && st.Devices == 2*mhDevices && len(st.Problems) == 0
			})
			waitEvent(ctx, t, c, publisher.EventTopologyResolved, "multiHost "+mhEntry)
			return ctx
		}).
		Assess("entries removed from the spec take their pools and status with them", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), mhFrom(ctx, t)
			begin := time.Now()
			applyMultiHost(ctx, t, s.crc, nil)
			waitPools(ctx, t, c, "no pool of the driver left", func(ps map[string]*pool.Pool) bool { return len(ps) == 0 })
			t.Logf("timing: entries removed -> slices gone in %s", since(begin))
			err := wait.PollUntilContextTimeout(ctx, pollInterval, mhTimeout, true, func(ctx context.Context) (bool, error) {
				var st v1alpha1.DRAStack
				if err := s.crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err != nil {
					return false, nil //nolint:nilerr // retried
				}
				return len(st.Status.MultiHost) == 0, nil
			})
			if err != nil {
				t.Errorf("status.multiHost not emptied: %v", err)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			s, _ := ctx.Value(mhKey{}).(*mhState)
			if s != nil {
				s.stopOperator()
				if s.createdStack {
					if err := s.crc.Delete(ctx, &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}); err != nil && !apierrors.IsNotFound(err) {
						t.Errorf("delete DRAStack: %v", err)
					}
				} else {
					applyMultiHost(ctx, t, s.crc, s.prevSpec)
				}
			}
			// The garbage collector removes the slices with the DRAStack;
			// a DRAStack that was there before keeps its own, so remove ours.
			sel := fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, mhDriver).String()
			if err := c.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sel}); err != nil {
				t.Errorf("delete slices: %v", err)
			}
			_ = c.Client.CoreV1().Namespaces().Delete(ctx, mhNamespace, metav1.DeleteOptions{})
			// Later suites (and -count) create the namespace again.
			if err := wait.PollUntilContextTimeout(ctx, pollInterval, mhTimeout, true, func(ctx context.Context) (bool, error) {
				_, err := c.Client.CoreV1().Namespaces().Get(ctx, mhNamespace, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			}); err != nil {
				t.Errorf("namespace %s not deleted: %v", mhNamespace, err)
			}
			_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, mhClass, metav1.DeleteOptions{})
			for _, n := range mhNodes() {
				if err := c.DeleteNode(ctx, n); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("%v", err)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }

// applyMultiHost sets DRAStack spec.multiHost, creating the DRAStack when
// there is none. It reports whether it created it and the previous value.
func applyMultiHost(ctx context.Context, t *testing.T, crc client.Client, spec []v1alpha1.MultiHostSpec) (bool, []v1alpha1.MultiHostSpec) {
	t.Helper()
	created, prev := writeStackSpec(ctx, t, crc, mhTimeout, func(s *v1alpha1.DRAStackSpec) { s.MultiHost = spec })
	return created, prev.MultiHost
}

// currentPools groups the driver's slices into pools by name.
func currentPools(ctx context.Context, t *testing.T, c *cluster.Cluster) map[string]*pool.Pool {
	t.Helper()
	sel := fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, mhDriver).String()
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("list slices: %v", err)
	}
	in := make([]*resourceapi.ResourceSlice, len(list.Items))
	for i := range list.Items {
		in[i] = &list.Items[i]
	}
	out := map[string]*pool.Pool{}
	for _, p := range pool.Group(in) {
		out[p.Pool] = p
	}
	return out
}

// settled: the pool exists, is complete without stale slices, has the
// given number of devices and no problem of any severity.
func settled(p *pool.Pool, devices int) bool {
	return p != nil && p.Complete() && len(p.StaleSlices) == 0 && len(p.Devices) == devices && len(p.Problems) == 0
}

// waitPools polls the driver's pools until ok holds and returns them.
func waitPools(ctx context.Context, t *testing.T, c *cluster.Cluster, what string, ok func(map[string]*pool.Pool) bool) map[string]*pool.Pool {
	t.Helper()
	var last map[string]*pool.Pool
	err := wait.PollUntilContextTimeout(ctx, pollInterval, mhTimeout, true, func(ctx context.Context) (bool, error) {
		last = currentPools(ctx, t, c)
		return ok(last), nil
	})
	if err != nil {
		var b strings.Builder
		for name, p := range last {
			fmt.Fprintf(&b, "  pool %s gen %d: %d/%d slices, %d stale, %d devices, %d problems\n",
				name, p.Generation, len(p.Slices), p.ExpectedSlices, len(p.StaleSlices), len(p.Devices), len(p.Problems))
		}
		t.Fatalf("waiting for %s: %v; pools now:\n%s", what, err, b.String())
	}
	return last
}

// waitEntryStatus polls status.multiHost[name] until ok holds.
func waitEntryStatus(ctx context.Context, t *testing.T, crc client.Client, name, what string, ok func(v1alpha1.MultiHostStatus) bool) v1alpha1.MultiHostStatus {
	t.Helper()
	var last v1alpha1.MultiHostStatus
	err := wait.PollUntilContextTimeout(ctx, pollInterval, mhTimeout, true, func(ctx context.Context) (bool, error) {
		var st v1alpha1.DRAStack
		if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err != nil {
			return false, nil //nolint:nilerr // retried
		}
		for _, e := range st.Status.MultiHost {
			if e.Name == name {
				last = e
				return ok(e), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("status.multiHost[%s]: waiting for %s: %v; last: %+v", name, what, err, last)
	}
	return last
}

func hasProblem(st v1alpha1.MultiHostStatus, reason, mention string) bool {
	return slices.ContainsFunc(st.Problems, func(p string) bool {
		return strings.HasPrefix(p, reason+":") && strings.Contains(p, mention)
	})
}

// waitEvent waits for an Event on the DRAStack with the reason and a note
// that contains mention.
func waitEvent(ctx context.Context, t *testing.T, c *cluster.Cluster, reason, mention string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, mhTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Kind == "DRAStack" && e.Reason == reason && strings.Contains(e.Note, mention)
		}), nil
	})
	if err != nil {
		t.Fatalf("no %s Event on the DRAStack mentioning %q: %v", reason, mention, err)
	}
}

// waitHealthyDevicePools waits until the pool controller reports the
// publisher's pools Healthy.
func waitHealthyDevicePools(ctx context.Context, t *testing.T, crc client.Client, names ...string) {
	t.Helper()
	health := map[string]v1alpha1.PoolHealth{}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, mhTimeout, true, func(ctx context.Context) (bool, error) {
		var list v1alpha1.DevicePoolList
		if err := crc.List(ctx, &list); err != nil {
			return false, nil //nolint:nilerr // retried
		}
		for _, dp := range list.Items {
			if dp.Status.Driver == mhDriver {
				health[dp.Status.Pool] = dp.Status.Health
			}
		}
		for _, n := range names {
			if health[n] != v1alpha1.PoolHealthy {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("DevicePools of %v not Healthy: %v (health now %v)", names, err, health)
	}
}

// createTemplate creates a claim template for one device of the suite's
// class that matches the CEL expression.
func createTemplate(ctx context.Context, t *testing.T, c *cluster.Cluster, name, cel string) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: mhNamespace, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "tpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: mhClass,
				Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}},
			}}},
		}}},
	}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(mhNamespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim template %s: %v", name, err)
	}
}

func createPod(ctx context.Context, t *testing.T, c *cluster.Cluster, name, template string) *corev1.Pod {
	t.Helper()
	pod, err := c.Client.CoreV1().Pods(mhNamespace).Create(ctx, claimPod(mhNamespace, name, template), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return pod
}

// podDevice returns the one device allocated to the pod's claim, looked up
// in the published pools.
func podDevice(ctx context.Context, t *testing.T, c *cluster.Cluster, pools map[string]*pool.Pool, pod *corev1.Pod) *resourceapi.Device {
	t.Helper()
	results := allocatedDevices(ctx, t, c.Client, pod)
	if len(results) != 1 || results[0].Driver != mhDriver {
		t.Fatalf("pod %s: allocation %+v, want one device of %s", pod.Name, results, mhDriver)
	}
	r := results[0]
	p := pools[r.Pool]
	if p == nil {
		t.Fatalf("pod %s: device %s of unknown pool %s", pod.Name, r.Device, r.Pool)
	}
	for _, d := range p.Devices {
		if d.Device.Name == r.Device {
			return d.Device
		}
	}
	t.Fatalf("pod %s: device %s not in pool %s", pod.Name, r.Device, r.Pool)
	return nil
}

// waitUnschedulable waits until kube-scheduler has tried the pod and
// found no fit, and checks that its claim stayed unallocated.
func waitUnschedulable(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, pollInterval, mhTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(mhNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		pod = p
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was scheduled to %s", name, p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s: want it unschedulable: %v\n%s", name, err, diagnose(ctx, c, mhNamespace, pod))
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		claim, err := c.Client.ResourceV1().ResourceClaims(mhNamespace).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
		if err == nil && claim.Status.Allocation != nil {
			t.Errorf("claim %s of unschedulable pod %s is allocated: %+v", claim.Name, name, claim.Status.Allocation.Devices.Results)
		}
	}
}

// deletePods deletes pods at once and waits until they and their claims
// are gone, so that their devices are free.
func deletePods(ctx context.Context, t *testing.T, c *cluster.Cluster, names ...string) {
	t.Helper()
	var claims []string
	for _, name := range names {
		if p, err := c.Client.CoreV1().Pods(mhNamespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
			for _, st := range p.Status.ResourceClaimStatuses {
				if st.ResourceClaimName != nil {
					claims = append(claims, *st.ResourceClaimName)
				}
			}
		}
		if err := c.Client.CoreV1().Pods(mhNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete pod %s: %v", name, err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, mhTimeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			if _, err := c.Client.CoreV1().Pods(mhNamespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		for _, name := range claims {
			if _, err := c.Client.ResourceV1().ResourceClaims(mhNamespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pods %v or their claims %v still there: %v", names, claims, err)
	}
}

// unchanged fails the test when a pool's slices were rewritten: the
// publisher hands the library every pool on every change, and the library
// must write only the pools whose content changed.
func unchanged(t *testing.T, before, after *pool.Pool) {
	t.Helper()
	if before == nil || after == nil {
		t.Errorf("pool missing: before %v, after %v", before != nil, after != nil)
		return
	}
	versions := func(p *pool.Pool) []string {
		var out []string
		for _, s := range p.Slices {
			out = append(out, s.Name+"@"+s.ResourceVersion)
		}
		return out
	}
	if b, a := versions(before), versions(after); !slices.Equal(b, a) || before.Generation != after.Generation {
		t.Errorf("pool %s was rewritten though its hosts did not change: generation %d -> %d, slices %v -> %v",
			before.Pool, before.Generation, after.Generation, b, a)
	}
}

// setLabel sets one label of a node.
func setLabel(ctx context.Context, t *testing.T, c *cluster.Cluster, name, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("label %s=%s on %s: %v", key, value, name, err)
	}
}

// setUnschedulable cordons or uncordons a node.
func setUnschedulable(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("set unschedulable=%t on %s: %v", on, name, err)
	}
}
