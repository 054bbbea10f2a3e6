package permissions

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/drastack/drastack/internal/admissionpolicy"
)

// reviews are the API groups of requests that are created but never stored
// (who am I, may I): not writes.
var reviews = map[string]bool{"authentication.k8s.io": true, "authorization.k8s.io": true}

// leaderElection is the Lease of controller-runtime's leader election
// (operator.LeaderElectionID), which the manager takes and renews beside
// the policy installer, not after it: no admission policy of the set
// covers Leases, so none could be in force for it. The allocation fence's
// Lease is not exempt: it is part of the claim controller's writes.
const leaderElection = "drastack.drastack.io"

// FenceFirst checks, from the audit log, that the operator wrote nothing
// before the API server enforced its admission policies, in every run:
// a run starts when the operator reads the DRAStack CRD (the first request
// of its policy installer, admissionpolicy.Installer), and the policies are
// in force from the end of the first request the probe policy refused.
// Writes of the installer itself (its policies and bindings, by name; the
// probe), dry runs and reviews (which store nothing) do not count. It returns one
// line per write made too early. The processes are told apart by their
// User-Agent (the operator names its host and process id in it), the runs
// of one process by that first read: replicas that run at once, as the
// chaos suite runs them, each wait for their own probe.
func FenceFirst(reqs []Request) []string {
	byProcess := map[string][]Request{}
	var agents []string
	for _, r := range reqs {
		if _, ok := byProcess[r.UserAgent]; !ok {
			agents = append(agents, r.UserAgent)
		}
		byProcess[r.UserAgent] = append(byProcess[r.UserAgent], r)
	}
	var out []string
	for _, a := range agents {
		out = append(out, fenceFirst(byProcess[a])...)
	}
	return out
}

// fenceFirst is FenceFirst for the requests of one process.
func fenceFirst(reqs []Request) []string {
	sorted := slices.Clone(reqs)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Received.Before(sorted[j].Received) })
	own := map[string]bool{admissionpolicy.Probe: true}
	for _, p := range admissionpolicy.Set(admissionpolicy.DefaultIdentity) {
		own[p.Policy.Name] = true
	}
	var out []string
	inForce := false
	var since Request
	for _, r := range sorted {
		switch {
		case r.Verb == "get" && r.Resource == "customresourcedefinitions" && r.Name == admissionpolicy.StackCRD:
			inForce = false
		case r.Verb == "create" && r.Group == "events.k8s.io" && strings.HasPrefix(r.Name, admissionpolicy.Probe+"-") &&
			strings.Contains(r.Message, "drastack admission probe"):
			if !inForce {
				inForce, since = true, r
			}
		case IsWrite(r.Verb) && !r.DryRun && r.Allowed && !reviews[r.Group]:
			if r.Group == "admissionregistration.k8s.io" && strings.HasPrefix(r.Resource, "validatingadmissionpolic") && own[r.Name] {
				continue
			}
			if r.Group == "coordination.k8s.io" && r.Resource == "leases" && r.Name == leaderElection {
				continue
			}
			if !inForce {
				out = append(out, fmt.Sprintf("%s %s %s/%s at %s, before the admission policies were in force",
					r.Verb, r.GroupResource(), r.Namespace, r.Name, r.Received.Format("15:04:05.000000")))
				continue
			}
			if r.Received.Before(since.Done) {
				out = append(out, fmt.Sprintf("%s %s %s/%s received at %s, before the probe's refusal at %s",
					r.Verb, r.GroupResource(), r.Namespace, r.Name, r.Received.Format("15:04:05.000000"), since.Done.Format("15:04:05.000000")))
			}
		}
	}
	return out
}
