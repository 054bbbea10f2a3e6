//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/admissionpolicy"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// The admission policies in the real API server: each rule refuses the
// operator's identity outside it and lets it through inside (impersonated
// by the test's administrator, as server-side dry runs where a dry run is
// possible; the refused writes that are not dry runs store nothing), and
// the partition's rules refuse everyone else's claims and rule changes that
// would let kube-scheduler at central devices. The operator itself runs as
// deployed and installs the policies at start.

const (
	fnNamespace = "fence"
	// fnOwned is a namespace labelled as the driver lifecycle's.
	fnOwned   = "fence-owned"
	fnDriver  = "fence.example.com"
	fnClass   = "fence-central"
	fnTimeout = 2 * time.Minute
)

type fnKey struct{}

type fnState struct {
	c        *cluster.Cluster
	crc      client.Client
	op       kubernetes.Interface
	opCRC    client.Client
	stop     func()
	restore  func()
	identity string
}

// fnOperator returns clients that act as the operator's ServiceAccount.
func fnOperator(t *testing.T, c *cluster.Cluster, username string) (kubernetes.Interface, client.Client) {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	ns := admissionpolicy.DefaultIdentity.Namespace
	cfg.Impersonate = rest.ImpersonationConfig{UserName: username, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	crc, err := client.New(cfg, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return cs, crc
}

// refusedBy fails unless err is a refusal by the named policy of the set.
func refusedBy(t *testing.T, what string, err error, policy string, mention string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want refused by %s", what, policy)
		return
	}
	msg := err.Error()
	if !strings.Contains(msg, "ValidatingAdmissionPolicy '"+policy+"'") {
		t.Errorf("%s: %v; want a refusal by %s", what, err, policy)
		return
	}
	if !strings.Contains(msg, mention) {
		t.Errorf("%s: the refusal %q does not say %q", what, msg, mention)
	}
}

// allowed fails if err is an error.
func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v; want it allowed", what, err)
	}
}

var dry = []string{metav1.DryRunAll}

func TestAdmissionPolicies(t *testing.T) {
	feature := features.New("admission policies").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			crc := prepareFeature(ctx, t, c, fnNamespace)
			id, err := c.DeployOperatorIdentity(ctx, operatorDeployDir)
			if err != nil {
				t.Fatal(err)
			}
			s := &fnState{c: c, crc: crc, identity: id.Username}
			s.op, s.opCRC = fnOperator(t, c, id.Username)
			_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				Name: fnOwned, Labels: map[string]string{driver.LabelStack: v1alpha1.DRAStackName}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create namespace %s: %v", fnOwned, err)
			}
			begin := time.Now()
			s.stop = runOperator(ctx, t, c, fnNamespace)
			// The operator's own identity is refused once its policies are
			// in force. (kube-system cannot serve: the API server refuses
			// to delete it before any admission policy runs.)
			var last error
			err = wait.PollUntilContextTimeout(ctx, pollInterval, fnTimeout, true, func(ctx context.Context) (bool, error) {
				last = s.op.CoreV1().Namespaces().Delete(ctx, fnNamespace, metav1.DeleteOptions{DryRun: dry})
				return last != nil && strings.Contains(last.Error(), admissionpolicy.OwnedObjects), nil
			})
			if err != nil {
				t.Fatalf("the admission policies are not in force: %v (last: %v)", err, last)
			}
			t.Logf("timing: operator started -> admission policies in force in %s", since(begin))
			if err := c.Client.ResourceV1().DeviceClasses().Delete(ctx, fnClass, metav1.DeleteOptions{}); err == nil {
				t.Logf("removed a leftover DeviceClass %s", fnClass)
			}
			if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(fnClass, fnDriver, ""), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			s.restore = clApplyClaimsSpec(ctx, t, crc, v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, GatePods: ptr.To(true),
				Central: []v1alpha1.CentralDevices{{Driver: fnDriver, Classes: []string{fnClass}}}})
			return context.WithValue(ctx, fnKey{}, s)
		}).
		Assess("pods: the operator only lifts its own scheduling gate", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(fnKey{}).(*fnState)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gated", Namespace: fnNamespace, Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{
					Containers:      []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
					SchedulingGates: []corev1.PodSchedulingGate{{Name: claimpolicy.SchedulingGate}, {Name: "example.com/hold"}},
				}}
			if _, err := s.c.Client.CoreV1().Pods(fnNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			patch := func(p string) error {
				_, err := s.op.CoreV1().Pods(fnNamespace).Patch(ctx, "gated", types.JSONPatchType, []byte(p), metav1.PatchOptions{DryRun: dry})
				return err
			}
			allowed(t, "lift its own gate", patch(`[{"op":"remove","path":"/spec/schedulingGates/0"}]`))
			refusedBy(t, "lift another gate", patch(`[{"op":"remove","path":"/spec/schedulingGates/1"}]`), admissionpolicy.PodGates,
				"may only remove its own scheduling gate resource.drastack.io/allocation")
			refusedBy(t, "relabel the pod", patch(`[{"op":"replace","path":"/metadata/labels/app","value":"y"}]`), admissionpolicy.PodGates,
				"not metadata.labels")
			// A gated pod's node selector may grow (the API server allows
			// it: pod scheduling readiness); the operator's may not.
			refusedBy(t, "narrow the node selector with the gate", patch(`[{"op":"remove","path":"/spec/schedulingGates/0"},{"op":"add","path":"/spec/nodeSelector","value":{"kubernetes.io/hostname":"kwok-node-0"}}]`),
				admissionpolicy.PodGates, "not spec.nodeSelector")
			return ctx
		}).
		Assess("owned objects: only what carries its labels, namespaced ones only in its namespaces", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(fnKey{}).(*fnState)
			refusedBy(t, "delete a namespace it does not own", s.op.CoreV1().Namespaces().Delete(ctx, fnNamespace, metav1.DeleteOptions{DryRun: dry}),
				admissionpolicy.OwnedObjects, "not "+fnNamespace)
			allowed(t, "delete a namespace labelled "+driver.LabelStack, s.op.CoreV1().Namespaces().Delete(ctx, fnOwned, metav1.DeleteOptions{DryRun: dry}))
			ds := func(ns string) *appsv1.DaemonSet {
				labels := map[string]string{driver.LabelStack: v1alpha1.DRAStackName, "app": "fence"}
				return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "fence-plugin", Namespace: ns, Labels: labels},
					Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fence"}},
						Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
							Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
			}
			_, err := s.op.AppsV1().DaemonSets(fnNamespace).Create(ctx, ds(fnNamespace), metav1.CreateOptions{DryRun: dry})
			refusedBy(t, "a labelled DaemonSet in a namespace it does not own", err, admissionpolicy.OwnedObjects,
				"writes namespaced objects only in namespaces labelled drastack.io/stack")
			_, err = s.op.AppsV1().DaemonSets(fnOwned).Create(ctx, ds(fnOwned), metav1.CreateOptions{DryRun: dry})
			allowed(t, "a labelled DaemonSet in its namespace", err)
			unlabelled := ds(fnOwned)
			unlabelled.Labels = nil
			_, err = s.op.AppsV1().DaemonSets(fnOwned).Create(ctx, unlabelled, metav1.CreateOptions{DryRun: dry})
			refusedBy(t, "an unlabelled DaemonSet", err, admissionpolicy.OwnedObjects, "only objects that carry its ownership labels")
			refusedBy(t, "delete cluster-admin", s.op.RbacV1().ClusterRoles().Delete(ctx, "cluster-admin", metav1.DeleteOptions{DryRun: dry}),
				admissionpolicy.OwnedObjects, "not clusterroles cluster-admin")
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fence-elsewhere", Labels: map[string]string{driver.LabelStack: v1alpha1.DRAStackName}}}
			_, err = s.op.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{DryRun: dry})
			refusedBy(t, "create a namespace other than the DRAStack's spec.namespace", err, admissionpolicy.DriverNamespace,
				"only the driver namespace of DRAStack default (spec.namespace drastack-drivers), not fence-elsewhere")
			return ctx
		}).
		Assess("role bindings: the role of their own name, ServiceAccounts only", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(fnKey{}).(*fnState)
			// A role whose only rule the operator holds, so that RBAC's own
			// escalation check lets the bindings reach admission.
			role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fence-role"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
			if _, err := s.c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.c.Client.RbacV1().ClusterRoles().Delete(ctx, "fence-role", metav1.DeleteOptions{}) }()
			binding := func(name string, subject rbacv1.Subject) *rbacv1.ClusterRoleBinding {
				return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{driver.LabelStack: v1alpha1.DRAStackName}},
					RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fence-role"},
					Subjects: []rbacv1.Subject{subject}}
			}
			sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "plugin", Namespace: fnOwned}
			_, err := s.op.RbacV1().ClusterRoleBindings().Create(ctx, binding("fence-role", sa), metav1.CreateOptions{DryRun: dry})
			allowed(t, "bind the role of its name to a ServiceAccount", err)
			_, err = s.op.RbacV1().ClusterRoleBindings().Create(ctx, binding("fence-other", sa), metav1.CreateOptions{DryRun: dry})
			refusedBy(t, "bind another role", err, admissionpolicy.RoleBindings, "fence-other refers to ClusterRole fence-role")
			_, err = s.op.RbacV1().ClusterRoleBindings().Create(ctx, binding("fence-role", rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:authenticated"}),
				metav1.CreateOptions{DryRun: dry})
			refusedBy(t, "bind to every authenticated user", err, admissionpolicy.RoleBindings, "never to users or groups")
			return ctx
		}).
		Assess("permissions held only to grant them are never used", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(fnKey{}).(*fnState)
			node, err := s.c.Client.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			node.Spec.Unschedulable = true
			_, err = s.op.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{DryRun: dry})
			refusedBy(t, "cordon a node (update: the verb the nvidia-gpu profile's controller needs)", err, admissionpolicy.HeldToGrant, "holds write access to nodes only to grant it")
			_, err = s.op.ResourceV1().ResourceClaimTemplates(fnOwned).Create(ctx, &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}}}}}}, metav1.CreateOptions{DryRun: dry})
			refusedBy(t, "create a claim template (held to grant it to the nvidia-gpu compute-domain controller)", err, admissionpolicy.HeldToGrant, "resourceclaimtemplates only to grant it")
			return ctx
		}).
		Assess("the DRAStack, claims and slices: finalizers, dry runs and node-less slices only", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(fnKey{}).(*fnState)
			st := &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}
			err := s.opCRC.Patch(ctx, st, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"namespace":"fence-drivers"}}`)), client.DryRunAll)
			refusedBy(t, "change the DRAStack's spec", err, admissionpolicy.StackFinalizers, "only by its own finalizers, not spec")
			claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "fence-claim", Namespace: fnNamespace}, Spec: clClaimSpec(fnClass, 1, "")}
			_, err = s.op.ResourceV1().ResourceClaims(fnNamespace).Create(ctx, claim, metav1.CreateOptions{DryRun: dry})
			allowed(t, "a dry-run claim (the cluster probe)", err)
			_, err = s.op.ResourceV1().ResourceClaims(fnNamespace).Create(ctx, claim, metav1.CreateOptions{})
			refusedBy(t, "a claim for real", err, admissionpolicy.ClaimsAndSlices, "only as server-side dry runs")
			slice := clNodeSlice(fnDriver, "kwok-node-0", 1, []resourceapi.Device{{Name: "d0"}})
			_, err = s.op.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
			refusedBy(t, "a node-local slice", err, admissionpolicy.ClaimsAndSlices, "only node-less ResourceSlices")
			return ctx
		}).
		Assess("the partition: nobody else writes the operator's DeviceTaintRules or tolerates its taint", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(fnKey{}).(*fnState)
			clWaitCentral(ctx, t, s.c, fnDriver)
			rules, err := s.c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var rule string
			for _, r := range rules.Items {
				if central.Owned(&r) && r.Spec.DeviceSelector != nil && ptr.Deref(r.Spec.DeviceSelector.Driver, "") == fnDriver {
					rule = r.Name
				}
			}
			refusedBy(t, "an administrator deletes a central rule", s.c.Client.ResourceV1().DeviceTaintRules().Delete(ctx, rule, metav1.DeleteOptions{DryRun: dry}),
				admissionpolicy.TaintRules, "only the operator ("+s.identity+") may delete it")
			allowed(t, "the operator deletes its rule", s.op.ResourceV1().DeviceTaintRules().Delete(ctx, rule, metav1.DeleteOptions{DryRun: dry}))
			mine := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "fence-maintenance"}, Spec: resourceapi.DeviceTaintRuleSpec{
				DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(fnDriver)},
				Taint:          resourceapi.DeviceTaint{Key: "example.com/maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule}}}
			_, err = s.c.Client.ResourceV1().DeviceTaintRules().Create(ctx, mine, metav1.CreateOptions{DryRun: dry})
			allowed(t, "an administrator's own rule", err)
			mine.Spec.Taint.Key = central.TaintKey
			_, err = s.c.Client.ResourceV1().DeviceTaintRules().Create(ctx, mine, metav1.CreateOptions{DryRun: dry})
			refusedBy(t, "an administrator's rule with the central key", err, admissionpolicy.TaintRules, "may create it")

			claim := func(name string, annotations map[string]string, labels map[string]string, class string, tolerations ...resourceapi.DeviceToleration) *resourceapi.ResourceClaim {
				spec := clClaimSpec(class, 1, "")
				spec.Devices.Requests[0].Exactly.Tolerations = tolerations
				return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fnNamespace, Annotations: annotations, Labels: labels}, Spec: spec}
			}
			create := func(c *resourceapi.ResourceClaim) error {
				_, err := s.c.Client.ResourceV1().ResourceClaims(fnNamespace).Create(ctx, c, metav1.CreateOptions{DryRun: dry})
				return err
			}
			refusedBy(t, "a claim tolerating every taint", create(claim("all", nil, nil, "standard", resourceapi.DeviceToleration{Operator: resourceapi.DeviceTolerationOpExists})),
				admissionpolicy.ClaimTolerations, "tolerate the taint resource.drastack.io/central")
			refusedBy(t, "a claim tolerating the central key", create(claim("key", nil, nil, "standard", central.Toleration())), admissionpolicy.ClaimTolerations, "requests devices of key")
			allowed(t, "a claim tolerating another key", create(claim("other", nil, nil, "standard", resourceapi.DeviceToleration{Key: "example.com/x", Operator: resourceapi.DeviceTolerationOpExists})))
			cel := map[string]string{allocator.CELConstraintsAnnotation: `[{"expression": "true"}]`}
			refusedBy(t, "a CEL claim of a class that is not central", create(claim("cel", cel, nil, "standard")), admissionpolicy.CentralClasses,
				"every request must name a class of spec.claims.central[].classes of DRAStack default (now: "+fnClass+"); requests devices do not")
			allowed(t, "a CEL claim of a central class", create(claim("cel", cel, nil, fnClass)))
			immediate := map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}
			tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "imm", Namespace: fnNamespace},
				Spec: resourceapi.ResourceClaimTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: immediate}, Spec: clClaimSpec("standard", 1, "")}}
			_, err = s.c.Client.ResourceV1().ResourceClaimTemplates(fnNamespace).Create(ctx, tmpl, metav1.CreateOptions{DryRun: dry})
			refusedBy(t, "an Immediate template of a class that is not central", err, admissionpolicy.CentralClasses, "imm asks for the drastack operator's allocation")
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s, ok := ctx.Value(fnKey{}).(*fnState)
			if !ok {
				return ctx
			}
			// The labelled namespace first: the driver lifecycle holds a
			// DRAStack being deleted while a namespace carries its label.
			for _, ns := range []string{fnOwned, fnNamespace} {
				clDeleteNamespace(ctx, t, s.c, ns)
			}
			if s.restore != nil {
				s.restore()
			}
			s.stop()
			_ = s.c.Client.ResourceV1().DeviceClasses().Delete(ctx, fnClass, metav1.DeleteOptions{})
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}
