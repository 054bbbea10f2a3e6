//go:build e2e

package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/stack"
	"github.com/drastack/drastack/test/cluster"
)

type sgKey struct{}

func sgFrom(ctx context.Context, t *testing.T) *sgState {
	t.Helper()
	s, ok := ctx.Value(sgKey{}).(*sgState)
	if !ok {
		t.Fatal("spec guard state missing: Setup failed")
	}
	return s
}

// sgRefused writes a spec admission must refuse and checks the message.
func sgRefused(ctx context.Context, t *testing.T, s *sgState, spec v1alpha1.DRAStackSpec, mention string) {
	t.Helper()
	_, err := sgTryWrite(ctx, s.crc, spec)
	if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), mention) {
		t.Errorf("admission answered %v, want Invalid mentioning %q", err, mention)
	}
}

// sgInvalidChangesNothing writes an invalid spec, checks SpecValid names
// what it must, that nothing that runs changed (by identity: UIDs and
// generations, so that a change undone again would still show), then
// writes the base spec back and checks again.
func sgInvalidChangesNothing(ctx context.Context, t *testing.T, s *sgState, spec v1alpha1.DRAStackSpec, mention ...string) {
	t.Helper()
	c := mustCluster(ctx, t)
	before := sgFingerprint(ctx, t, c, true)
	sgWaitInvalid(ctx, t, s.crc, spec, mention...)
	if d := before.diff(sgFingerprint(ctx, t, c, true)); d != "" {
		t.Errorf("an invalid spec changed what runs:\n%s", d)
	}
	gen := sgWrite(ctx, t, s.crc, sgBaseSpec())
	st := sgWaitJudged(ctx, t, s.crc, gen)
	if v := sgCondition(st, v1alpha1.ConditionSpecValid); v.Status != metav1.ConditionTrue {
		t.Fatalf("the base spec is not valid again: %s", v.Message)
	}
	// The driver controller applies the base spec again: the same render,
	// so nothing may change by identity either.
	drvWaitStack(ctx, t, s.crc, "the driver judged at the base spec again", func(st *v1alpha1.DRAStack) bool {
		r := sgCondition(st, v1alpha1.ConditionDriversReady)
		return r != nil && r.ObservedGeneration == gen
	})
	if d := before.diff(sgFingerprint(ctx, t, c, true)); d != "" {
		t.Errorf("the invalid spec and its revert changed what runs:\n%s", d)
	}
}

// TestSpecGuard applies, one at a time, the mistaken DRAStack edits of
// issue 22 to a working stack and checks that each is refused (admission)
// or reported with the fields named while nothing that runs changes; then
// that a removal leaves the publisher's devices alone and that the
// README's Force recipe finishes a removal.
func TestSpecGuard(t *testing.T) {
	feature := features.New("spec guard: a bad DRAStack edit never costs a working driver or a device").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			return context.WithValue(ctx, sgKey{}, sgStart(ctx, t, mustCluster(ctx, t)))
		}).
		Assess("two multi-host entries over the same hosts: refused at admission, or SpecValid False naming both, and nothing changes", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s, c := sgFrom(ctx, t), mustCluster(ctx, t)
			spec := sgBaseSpec()
			spec.MultiHost = append(spec.MultiHost, sgMultiHost("tpu2", sgTPU))
			sgRefused(ctx, t, s, spec, "would publish every chip of their hosts twice")

			// The same hosts through another selector: only the nodes show it.
			spec.MultiHost[1].NodeSelector = nil
			sgInvalidChangesNothing(ctx, t, s, spec, `spec.multiHost[1]: Invalid value: "tpu2"`, "as spec.multiHost[0] (tpu)", sgTPUNode(0, 0))
			for _, sl := range drvSlices(ctx, t, c, sgTPU) {
				if strings.HasPrefix(sl.Spec.Pool.Name, "tpu2-") {
					t.Errorf("pool %s of the conflicting entry was published", sl.Spec.Pool.Name)
				}
			}
			return ctx
		}).
		Assess("namespaces the operator must not use: refused, and nothing changes", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s, c := sgFrom(ctx, t), mustCluster(ctx, t)
			with := func(ns string) v1alpha1.DRAStackSpec {
				spec := sgBaseSpec()
				spec.Namespace = ns
				return spec
			}
			sgRefused(ctx, t, s, with("kube-system"), "not in one of Kubernetes' own")
			sgInvalidChangesNothing(ctx, t, s, with("drastack-system"), `spec.namespace: Invalid value: "drastack-system": is the operator's own namespace`)
			createNamespace(ctx, t, c.Client, "guard-someone-elses")
			sgInvalidChangesNothing(ctx, t, s, with("guard-someone-elses"), `spec.namespace: Invalid value: "guard-someone-elses": exists and was created by someone else`)
			ns, err := c.Client.CoreV1().Namespaces().Get(ctx, "guard-someone-elses", metav1.GetOptions{})
			if err != nil || ns.Labels[driver.LabelStack] != "" || ns.Labels[stack.PodSecurityEnforceLabel] != "" {
				t.Errorf("someone else's namespace was changed: %v %v", err, ns.Labels)
			}
			_ = c.Client.CoreV1().Namespaces().Delete(ctx, "guard-someone-elses", metav1.DeleteOptions{})

			// The operator's namespace, relabelled restricted by someone:
			// no plugin pod could be created there any more.
			before := sgFingerprint(ctx, t, c, true)
			sgLabelNamespace(ctx, t, "restricted")
			drvWaitStack(ctx, t, s.crc, "SpecValid False naming the Pod Security level, and the driver controller holding", func(st *v1alpha1.DRAStack) bool {
				v := sgCondition(st, v1alpha1.ConditionSpecValid)
				p := sgCondition(st, v1alpha1.ConditionProgressing)
				return v != nil && v.Status == metav1.ConditionFalse && strings.Contains(v.Message, `spec.namespace: Invalid value: "`+sgDriverNS+`": enforces the Pod Security level "restricted"`) &&
					p != nil && p.Reason == driverctrl.ReasonSpecInvalid
			})
			if d := before.diff(sgFingerprint(ctx, t, c, true)); d != "" {
				t.Errorf("a restricted driver namespace changed what runs:\n%s", d)
			}
			// The administrator drops the label again; the operator's own
			// (privileged) is applied back.
			sgLabelNamespace(ctx, t, "")
			drvWaitStack(ctx, t, s.crc, "SpecValid True again", func(st *v1alpha1.DRAStack) bool {
				v := sgCondition(st, v1alpha1.ConditionSpecValid)
				return v != nil && v.Status == metav1.ConditionTrue
			})
			err = wait.PollUntilContextTimeout(ctx, pollInterval, sgTimeout, true, func(ctx context.Context) (bool, error) {
				ns, err := c.Client.CoreV1().Namespaces().Get(ctx, sgDriverNS, metav1.GetOptions{})
				return err == nil && ns.Labels[stack.PodSecurityEnforceLabel] == stack.DriverPodSecurity, nil
			})
			if err != nil {
				t.Errorf("the driver namespace did not get its privileged level back: %v", err)
			}
			return ctx
		}).
		Assess("a driver named like a multi-host driver: refused, and nothing changes", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := sgFrom(ctx, t)
			spec := sgBaseSpec()
			d := sgDriver()
			d.Name = sgTPU
			spec.Drivers = append(spec.Drivers, d)
			sgRefused(ctx, t, s, spec, "must not be named like the driver of a spec.multiHost entry")

			// A name the profile publishes under besides its own, which
			// only the operator knows: NVIDIA's compute domains.
			spec = sgBaseSpec()
			spec.Drivers = append(spec.Drivers, v1alpha1.DriverSpec{Name: driver.NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU,
				NodeSelector: map[string]string{sgGPULabel: "true"}})
			cd := sgMultiHost("cd", driver.NVIDIAComputeDomainDriver)
			cd.NodeSelector.MatchLabels = map[string]string{"e2e.drastack.io/no-such-node": "true"}
			spec.MultiHost = append(spec.MultiHost, cd)
			sgInvalidChangesNothing(ctx, t, s, spec, `spec.drivers[1].name: Invalid value: "gpu.nvidia.com": has a profile that also publishes under compute-domain.nvidia.com, which is the driver of spec.multiHost[1] (cd)`)
			return ctx
		}).
		Assess("a central entry of a driver nothing publishes, and overlapping entries: valid, with a warning and an Event", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s, c := sgFrom(ctx, t), mustCluster(ctx, t)
			spec := sgBaseSpec()
			spec.Claims.Central = append(spec.Claims.Central,
				v1alpha1.CentralDevices{Driver: "nosuch.guard.e2e.drastack.io"},
				v1alpha1.CentralDevices{Driver: sgTPU, Pools: []string{"tpu-a"}})
			gen := sgWrite(ctx, t, s.crc, spec)
			st := sgWaitJudged(ctx, t, s.crc, gen)
			v := sgCondition(st, v1alpha1.ConditionSpecValid)
			if v.Status != metav1.ConditionTrue || v.Reason != stack.ReasonSpecValidWithWarnings ||
				!strings.Contains(v.Message, "spec.claims.central[1].driver: no driver publishes devices under nosuch.guard.e2e.drastack.io") ||
				!strings.Contains(v.Message, "spec.claims.central[2] overlaps spec.claims.central[0]") {
				t.Errorf("SpecValid %s/%s: %s", v.Status, v.Reason, v.Message)
			}
			ev := clWaitEvent(ctx, t, c, "", "DRAStack", v1alpha1.DRAStackName, stack.ReasonSpecValidWithWarnings, "nosuch.guard.e2e.drastack.io")
			if ev.Type != corev1.EventTypeWarning {
				t.Errorf("the warning's Event is %s", ev.Type)
			}
			gen = sgWrite(ctx, t, s.crc, sgBaseSpec())
			if v := sgCondition(sgWaitJudged(ctx, t, s.crc, gen), v1alpha1.ConditionSpecValid); v.Reason != stack.ReasonSpecValid {
				t.Errorf("after the revert SpecValid is %s: %s", v.Reason, v.Message)
			}
			return ctx
		}).
		Assess("a claim's Event keeps the cause behind a 1 KB selector", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			selector := `device.attributes["` + sgTPU + `"].nosuchattr == "x" && ` +
				strings.Repeat(`device.attributes["`+sgTPU+`"].shape == "2x2" && `, 18) + `true`
			cl := &resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: sgNamespace, Name: "long-selector", Labels: map[string]string{"resource.drastack.io/allocation": "Immediate"}},
				Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: sgTPU,
						Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}},
				}}}},
			}
			if _, err := c.Client.ResourceV1().ResourceClaims(sgNamespace).Create(ctx, cl, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(sgTPU, sgTPU, ""), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			var note string
			err := wait.PollUntilContextTimeout(ctx, pollInterval, sgTimeout, true, func(ctx context.Context) (bool, error) {
				for _, e := range clEventsOn(ctx, c, sgNamespace, "ResourceClaim", "long-selector") {
					if e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "nosuchattr") {
						note = e.Note
						return true, nil
					}
				}
				return false, nil
			})
			if err != nil {
				t.Fatalf("no Warning Event about the selector on the claim: %v", err)
			}
			t.Logf("Event note (%d bytes): %s", len(note), note)
			if !strings.Contains(note, "no such key: nosuchattr") || len(note) > 1024 {
				t.Errorf("the Event lost the cause or is too long (%d bytes): %s", len(note), note)
			}
			_ = c.Client.ResourceV1().ResourceClaims(sgNamespace).Delete(ctx, "long-selector", metav1.DeleteOptions{})
			return ctx
		}).
		Assess("a removal leaves what the publisher publishes under the same name alone", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s, c := sgFrom(ctx, t), mustCluster(ctx, t)
			// One edit removes the GPU driver and publishes multi-host
			// devices under its name: valid, since the two never coexist in
			// one spec, but the removal must not take the publisher's pool.
			spec := sgBaseSpec()
			spec.Drivers = nil
			spec.MultiHost = append(spec.MultiHost, sgMultiHost("gx", sgGPU))
			sgWrite(ctx, t, s.crc, spec)
			drvWaitStack(ctx, t, s.crc, "the removal draining for the GPU claim alone, the gx pool published", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, sgGPU)
				return d != nil && d.Removal != nil && d.Removal.Phase == driver.PhaseDraining && len(st.Status.MultiHost) == 2 && st.Status.MultiHost[1].Pools == 1
			})
			sgHold(ctx, t, c, "holds-gx", sgGPU, "gx-a", "gx-2x2-at-0-0")
			// The removal may have begun before the publisher published gx-a;
			// from then on its taint covers the driver's own pools only.
			var last []string
			err := wait.PollUntilContextTimeout(ctx, pollInterval, sgTimeout, true, func(ctx context.Context) (bool, error) {
				rules, err := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: driver.LabelComponent + "=" + driver.ComponentRemoval})
				if err != nil {
					return false, nil //nolint:nilerr // retried
				}
				last = nil
				for _, r := range rules.Items {
					pool := "<every device>"
					if sel := r.Spec.DeviceSelector; sel != nil && sel.Pool != nil {
						pool = *sel.Pool
					}
					last = append(last, pool)
				}
				slices.Sort(last)
				return slices.Equal(last, sgGPUNodes), nil
			})
			if err != nil {
				t.Errorf("removal rules taint %v, want only the driver's own pools %v: %v", last, sgGPUNodes, err)
			}
			drvWaitStack(ctx, t, s.crc, "the removal waiting for holds-gpu only", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, sgGPU)
				return d != nil && d.Removal != nil && d.Removal.Phase == driver.PhaseDraining && slices.Equal(d.Removal.BlockingClaims, []string{sgNamespace + "/holds-gpu"})
			})
			_ = c.Client.ResourceV1().ResourceClaims(sgNamespace).Delete(ctx, "holds-gpu", metav1.DeleteOptions{})
			drvWaitStack(ctx, t, s.crc, "the removal done", func(st *v1alpha1.DRAStack) bool { return drvStatus(st, sgGPU) == nil })
			if rules, _ := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: driver.LabelComponent + "=" + driver.ComponentRemoval}); len(rules.Items) != 0 {
				t.Errorf("%d removal rules left", len(rules.Items))
			}
			gx := 0
			for _, sl := range drvSlices(ctx, t, c, sgGPU) {
				if sl.Spec.NodeName == nil && sl.Spec.Pool.Name == "gx-a" {
					gx++
				} else if sl.Spec.NodeName != nil {
					t.Errorf("slice %s of the removed driver left behind", sl.Name)
				}
			}
			if gx == 0 {
				t.Errorf("the publisher's gx-a slices are gone")
			}
			held, err := c.Client.ResourceV1().ResourceClaims(sgNamespace).Get(ctx, "holds-gx", metav1.GetOptions{})
			if err != nil || held.Status.Allocation == nil {
				t.Errorf("the claim on the publisher's device lost its allocation: %v", err)
			}
			_ = c.Client.ResourceV1().ResourceClaims(sgNamespace).Delete(ctx, "holds-gx", metav1.DeleteOptions{})

			// Back to the base: the driver is installed again.
			sgWrite(ctx, t, s.crc, sgBaseSpec())
			drvPublish(ctx, t, c, sgDriverNS, sgGPU, sgGPUNodes...)
			drvWaitStack(ctx, t, s.crc, "the GPU driver Ready again", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, sgGPU)
				return d != nil && d.Ready && d.Removal == nil && len(st.Status.MultiHost) == 1
			})
			sgHold(ctx, t, c, "holds-gpu", sgGPU, sgGPUNodes[0], "gpu-0")
			return ctx
		}).
		Assess("the README's Force recipe finishes a Drain that does not end", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s, c := sgFrom(ctx, t), mustCluster(ctx, t)
			spec := sgBaseSpec()
			spec.Drivers = nil
			sgWrite(ctx, t, s.crc, spec)
			drvWaitStack(ctx, t, s.crc, "the removal draining for holds-gpu", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, sgGPU)
				return d != nil && d.Removal != nil && d.Removal.Phase == driver.PhaseDraining && slices.Contains(d.Removal.BlockingClaims, sgNamespace+"/holds-gpu")
			})
			for _, cmd := range readmeForceRecipe(t) {
				args := strings.Fields(strings.ReplaceAll(cmd, "$D", sgGPU))
				out, err := c.Kubectl(ctx, args[1:]...)
				if err != nil {
					t.Fatalf("README recipe %q: %v", cmd, err)
				}
				t.Logf("$ %s\n%s", cmd, strings.TrimSpace(string(out)))
			}
			drvWaitStack(ctx, t, s.crc, "the removal finished under Force", func(st *v1alpha1.DRAStack) bool { return drvStatus(st, sgGPU) == nil })
			drvCheckNothingLeftOf(ctx, t, c, sgGPU)
			held, err := c.Client.ResourceV1().ResourceClaims(sgNamespace).Get(ctx, "holds-gpu", metav1.GetOptions{})
			if err != nil || held.Status.Allocation == nil {
				t.Errorf("a Force removal must leave the claim allocated: %v", err)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s, _ := ctx.Value(sgKey{}).(*sgState)
			sgStop(ctx, t, mustCluster(ctx, t), s)
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

// sgLabelNamespace sets the driver namespace's enforced Pod Security
// level as an administrator's edit would (its own field manager), or
// removes the label ("").
func sgLabelNamespace(ctx context.Context, t *testing.T, level string) {
	t.Helper()
	c := mustCluster(ctx, t)
	value := `"` + level + `"`
	if level == "" {
		value = "null"
	}
	patch := []byte(`{"metadata":{"labels":{"` + stack.PodSecurityEnforceLabel + `":` + value + `}}}`)
	if _, err := c.Client.CoreV1().Namespaces().Patch(ctx, sgDriverNS, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "e2e-admin"}); err != nil {
		t.Fatal(err)
	}
}

// readmeForceRecipe returns the kubectl commands of the README's recipe
// for a driver deleted from spec.drivers ($D is the driver), joined where
// a line ends in a backslash.
func readmeForceRecipe(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "**A Drain that does not end.**")
	if start < 0 {
		t.Fatal("README: the section A Drain that does not end is gone")
	}
	block := text[start:]
	block = block[strings.Index(block, "```sh")+len("```sh"):]
	block = block[:strings.Index(block, "```")]
	after := strings.Index(block, "deleted from spec.drivers")
	if after < 0 {
		t.Fatal("README: the recipe for a driver deleted from spec.drivers is gone")
	}
	block = block[after:]
	var cmds []string
	var cur string
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(line)
		if cur != "" {
			cur += " " + strings.TrimSuffix(line, `\`)
		} else if strings.HasPrefix(line, "kubectl ") {
			cur = strings.TrimSuffix(line, `\`)
		}
		if cur != "" && !strings.HasSuffix(line, `\`) {
			cmds = append(cmds, strings.Join(strings.Fields(cur), " "))
			cur = ""
		}
	}
	if len(cmds) == 0 {
		t.Fatal("README: no kubectl command in the Force recipe")
	}
	return cmds
}

// drvCheckNothingLeftOf checks that no object of the driver is left:
// labelled objects of every managed kind, DeviceTaintRules, node-local
// slices.
func drvCheckNothingLeftOf(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: driver.LabelDriver + "=" + name}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, sgTimeout, true, func(ctx context.Context) (bool, error) {
		rules, err := c.Client.ResourceV1().DeviceTaintRules().List(ctx, sel)
		if err != nil || len(rules.Items) > 0 {
			return false, nil //nolint:nilerr // retried
		}
		classes, err := c.Client.ResourceV1().DeviceClasses().List(ctx, sel)
		if err != nil || len(classes.Items) > 0 {
			return false, nil //nolint:nilerr // retried
		}
		dss, err := c.Client.AppsV1().DaemonSets("").List(ctx, sel)
		if err != nil || len(dss.Items) > 0 {
			return false, nil //nolint:nilerr // retried
		}
		for _, sl := range drvSlices(ctx, t, c, name) {
			if sl.Spec.NodeName != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("something of driver %s is left: %v", name, err)
	}
}
