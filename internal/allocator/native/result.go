package native

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// results turns the devices the search chose into one Result per claim,
// shaped like kube-scheduler's: devices in the order they were chosen,
// class config once per class (naming the requests that use it), claim
// config for the requests it names, and the node selector.
func (s *Session) results(p *plan, x *search, node int) []allocator.Result {
	out := make([]allocator.Result, len(p.claims))
	for ci, claim := range p.claims {
		alloc := &resourceapi.AllocationResult{}
		var devs []int32
		for _, ch := range x.chosen {
			sl := &p.slots[ch.slot]
			if sl.claim != ci {
				continue
			}
			sb := &sl.subs[ch.sub]
			dev := &s.devs[ch.dev]
			r := resourceapi.DeviceRequestAllocationResult{
				Request:     sb.name,
				Driver:      dev.id.driver,
				Pool:        dev.id.pool,
				Device:      dev.id.device,
				Tolerations: slices.Clone(sb.tolerations),
			}
			if s.f.OptionalNodeOperations {
				r.SkipNodeOperations = slices.Clone(dev.slice.Spec.SkipNodeOperations)
			}
			if s.f.BindingAndStatus() {
				r.BindingConditions = slices.Clone(dev.dev.BindingConditions)
				r.BindingFailureConditions = slices.Clone(dev.dev.BindingFailureConditions)
			}
			if sb.admin {
				r.AdminAccess = ptr.To(true)
			}
			if dev.multi {
				r.ShareID = shareID(allocator.ClaimKey(claim)+"/"+string(claim.UID), sb.name, dev.id, shareOrdinal(alloc.Devices.Results, dev.id))
				r.ConsumedCapacity = consumedMap(dev.caps, s.fit(sb, ch.dev))
			}
			alloc.Devices.Results = append(alloc.Devices.Results, r)
			devs = append(devs, ch.dev)
		}
		alloc.Devices.Config = s.configs(p, x, ci)
		nodeName := ""
		if node >= 0 {
			nodeName = s.nodes[node].Name
		}
		var pinned bool
		alloc.NodeSelector, pinned = s.nodeSelector(devs, nodeName)
		res := allocator.Result{Claim: claim, Allocation: alloc}
		if pinned {
			res.Node = nodeName
		}
		out[ci] = res
	}
	return out
}

// configs collects the class and claim configuration for claim ci.
func (s *Session) configs(p *plan, x *search, ci int) []resourceapi.DeviceAllocationConfiguration {
	claim := p.claims[ci]
	if len(claim.Spec.Devices.Config) == 0 && !p.classConfig(x, ci) {
		return nil
	}
	var out []resourceapi.DeviceAllocationConfiguration
	chosenNames := map[int]string{} // request index -> "req" or "req/sub"
	type span struct{ start, end int }
	byClass := map[string]span{}
	for i := range p.slots {
		sl := &p.slots[i]
		if sl.claim != ci {
			continue
		}
		sb := &sl.subs[x.subChoice[i]]
		chosenNames[sl.req] = sb.name
		if sp, ok := byClass[sb.class.Name]; ok {
			for j := sp.start; j < sp.end; j++ {
				out[j].Requests = append(out[j].Requests, sb.name)
			}
			continue
		}
		start := len(out)
		for _, c := range sb.class.Spec.Config {
			out = append(out, resourceapi.DeviceAllocationConfiguration{
				Source:              resourceapi.AllocationConfigSourceClass,
				Requests:            []string{sb.name},
				DeviceConfiguration: *c.DeviceConfiguration.DeepCopy(),
			})
		}
		byClass[sb.class.Name] = span{start, len(out)}
	}
	for _, c := range claim.Spec.Devices.Config {
		applies := len(c.Requests) == 0
		for ri, r := range claim.Spec.Devices.Requests {
			if slices.Contains(c.Requests, r.Name) || (len(r.FirstAvailable) > 0 && slices.Contains(c.Requests, chosenNames[ri])) {
				applies = true
				break
			}
		}
		if applies {
			out = append(out, resourceapi.DeviceAllocationConfiguration{
				Source:              resourceapi.AllocationConfigSourceClaim,
				Requests:            slices.Clone(c.Requests),
				DeviceConfiguration: *c.DeviceConfiguration.DeepCopy(),
			})
		}
	}
	// A configuration that names every request applies to all: say so
	// with an empty list, as kube-scheduler does.
	for i := range out {
		if len(out[i].Requests) == 0 {
			continue
		}
		all := true
		for ri, r := range claim.Spec.Devices.Requests {
			if !slices.Contains(out[i].Requests, r.Name) && !slices.Contains(out[i].Requests, chosenNames[ri]) {
				all = false
				break
			}
		}
		if all {
			out[i].Requests = nil
		}
	}
	return out
}

// classConfig reports whether a class chosen for claim ci has config.
func (p *plan) classConfig(x *search, ci int) bool {
	for i := range p.slots {
		if p.slots[i].claim == ci && len(p.slots[i].subs[x.subChoice[i]].class.Spec.Config) > 0 {
			return true
		}
	}
	return false
}

// nodeSelector is where the allocated devices are available: the node
// itself when a device is node-local (or binds to the node), otherwise the
// requirements of all device or slice selectors merged into one term, or
// nil when every device is available everywhere. pinned reports the first
// case.
func (s *Session) nodeSelector(devs []int32, node string) (*corev1.NodeSelector, bool) {
	term := corev1.NodeSelectorTerm{}
	for _, d := range devs {
		dev := &s.devs[d]
		if dev.node != "" || ptr.Deref(dev.dev.BindsToNode, false) {
			return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}},
			}}}, true
		}
		if dev.sel < 0 {
			continue
		}
		ns := s.nodeSelectorOf(dev)
		if ns == nil || len(ns.NodeSelectorTerms) != 1 {
			// Validation allows exactly one term; more cannot be merged.
			continue
		}
		addRequirements(&term.MatchFields, ns.NodeSelectorTerms[0].MatchFields)
		addRequirements(&term.MatchExpressions, ns.NodeSelectorTerms[0].MatchExpressions)
	}
	if len(term.MatchFields) == 0 && len(term.MatchExpressions) == 0 {
		return nil, false
	}
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}, false
}

func (s *Session) nodeSelectorOf(dev *device) *corev1.NodeSelector {
	if ptr.Deref(dev.slice.Spec.PerDeviceNodeSelection, false) {
		return dev.dev.NodeSelector
	}
	return dev.slice.Spec.NodeSelector
}

func addRequirements(to *[]corev1.NodeSelectorRequirement, from []corev1.NodeSelectorRequirement) {
	for _, r := range from {
		dup := false
		for _, have := range *to {
			if have.Key == r.Key && have.Operator == r.Operator && sets.New(have.Values...).Equal(sets.New(r.Values...)) {
				dup = true
				break
			}
		}
		if !dup {
			*to = append(*to, *r.DeepCopy())
		}
	}
}

// shareOrdinal counts the shares of device id among results so far, so that
// two requests of one claim sharing a device get different share IDs.
func shareOrdinal(results []resourceapi.DeviceRequestAllocationResult, id deviceID) int {
	n := 0
	for _, r := range results {
		if r.Driver == id.driver && r.Pool == id.pool && r.Device == id.device {
			n++
		}
	}
	return n
}
