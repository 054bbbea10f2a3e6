package driver

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Drift is how an object the operator applied before was found when it
// applied it again.
type Drift string

const (
	// DriftNone: as applied, or applied for the first time.
	DriftNone Drift = ""
	// DriftDeleted: the object was gone and was created again.
	DriftDeleted Drift = "deleted"
	// DriftChanged: someone changed fields the operator sets; applying
	// changed the object back.
	DriftChanged Drift = "changed"
)

// Applied is what the operator knows of one object around an apply.
type Applied struct {
	// Before says the operator applied this object earlier (this process),
	// PrevHash the render it applied then, Hash the render applied now.
	Before         bool
	PrevHash, Hash string
	// Existed says the object was in the cluster, labelled for the driver,
	// just before the apply; Generation and ResourceVersion were its own
	// then, the After ones are the apply's answer.
	Existed                               bool
	UID, AfterUID                         string
	Generation, AfterGeneration           int64
	ResourceVersion, AfterResourceVersion string
}

// DriftOf decides whether an apply restored an object, and how it had
// drifted. An object the render itself changed (an upgrade, a new spec) or
// applied for the first time is no drift. Kinds with a generation (policy,
// binding, DeviceClass, workloads) are compared by it, so that a status
// write between the listing and the apply is not mistaken for a change;
// the others (RBAC, ServiceAccounts) have no status and are compared by
// resourceVersion.
func DriftOf(a Applied) Drift {
	if !a.Before {
		return DriftNone
	}
	// Listed just before someone deleted it, and created again by this
	// apply: a new UID.
	if !a.Existed || (a.UID != "" && a.AfterUID != "" && a.UID != a.AfterUID) {
		return DriftDeleted
	}
	if a.PrevHash != a.Hash {
		return DriftNone
	}
	if a.Generation > 0 || a.AfterGeneration > 0 {
		if a.AfterGeneration != a.Generation {
			return DriftChanged
		}
		return DriftNone
	}
	if a.AfterResourceVersion != "" && a.AfterResourceVersion != a.ResourceVersion {
		return DriftChanged
	}
	return DriftNone
}

// conflictManager finds the manager in a server-side apply conflict cause:
// `conflict with "kubectl-client-side-apply" using resource.k8s.io/v1`.
var conflictManager = regexp.MustCompile(`conflict with "([^"]+)"`)

// DescribeConflict says why an object the operator does not own could not
// be applied: it exists, and other field managers own fields the render
// sets. causes are the API server's (Status.Details.Causes).
func DescribeConflict(causes []metav1.StatusCause) string {
	var managers, fields []string
	for _, c := range causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			continue
		}
		if m := conflictManager.FindStringSubmatch(c.Message); m != nil && !slices.Contains(managers, m[1]) {
			managers = append(managers, m[1])
		}
		if c.Field != "" && !slices.Contains(fields, c.Field) {
			fields = append(fields, c.Field)
		}
	}
	who := "someone else"
	if len(managers) > 0 {
		who = fmt.Sprintf("someone else (field %s %s)", plural(len(managers), "manager", "managers"), strings.Join(managers, ", "))
	}
	msg := "exists but is owned by " + who
	if len(fields) > 0 {
		msg += "; conflicting " + plural(len(fields), "field", "fields") + " " + listSome(fields, 5)
	}
	return msg + "; drastack does not take over an object it did not create: delete it, or choose another name in the spec"
}

// replacedKinds are the kinds whose every field is the render's: the
// admission policy, its binding and RBAC. No controller writes to them, so
// fields another manager added or took over (an edit that sets
// validationActions to Warn, a rule added to a role) are drift, and
// server-side apply alone cannot remove fields it does not own. When one of
// these has another manager, the operator replaces it with the render.
var replacedKinds = []schema.GroupKind{
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"},
	{Group: "rbac.authorization.k8s.io", Kind: "Role"},
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"},
}

// sharedKinds are the workloads whose fields other managers may
// legitimately hold (an administrator tuning a DaemonSet, a tool that adds
// tolerations): a field another manager took over is reported as
// ApplyConflict with the manager's name, not fought over, so that two
// writers never undo each other in a loop. A deleted workload is still
// created again. Every other kind the operator renders is its own alone
// (policies, bindings, RBAC, DeviceClasses, ServiceAccounts): a changed
// field is taken back with force.
var sharedKinds = []schema.GroupKind{
	{Group: "apps", Kind: "DaemonSet"},
	{Group: "apps", Kind: "Deployment"},
}

// ForcedOnDrift says whether the operator takes back, with force, a field
// of its own object of the kind that another manager took over.
func ForcedOnDrift(gk schema.GroupKind) bool {
	return !slices.Contains(sharedKinds, gk)
}

// ReplacedOnDrift says whether an object of the kind is replaced as a
// whole when another manager changed it (see replacedKinds).
func ReplacedOnDrift(gk schema.GroupKind) bool {
	return slices.Contains(replacedKinds, gk)
}

// ForeignManagers are the managers of an object's main resource other than
// the operator (self): who changed the object besides it. The operator's
// own update (the replacement itself) is not foreign, or every reconcile
// would replace again. Status and other subresources are left out.
func ForeignManagers(entries []metav1.ManagedFieldsEntry, self string) []string {
	var out []string
	for _, e := range entries {
		if e.Subresource != "" || e.Manager == self {
			continue
		}
		if !slices.Contains(out, e.Manager) {
			out = append(out, e.Manager)
		}
	}
	return out
}
