package admissionpolicy

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// FieldManager owns the policies the operator applies.
const FieldManager = "drastack-admission"

// StackCRD is the CustomResourceDefinition of the DRAStack, the param kind
// of CentralClasses and DriverNamespace. Those policies are owned by it:
// a param kind that is gone makes the API server refuse every request the
// policy matches (every claim, every namespace update), so when the CRD
// goes, the garbage collector takes them with it.
const StackCRD = "drastacks.drastack.io"

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// The Installer's RBAC: the set's objects by name (server-side apply, a
// patch that also creates; the driver lifecycle's rule for its own
// policies is broader), the CRD that owns the parameterized ones (get), and
// the probe, a dry-run Event.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=patch,resourceNames=drastack-operator-pod-gates;drastack-operator-owned-objects;drastack-operator-driver-namespace;drastack-operator-role-bindings;drastack-operator-held-to-grant;drastack-operator-claims-and-slices;drastack-operator-stack-finalizers;drastack-operator-webhook-cabundle;drastack-taint-rules;drastack-claim-tolerations;drastack-claim-central-classes;drastack-admission-probe
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get,resourceNames=drastacks.drastack.io
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create

// Installer applies the set for the operator's identity and waits until the
// API server enforces it (see the package doc).
type Installer struct {
	// Client applies the policies and sends the probe; it must not read
	// from a cache (the CRD is read once, directly).
	Client client.Client
	// Identity is the operator's ServiceAccount.
	Identity Identity
	// Instance names this replica in the probe Event (the pod's name).
	Instance string
	// ProbeInterval is how long to wait between probes; default 250ms.
	ProbeInterval time.Duration
	// ReapplyAfter is how long to probe before applying the set again (a
	// replica of another release may have applied its own in between);
	// default 15s.
	ReapplyAfter time.Duration

	inForce atomic.Bool
}

// InForce reports whether Install has seen the set enforced.
func (i *Installer) InForce() bool { return i.inForce.Load() }

// Install applies the set and waits until the API server enforces it,
// retrying failures, until ctx ends. It returns nil once the set is in
// force, ctx's error otherwise.
func (i *Installer) Install(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("admission-policies")
	interval := i.ProbeInterval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	reapply := i.ReapplyAfter
	if reapply <= 0 {
		reapply = 15 * time.Second
	}
	begin := time.Now()
	var lastErr string
	for ctx.Err() == nil {
		hash, err := i.apply(ctx)
		if err == nil {
			var inForce bool
			inForce, err = i.probe(ctx, hash, interval, reapply)
			if inForce {
				i.inForce.Store(true)
				logger.Info("Admission policies in force", "set", hash, "after", time.Since(begin).Round(time.Millisecond))
				return nil
			}
		}
		if err != nil && err.Error() != lastErr {
			lastErr = err.Error()
			logger.Error(err, "Installing the admission policies failed; retrying")
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
	return ctx.Err()
}

// apply writes every policy, every binding, then the probe, and returns
// the set's hash.
func (i *Installer) apply(ctx context.Context) (string, error) {
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(crdGVK)
	if err := i.Client.Get(ctx, client.ObjectKey{Name: StackCRD}, crd); err != nil {
		return "", fmt.Errorf("read CustomResourceDefinition %s, the owner of the parameterized policies: %w", StackCRD, err)
	}
	pairs := Set(i.Identity)
	for _, p := range pairs {
		if p.Policy.Spec.ParamKind != nil {
			p.Policy.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: crdGVK.GroupVersion().String(), Kind: crdGVK.Kind, Name: crd.Name, UID: crd.UID,
				BlockOwnerDeletion: ptr.To(false),
			}}
		}
	}
	hash := Hash(pairs)
	probe := ProbePair(i.Identity, hash)
	objs := append(Objects(pairs), probe.Policy, probe.Binding)
	for _, obj := range objs {
		u, err := Unstructured(obj)
		if err != nil {
			return "", err
		}
		if err := i.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return "", fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return hash, nil
}

// errNotYet: the probe went through; the API server has not loaded the
// set yet.
var errNotYet = errors.New("not in force yet")

// probe sends the probe until the API server refuses it as the probe
// policy does (true), another error repeats for the whole reapply period,
// or that period ends.
func (i *Installer) probe(ctx context.Context, hash string, interval, reapply time.Duration) (bool, error) {
	deadline := time.Now().Add(reapply)
	var err error
	for ctx.Err() == nil && time.Now().Before(deadline) {
		ev := ProbeEvent(i.Identity, hash, i.Instance, time.Now())
		err = i.Client.Create(ctx, ev, client.DryRunAll)
		if IsProbeRefusal(err, hash) {
			return true, nil
		}
		if err == nil {
			err = errNotYet
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
	return false, fmt.Errorf("the API server does not enforce admission policy set %s after %s (last probe: %w)", hash, reapply, err)
}
