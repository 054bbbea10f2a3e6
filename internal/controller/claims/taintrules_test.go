package claims

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/ledger"
)

// rule is a DeviceTaintRule for a pool of tdrv; owned rules carry the
// operator's labels.
func rule(name, pool string, owned bool) *resourceapi.DeviceTaintRule {
	r := &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(tdrv), Pool: ptr.To(pool)},
			Taint:          central.Taint(),
		},
	}
	if owned {
		r.Labels = central.RuleLabels()
	}
	return r
}

func (e *env) rules() map[string]*resourceapi.DeviceTaintRule {
	e.t.Helper()
	var list resourceapi.DeviceTaintRuleList
	if err := e.c.List(context.Background(), &list); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]*resourceapi.DeviceTaintRule{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

func TestTaintLoop(t *testing.T) {
	ctx := context.Background()
	n1, n2, mh := central.RuleName(tdrv, "n1"), central.RuleName(tdrv, "n2"), central.RuleName(tdrv, "mh")
	cluster := func() []client.Object {
		return []client.Object{
			gpuClass(), node("n1", "4"), node("n2", "4"),
			nodeSlice("n1", "a"), nodeSlice("n2", "a"), poolSlice("mh", "a"), poolSlice("shared", "a"),
		}
	}

	t.Run("creates, updates and deletes only the operator's rules", func(t *testing.T) {
		stale := rule(n1, "n1", true)
		stale.Spec.Taint.Effect = resourceapi.DeviceTaintEffectNoExecute // not what the operator wants
		objs := append(cluster(), stack("n1", "n2", "mh"),
			stale,
			rule(mh, "mh", false), // an administrator's rule under the name the operator wants
			rule("drastack-central-gone", "old", true), // the operator's, no longer wanted
			rule("admin-shared", "shared", false),      // an administrator's
		)
		e := newEnv(t, interceptor.Funcs{}, objs...)
		tr := &taintReconciler{r: e.r}
		reads := e.countSourceReads()
		e.decide()
		if _, err := tr.Reconcile(ctx, taintKey); err != nil {
			t.Fatal(err)
		}
		rules := e.rules()
		var names []string
		for n := range rules {
			names = append(names, n)
		}
		slices.Sort(names)
		want := []string{"admin-shared", mh, n1, n2}
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Fatalf("rules %v, want %v", names, want)
		}
		if got := rules[n1].Spec.Taint.Effect; got != central.TaintEffect {
			t.Errorf("rule %s has effect %s, want it updated to %s", n1, got, central.TaintEffect)
		}
		if central.Owned(rules[mh]) || central.Owned(rules["admin-shared"]) {
			t.Errorf("an administrator's rule was taken over: %v %v", rules[mh].Labels, rules["admin-shared"].Labels)
		}
		created := rules[n2]
		if !central.Owned(created) || len(created.OwnerReferences) != 1 || created.OwnerReferences[0].Name != "default" {
			t.Errorf("created rule %s: labels %v, owners %v; want the operator's labels and the DRAStack as owner", n2, created.Labels, created.OwnerReferences)
		}
		e.decide()
		if n := reads.Load(); n != 2 {
			t.Errorf("%d session builds, want 2: changed rules must invalidate the engine session", n)
		}
		checkPatches(t, e.patches, allowedPatches)
		if got := patchKinds(e.patches); !slices.Equal(got, []string{"DRAStack", "DeviceTaintRule"}) {
			t.Errorf("patches of %v, want the finalizer on the DRAStack and the one update", got)
		}
		if !slices.Contains(e.stack().Finalizers, CleanupFinalizer) {
			t.Errorf("DRAStack finalizers %v, want %s while rules exist", e.stack().Finalizers, CleanupFinalizer)
		}
		evs := e.events()
		if !hasEvent(evs, corev1.EventTypeWarning, EventTaintRules, mh, "not the operator's") ||
			!hasEvent(evs, corev1.EventTypeNormal, EventTaintRules, "1 created, 1 updated, 1 deleted") {
			t.Errorf("events %q, want the conflict and the change", evs)
		}

		// Converged: nothing more to write.
		if _, err := tr.Reconcile(ctx, taintKey); err != nil {
			t.Fatal(err)
		}
		if len(e.patches.all()) != 2 {
			t.Errorf("a converged reconcile wrote again: %v", patchKinds(e.patches))
		}
		if evs := e.events(); hasEvent(evs, corev1.EventTypeNormal, EventTaintRules) {
			t.Errorf("a converged reconcile reported a change: %q", evs)
		}
	})

	t.Run("without the configuration, rules stay while a pod is gated", func(t *testing.T) {
		objs := append(cluster(), rule(n1, "n1", true), rule("admin-shared", "shared", false), gatedPod("p", "1", "c"))
		e := newEnv(t, interceptor.Funcs{}, objs...)
		tr := &taintReconciler{r: e.r}
		if _, err := tr.Reconcile(ctx, taintKey); err != nil {
			t.Fatal(err)
		}
		if rules := e.rules(); rules[n1] == nil {
			t.Fatalf("rule %s deleted while pod p is gated", n1)
		}
		// The placement loop lifts the gate (no DRAStack: every gate goes).
		p := &placementReconciler{r: e.r}
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		if e.pod("p").Spec.SchedulingGates != nil {
			t.Fatalf("gate not lifted without a DRAStack: %v", e.pod("p").Spec.SchedulingGates)
		}
		if _, err := tr.Reconcile(ctx, taintKey); err != nil {
			t.Fatal(err)
		}
		rules := e.rules()
		if rules[n1] != nil || rules["admin-shared"] == nil {
			t.Errorf("rules %v, want only the administrator's", rules)
		}
	})

	t.Run("a DRAStack being deleted keeps its rules and finalizer while a pod is gated, then lets go", func(t *testing.T) {
		st := stack("n1")
		st.Finalizers = []string{CleanupFinalizer}
		st.DeletionTimestamp = ptr.To(metav1.Now())
		objs := append(cluster(), st, rule(n1, "n1", true), gatedPod("p", "1", "c"))
		e := newEnv(t, interceptor.Funcs{}, objs...)
		tr := &taintReconciler{r: e.r}
		if _, err := tr.Reconcile(ctx, taintKey); err != nil {
			t.Fatal(err)
		}
		if e.rules()[n1] == nil || !slices.Contains(e.stack().Finalizers, CleanupFinalizer) {
			t.Fatalf("rule or finalizer gone while pod p is gated: rules %v, finalizers %v", e.rules(), e.stack().Finalizers)
		}
		p := &placementReconciler{r: e.r}
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		if e.pod("p").Spec.SchedulingGates != nil {
			t.Fatalf("gate not lifted while the DRAStack is deleted: %v", e.pod("p").Spec.SchedulingGates)
		}
		if _, err := tr.Reconcile(ctx, taintKey); err != nil {
			t.Fatal(err)
		}
		if e.rules()[n1] != nil {
			t.Errorf("rule %s left after the last gate", n1)
		}
		if got := e.stackOrNil(); got != nil {
			t.Errorf("DRAStack still there with finalizers %v; want it gone once the finalizer is removed", got.Finalizers)
		}
	})

	t.Run("a device leaves only when no decision can reserve it and nothing holds it", func(t *testing.T) {
		var mu sync.Mutex
		released := false
		funcs := interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			mu.Lock()
			ok := released
			mu.Unlock()
			if !ok {
				t.Errorf("DeviceTaintRule %s deleted while a decision under the old configuration was under way", obj.GetName())
			}
			return c.Delete(ctx, obj, opts...)
		}}
		// n2 left spec.claims.central: its rule must go, but a decision
		// taken under the configuration that still named it reserves
		// n2/dev-0 while the taint loop runs.
		objs := append(cluster(), stack("n1"), rule(n1, "n1", true), rule(n2, "n2", true), gpuClaim("late"))
		e := newEnv(t, funcs, objs...)
		tr := &taintReconciler{r: e.r}
		inTurn, letGo := make(chan struct{}), make(chan struct{})
		decided := make(chan error)
		go func() {
			decided <- e.r.ledger.Decide(ctx, tns, native.New(), func(d *ledger.Decision) error {
				close(inTurn)
				<-letGo
				alloc := testAllocation()
				alloc.Devices.Results[0].Pool = "n2"
				return d.Reserve(e.claim("late"), alloc, "")
			})
		}()
		<-inTurn
		done := make(chan error)
		go func() {
			_, err := tr.Reconcile(ctx, taintKey)
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("the taint loop finished (%v) while a decision was under way", err)
		case <-time.After(100 * time.Millisecond):
		}
		mu.Lock()
		released = true
		mu.Unlock()
		close(letGo)
		if err := <-decided; err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		rules := e.rules()
		hold := central.HoldRuleName(central.DeviceID{Driver: tdrv, Pool: "n2", Device: "dev-0"})
		if rules[n2] != nil || rules[n1] == nil || rules[hold] == nil {
			t.Fatalf("rules %v, want %s and the hold rule %s of the reserved device, not %s", keys(rules), n1, hold, n2)
		}
		// Once the reservation ends (the claim is deleted), the hold goes.
		e.r.ledger.ObserveDeleted(e.claim("late"))
		if _, err := tr.Reconcile(ctx, taintKey); err != nil {
			t.Fatal(err)
		}
		if rules := e.rules(); rules[hold] != nil {
			t.Errorf("hold rule kept after the device was released: %v", keys(rules))
		}
	})

	t.Run("a refused create is an error", func(t *testing.T) {
		funcs := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "devicetaintrules"}, obj.GetName(), errors.New("no"))
		}}
		e := newEnv(t, funcs, append(cluster(), stack("n1"))...)
		tr := &taintReconciler{r: e.r}
		if _, err := tr.Reconcile(ctx, taintKey); !apierrors.IsForbidden(err) {
			t.Errorf("Reconcile: %v, want the 403", err)
		}
	})
}

// patchKinds lists the kinds of the patches sent, sorted.
func patchKinds(log *patchLog) []string {
	var out []string
	for _, p := range log.all() {
		out = append(out, p.kind)
	}
	slices.Sort(out)
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
