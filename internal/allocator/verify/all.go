package verify

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// checkAll checks a request for All devices: the results must be exactly the
// devices that match the request and are reachable from the node the
// allocation was made for, and no pool reachable from that node may be
// incomplete or invalid (then "all" is unknown). For an allocation made
// without a node, some known node the allocation's selector admits must
// satisfy this (with no known nodes, a node without name or labels).
func (k *check) checkAll(req *request, got []result) {
	have := make([]string, 0, len(got))
	for _, r := range got {
		have = append(have, r.id.String())
	}
	slices.Sort(have)

	var candidates []*corev1.Node
	switch {
	case k.nodeObj != nil:
		candidates = []*corev1.Node{k.nodeObj}
	case len(k.in.Nodes) == 0:
		candidates = []*corev1.Node{{}}
	default:
		for _, n := range k.in.Nodes {
			if k.alloc.NodeSelector == nil {
				candidates = append(candidates, n)
			} else if ok, _ := selectorMatches(k.alloc.NodeSelector, n); ok {
				candidates = append(candidates, n)
			}
		}
	}
	var why string
	for _, n := range candidates {
		want, blocked := k.allMatching(req, n)
		if blocked != "" {
			why = blocked
			continue
		}
		if slices.Equal(want, have) {
			return
		}
		why = fmt.Sprintf("want %s, got %s", strings.Join(want, ","), strings.Join(have, ","))
	}
	if why == "" {
		why = "no known node admitted by the allocation's node selector"
	}
	k.fail(RuleCount, "", "request %q asks for all matching devices: %s", req.name, why)
}

// allMatching lists the devices (sorted) that request req would have to get
// for "all" on node n, or says which pool makes "all" unknowable there.
func (k *check) allMatching(req *request, n *corev1.Node) ([]string, string) {
	class := k.classes[req.class]
	if class == nil {
		return nil, fmt.Sprintf("device class %q does not exist", req.class)
	}
	var want []string
	for _, p := range k.pools {
		relevant := false
		for i := range p.Devices {
			if reachable(&p.Devices[i], n) {
				relevant = true
				break
			}
		}
		if !relevant {
			continue
		}
		if !p.Allocatable() {
			return nil, fmt.Sprintf("pool %s is reachable from node %q but incomplete or invalid", p.ID, n.Name)
		}
		for i := range p.Devices {
			d := &p.Devices[i]
			if !reachable(d, n) {
				continue
			}
			if ok, _ := selectorsMatch(class.Spec.Selectors, p.Driver, d); !ok {
				continue
			}
			if ok, _ := selectorsMatch(req.selectors, p.Driver, d); !ok {
				continue
			}
			if !couldServe(req, d.Device, k.features.FractionalCapacityRange) {
				// kube-scheduler leaves out devices whose capacities could
				// not serve the request even unused (KEP-5075).
				continue
			}
			want = append(want, deviceID{p.Driver, p.Pool, d.Device.Name}.String())
		}
	}
	slices.Sort(want)
	return want, ""
}
