package handover

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/ledger"
)

// Candidate is a pod kube-scheduler may have been binding when the canary
// was refused, with the claims such a binding cycle could still write.
type Candidate struct {
	Pod    *corev1.Pod
	Claims []*resourceapi.ResourceClaim
}

// ClaimLookup finds a claim by namespace and name.
type ClaimLookup func(namespace, name string) (*resourceapi.ResourceClaim, bool)

// Candidates picks the pods whose binding cycle may have begun before the
// canary's refusal and may still write an allocation: pods read from a
// cache that has delivered the refusal (so each is as new as the refusal
// or newer), claims from a consistent read made after that.
//
//   - A bound pod is done: kube-scheduler writes its claims before the
//     binding, so they are in the read.
//   - A pod with a scheduling gate has no cycle.
//   - A pod with a claim kube-controller-manager has not created yet has
//     had no cycle: kube-scheduler reads the claim's name from the pod's
//     status, and a status written after the refusal reached it after.
//   - Of the rest, the claims that are unallocated in the read are the
//     ones a cycle could write. A claim missing from the read is gone.
func Candidates(pods []*corev1.Pod, claims ClaimLookup) []Candidate {
	var out []Candidate
	for _, p := range pods {
		if p == nil || p.Spec.NodeName != "" || len(p.Spec.SchedulingGates) > 0 {
			continue
		}
		var open []*resourceapi.ResourceClaim
		unresolved := false
		for _, pc := range claimpolicy.PodClaims(p) {
			if pc.NotNeeded {
				continue
			}
			if pc.ClaimName == "" {
				unresolved = true
				break
			}
			if c, ok := claims(p.Namespace, pc.ClaimName); ok && c.Status.Allocation == nil {
				open = append(open, c)
			}
		}
		if !unresolved && len(open) > 0 {
			out = append(out, Candidate{Pod: p, Claims: open})
		}
	}
	return out
}

// ClaimRef is a claim of a waiter as the read after the refusal showed it.
type ClaimRef struct {
	Name    string
	UID     types.UID
	Version ledger.Version
}

// Waiter is a pod of a wait set: its pool does not join until it is
// resolved (Resolve).
type Waiter struct {
	Pod types.NamespacedName
	UID types.UID
	// Claims are its claims that were unallocated and could get a device
	// of the pools.
	Claims []ClaimRef
}

// WaitSet returns the candidates with a claim serves says could get a
// device of the pools being joined, and those claims.
func WaitSet(cands []Candidate, serves func(*resourceapi.ResourceClaim) bool) []Waiter {
	var out []Waiter
	for _, c := range cands {
		var refs []ClaimRef
		for _, cl := range c.Claims {
			if serves(cl) {
				refs = append(refs, ClaimRef{Name: cl.Name, UID: cl.UID, Version: ledger.ParseVersion(cl.ResourceVersion)})
			}
		}
		if len(refs) > 0 {
			out = append(out, Waiter{Pod: types.NamespacedName{Namespace: c.Pod.Namespace, Name: c.Pod.Name}, UID: c.Pod.UID, Claims: refs})
		}
	}
	return out
}

// PodNow is what the operator sees of a waiter's pod now.
type PodNow struct {
	// Pod is its state in the pod cache; nil when it is gone.
	Pod *corev1.Pod
	// RefusedAt is the version at which the operator's pod watch last saw
	// kube-scheduler write a new refusal of it (VerdictChanged); 0: none.
	RefusedAt ledger.Version
}

// ClaimNow is what the operator's ledger knows of a waiter's claim now.
type ClaimNow int

const (
	// ClaimOpen: not known to be allocated or deleted since the read.
	ClaimOpen ClaimNow = iota
	// ClaimAllocated: the ledger holds a state at or after the read's
	// that carries an allocation: whatever kube-scheduler wrote, the
	// operator counts it, and no other write can commit on the claim.
	ClaimAllocated
	// ClaimGone: the claim was deleted.
	ClaimGone
)

// Resolution says why a waiter no longer holds its pools back.
type Resolution string

// The resolutions of a waiter.
const (
	Unresolved      Resolution = ""
	ResolvedClaims  Resolution = "its claims are allocated or deleted"
	ResolvedRefused Resolution = "refused again by kube-scheduler"
)

// Resolve says whether a waiter is resolved, given the canary's refusal,
// its pod now and its claims now (in the order of w.Claims): no binding
// cycle that began before the refusal can still write an allocation that
// the operator's ledger will not show.
//
//   - Each claim is allocated in the ledger, or deleted: whatever a binding
//     cycle wrote, the ledger counts it, and it can write nothing more.
//     This covers a bound pod (kube-scheduler writes the claims before
//     the binding), and a deleted one: kube-scheduler lets the binding
//     cycle of a deleted pod run on (PreBind still writes its claims), so
//     a deleted pod alone resolves nothing; the claims of a template go
//     with their pod.
//   - Kube-scheduler refused the pod (the same pod, not one of the same
//     name) again after the canary: Refused, and its refusal was written at
//     a version after the canary's, or its status in a later second than
//     the canary's. Kube-scheduler writes a scheduling failure before its
//     next scheduling cycle starts, and a binding failure at the end of
//     that binding cycle; a pod is in at most one cycle at a time.
func Resolve(w Waiter, r Refusal, now PodNow, claims []ClaimNow) Resolution {
	done := len(claims) == len(w.Claims)
	for _, c := range claims {
		done = done && c != ClaimOpen
	}
	if done {
		return ResolvedClaims
	}
	if now.Pod != nil && now.Pod.UID == w.UID && Refused(now.Pod) &&
		(now.RefusedAt > r.Version && r.Version != 0 || laterSecond(SchedulerStatusTime(now.Pod), r.At)) {
		return ResolvedRefused
	}
	return Unresolved
}

// laterSecond: a is in a later whole second than b (both known).
func laterSecond(a, b time.Time) bool {
	return !a.IsZero() && !b.IsZero() && a.Truncate(time.Second).After(b.Truncate(time.Second))
}
