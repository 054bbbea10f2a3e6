package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Removal phases, in order; reported in DRAStack status.drivers[].removal.
const (
	// PhaseTainting: new allocations of the driver's devices are being
	// stopped (a DeviceTaintRule, or deleting its DeviceClasses).
	PhaseTainting = "Tainting"
	// PhaseDraining: allocated claims still use the driver's devices, or
	// custom resources of its CustomResourceDefinitions exist.
	PhaseDraining = "Draining"
	// PhaseDeleting: the driver's workloads are being deleted.
	PhaseDeleting = "Deleting"
	// PhaseCleaning: the driver's other objects, leftover ResourceSlices
	// and finally the taint are being deleted.
	PhaseCleaning = "Cleaning"
)

// maxBlockingClaimsListed bounds the claims named in status.
const maxBlockingClaimsListed = 20

// RemovalAction is one thing the controller does for a removal.
type RemovalAction string

// Removal actions, each idempotent.
const (
	// ActionTaint creates the DeviceTaintRule that stops new allocations.
	ActionTaint RemovalAction = "Taint"
	// ActionDeleteDeviceClasses deletes the driver's DeviceClasses, the
	// way to stop new allocations where DeviceTaintRule is not served.
	ActionDeleteDeviceClasses RemovalAction = "DeleteDeviceClasses"
	// ActionDeleteWorkloads deletes the DaemonSet and Deployments.
	ActionDeleteWorkloads RemovalAction = "DeleteWorkloads"
	// ActionDeleteObjects deletes every other object of the driver
	// (identity, permissions, admission policy, DeviceClasses) but its
	// CustomResourceDefinitions.
	ActionDeleteObjects RemovalAction = "DeleteObjects"
	// ActionDeleteCRDs deletes the driver's CustomResourceDefinitions:
	// only when no custom resource of them is left.
	ActionDeleteCRDs RemovalAction = "DeleteCRDs"
	// ActionReleaseCRDs removes the drastack labels from the driver's
	// CustomResourceDefinitions and leaves them (and their custom
	// resources) in the cluster: a Force removal while custom resources
	// exist.
	ActionReleaseCRDs RemovalAction = "ReleaseCRDs"
	// ActionDeleteSlices deletes the ResourceSlices the driver left.
	ActionDeleteSlices RemovalAction = "DeleteSlices"
	// ActionUntaint deletes the DeviceTaintRule, the last trace.
	ActionUntaint RemovalAction = "Untaint"
)

// RemovalState is what the controller observed of a driver being removed.
type RemovalState struct {
	// Policy is the driver's removal policy (Drain when unknown).
	Policy v1alpha1.RemovalPolicy
	// TaintRulesServed says the cluster serves DeviceTaintRule.
	TaintRulesServed bool
	// Tainted says the driver's removal DeviceTaintRules cover every
	// target (RemovalTaintTargets) of its devices, and no other rule of
	// it exists.
	Tainted bool
	// Rules counts the driver's removal DeviceTaintRules that exist,
	// whatever they target: once every device is gone there is no target
	// left, and the rules that stopped allocations are still to lift.
	Rules int
	// DeviceClasses counts the driver's DeviceClasses still present.
	DeviceClasses int
	// BlockingClaims are the allocated claims (namespace/name, sorted)
	// that use a device of the driver.
	BlockingClaims []string
	// CustomResources are the custom resources ("Kind namespace/name",
	// sorted) of the driver's CustomResourceDefinitions.
	CustomResources []string
	// Workloads counts the DaemonSets and Deployments still present, Pods
	// the driver's pods still present.
	Workloads, Pods int
	// Objects counts the driver's other objects still present,
	// DeviceClasses included, CustomResourceDefinitions not.
	Objects int
	// CRDs counts the driver's CustomResourceDefinitions still present.
	CRDs int
	// Slices counts ResourceSlices of the driver's names still present.
	Slices int
}

// RemovalStep is what to do now.
type RemovalStep struct {
	// Phase is the phase the removal is in.
	Phase string
	// Actions are to be carried out now, in order.
	Actions []RemovalAction
	// Done is true when nothing of the driver is left.
	Done bool
}

// NextRemovalStep decides the next step of a driver removal. The order is
// the whole point: stop new allocations, then (Drain) wait for allocated
// claims to be released and custom resources of the driver's definitions
// to be deleted (while the driver's controller still runs to finalize
// them), then delete the workloads and wait for their pods to be gone, so
// no plugin publishes again, then delete the rest and the ResourceSlices
// left behind, the CustomResourceDefinitions only once no custom resource
// of them is left (a Force removal leaves them, released), and lift the
// taint last. Nothing is deleted before its turn; a step whose work is
// done falls through to the next.
func NextRemovalStep(s RemovalState) RemovalStep {
	live := s.Workloads+s.Pods+s.Objects+s.Slices > 0
	// Stop new allocations while anything of the driver could still be
	// allocated. After the slices are gone nothing can.
	if live {
		switch {
		case s.TaintRulesServed && !s.Tainted:
			return RemovalStep{Phase: PhaseTainting, Actions: []RemovalAction{ActionTaint}}
		case !s.TaintRulesServed && s.DeviceClasses > 0:
			return RemovalStep{Phase: PhaseTainting, Actions: []RemovalAction{ActionDeleteDeviceClasses}}
		}
	}
	if s.Policy != v1alpha1.RemovalPolicyForce && len(s.BlockingClaims)+len(s.CustomResources) > 0 {
		return RemovalStep{Phase: PhaseDraining}
	}
	if s.Workloads > 0 {
		return RemovalStep{Phase: PhaseDeleting, Actions: []RemovalAction{ActionDeleteWorkloads}}
	}
	if s.Pods > 0 {
		return RemovalStep{Phase: PhaseDeleting}
	}
	var clean []RemovalAction
	if s.Objects > 0 {
		clean = append(clean, ActionDeleteObjects)
	}
	if s.Slices > 0 {
		clean = append(clean, ActionDeleteSlices)
	}
	switch {
	case s.CRDs > 0 && len(s.CustomResources) == 0:
		clean = append(clean, ActionDeleteCRDs)
	case s.CRDs > 0:
		clean = append(clean, ActionReleaseCRDs)
	}
	if len(clean) > 0 {
		return RemovalStep{Phase: PhaseCleaning, Actions: clean}
	}
	if s.Rules > 0 {
		return RemovalStep{Phase: PhaseCleaning, Actions: []RemovalAction{ActionUntaint}}
	}
	return RemovalStep{Done: true}
}

// RemovalStatus is the status of a removal in its step. since is when the
// removal started (kept from the previous status), zero for now.
func RemovalStatus(step RemovalStep, s RemovalState, since, now time.Time) v1alpha1.DriverRemovalStatus {
	if since.IsZero() {
		since = now
	}
	st := v1alpha1.DriverRemovalStatus{Phase: step.Phase, Since: metav1.NewTime(since), Policy: s.Policy}
	if step.Phase == PhaseDraining {
		st.BlockingClaimCount = int32(len(s.BlockingClaims))
		st.BlockingClaims = slices.Clone(s.BlockingClaims[:min(len(s.BlockingClaims), maxBlockingClaimsListed)])
		st.BlockingResourceCount = int32(len(s.CustomResources))
		st.BlockingResources = slices.Clone(s.CustomResources[:min(len(s.CustomResources), maxBlockingClaimsListed)])
	}
	return st
}

// TaintKey is the key of the taint that stops allocations of a driver's
// devices during its removal.
const TaintKey = "drastack.io/driver-removal"

// TaintTarget is what one removal DeviceTaintRule selects: every device
// of a DRA driver name, or, with Pool set, the devices of one pool of it.
type TaintTarget struct {
	Driver, Pool string
}

// RemovalTaintTargets decides what a removal taints to stop new
// allocations: every device of each of the driver's names, except a name
// the central publisher also publishes under (publisherPools, from the
// slices the DRAStack owns). A taint on the whole name would stop
// allocations of the publisher's devices too, and a Drain would wait for
// claims on them that no removal releases; so such a name gets one rule
// per pool of the driver's own slices (ownPools) instead. The whole-spec
// check refuses a driver and a multi-host entry of one name, but one edit
// can remove the driver and add the entry at once.
func RemovalTaintTargets(names []string, ownPools, publisherPools map[string][]string) []TaintTarget {
	var out []TaintTarget
	for _, n := range names {
		if len(publisherPools[n]) == 0 {
			out = append(out, TaintTarget{Driver: n})
			continue
		}
		pools := slices.Clone(ownPools[n])
		slices.Sort(pools)
		for _, p := range slices.Compact(pools) {
			if !slices.Contains(publisherPools[n], p) {
				out = append(out, TaintTarget{Driver: n, Pool: p})
			}
		}
	}
	return out
}

// TaintRuleName is the name of the removal rule of a target.
func TaintRuleName(t TaintTarget) string {
	name := "drastack-removal-" + NamePrefix(t.Driver)
	if t.Pool != "" {
		sum := sha256.Sum256([]byte(t.Pool))
		name += "-pool-" + hex.EncodeToString(sum[:5])
	}
	return name
}

// TaintRules are the DeviceTaintRules (one per target) that stop new
// allocations of a driver's devices while it is removed: NoSchedule, so
// claims already allocated keep their devices and pods keep running.
// driverNames are all of the driver's names (recorded on the rules, so a
// removal finds them all again); apiVersion is the resource.k8s.io
// version the cluster serves the kind in.
func TaintRules(stack, driver string, driverNames []string, targets []TaintTarget, policy v1alpha1.RemovalPolicy, apiVersion string) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(targets))
	for _, t := range targets {
		selector := map[string]any{"driver": t.Driver}
		if t.Pool != "" {
			selector["pool"] = t.Pool
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apiVersion,
			"kind":       "DeviceTaintRule",
			"metadata": map[string]any{
				"name": TaintRuleName(t),
				"labels": map[string]any{
					LabelStack: stack, LabelDriver: driver, LabelComponent: ComponentRemoval, LabelManagedBy: ManagedByValue,
				},
				"annotations": map[string]any{
					AnnotationRemovalPolicy: string(policy),
					AnnotationDriverNames:   strings.Join(driverNames, ","),
				},
			},
			"spec": map[string]any{
				"deviceSelector": selector,
				"taint": map[string]any{
					"key":    TaintKey,
					"value":  driver,
					"effect": "NoSchedule",
				},
			},
		}}
		out = append(out, u)
	}
	return out
}

// RemovalPolicyOf decides the policy a removal uses. While the DRAStack
// is being deleted its entry still says (spec). Otherwise Force as soon
// as any object of the driver says Force (the README's recipe annotates
// them; one is enough, and the removal DeviceTaintRule, which outlives
// the others, cannot turn it back) or the removal already ran under Force
// (previous, from status); else what the objects say, else the previous
// policy, else Drain, the safe choice.
func RemovalPolicyOf(spec v1alpha1.RemovalPolicy, annotations []string, previous v1alpha1.RemovalPolicy) v1alpha1.RemovalPolicy {
	switch {
	case spec != "":
		return spec
	case slices.Contains(annotations, string(v1alpha1.RemovalPolicyForce)) || previous == v1alpha1.RemovalPolicyForce:
		return v1alpha1.RemovalPolicyForce
	}
	for _, a := range annotations {
		if a != "" {
			return v1alpha1.RemovalPolicy(a)
		}
	}
	if previous != "" {
		return previous
	}
	return v1alpha1.RemovalPolicyDrain
}

// ForceWarning is the Warning to emit when a Force removal deletes the
// driver's workloads while claims are still allocated on its devices: their
// pods keep running, but nothing prepares or unprepares those devices any
// more. Empty when there is nothing to warn about.
func ForceWarning(driver string, s RemovalState, step RemovalStep) string {
	if s.Policy != v1alpha1.RemovalPolicyForce || len(s.BlockingClaims) == 0 || !slices.Contains(step.Actions, ActionDeleteWorkloads) {
		return ""
	}
	return fmt.Sprintf("Force removal of driver %s deletes its plugins while %d %s still allocated on its devices: %s; their pods keep running without the driver, and the claims stay allocated until they are deleted",
		driver, len(s.BlockingClaims), plural(len(s.BlockingClaims), "claim is", "claims are"), listSome(s.BlockingClaims, 10))
}

// KeptCRDsWarning is the Warning to emit when a removal leaves the
// driver's CustomResourceDefinitions in the cluster because custom
// resources of them still exist (a Force removal): deleting a definition
// would delete them. Empty when there is nothing to warn about.
func KeptCRDsWarning(driver string, s RemovalState, step RemovalStep) string {
	if !slices.Contains(step.Actions, ActionReleaseCRDs) {
		return ""
	}
	return fmt.Sprintf("removal of driver %s keeps its %d CustomResourceDefinitions: %d custom %s of them still exist (%s); "+
		"nothing finalizes them any more, delete them (removing their finalizers) and the definitions when they are no longer needed",
		driver, s.CRDs, len(s.CustomResources), plural(len(s.CustomResources), "resource", "resources"), listSome(s.CustomResources, 10))
}
