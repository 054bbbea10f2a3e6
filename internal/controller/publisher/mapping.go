package publisher

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/stack"
	"github.com/drastack/drastack/internal/topology"
)

// Reasons of the problems the publisher itself finds, next to the
// topology.ProblemReason values of internal/topology. They start every
// line of status.multiHost[].problems that they describe.
const (
	// ReasonInvalidNodeSelector: the entry's nodeSelector does not parse,
	// so no node can be selected and nothing is published.
	ReasonInvalidNodeSelector = "InvalidNodeSelector"
	// ReasonMissingDomainLabel: a node matches an explicit nodeSelector but
	// has no (or an empty) domain label, so it belongs to no pool.
	ReasonMissingDomainLabel = "MissingDomainLabel"
	// ReasonNodeUnschedulable: a host is cordoned or being deleted; its
	// grid position counts as missing.
	ReasonNodeUnschedulable = "NodeUnschedulable"
	// ReasonInvalidTopology: internal/topology rejected the entry (grid,
	// shapes, attributes or names); nothing is published for it.
	ReasonInvalidTopology = "InvalidTopology"
	// ReasonPoolNameConflict: two domains of one driver map to the same
	// pool name; neither pool is published.
	ReasonPoolNameConflict = "PoolNameConflict"
	// ReasonHostConflict: an earlier entry of the same driver selects some
	// of the entry's hosts, or publishes one of its pool names; nothing is
	// published for the later entry. The whole-spec check refuses such a
	// spec before the publisher sees it; this keeps a chip from ever being
	// two devices should the two disagree about the nodes for a moment.
	ReasonHostConflict = "HostConflict"
	// ReasonNoNodes: no selected node carries the domain label, so the
	// entry has no pool. Informational: a cluster may not have the
	// hardware yet.
	ReasonNoNodes = "NoNodes"
)

// DomainPool is the pool of one domain of an entry, ready for
// topology.Generate.
type DomainPool struct {
	// Domain is the raw value of the domain label.
	Domain string
	// Spec describes the pool; Spec.Pool is its name.
	Spec topology.Spec
}

// EntryPlan is what one spec.multiHost entry maps to, before generation.
type EntryPlan struct {
	// Entry and Driver are the entry's name and driver.
	Entry  string
	Driver string
	// Pools, one per domain, sorted by pool name.
	Pools []DomainPool
	// Problems found while mapping nodes (reason first), sorted. Problems
	// with the hosts of a grid come later, from topology.Generate.
	Problems []string
	// Invalid is set when the entry cannot be mapped at all; Pools is then
	// empty and Invalid is the reason.
	Invalid string
}

// MapEntry maps one spec.multiHost entry and the cluster's nodes to one
// topology.Spec per domain. It is pure: it reads its arguments only, so the
// reconciler and tests give it the same answer for the same nodes.
//
// A node takes part when it matches the nodeSelector (nil: every node) and
// has a non-empty domain label. Its hostname is its kubernetes.io/hostname
// label (default: its name), and its grid position the coordinates label,
// parsed and checked by topology.BuildHosts. A node that is cordoned or
// being deleted is left out of the grid, so its position is missing.
func MapEntry(entry *v1alpha1.MultiHostSpec, nodes []corev1.Node) EntryPlan {
	plan := EntryPlan{Entry: entry.Name, Driver: entry.Driver}
	explicit := entry.NodeSelector != nil && (len(entry.NodeSelector.MatchLabels) > 0 || len(entry.NodeSelector.MatchExpressions) > 0)
	selector, err := stack.MultiHostSelector(entry)
	if err != nil {
		plan.Invalid = fmt.Sprintf("%s: %v", ReasonInvalidNodeSelector, err)
		plan.Problems = []string{plan.Invalid}
		return plan
	}
	hostGrid := toInts(entry.HostGrid)

	byDomain := map[string][]topology.HostEntry{}
	var unlabelled []string
	for i := range nodes {
		node := &nodes[i]
		if !selector.Matches(labels.Set(node.Labels)) {
			continue
		}
		domain := stack.MultiHostDomain(entry, selector, node)
		if domain == "" {
			if explicit {
				unlabelled = append(unlabelled, node.Name)
			}
			continue
		}
		if _, ok := byDomain[domain]; !ok {
			byDomain[domain] = nil
		}
		coords := node.Labels[entry.CoordinatesLabel]
		if why := unusable(node); why != "" {
			plan.Problems = append(plan.Problems, fmt.Sprintf("%s: pool %s: node %s (coordinates %q) %s; its position counts as missing",
				ReasonNodeUnschedulable, stack.PoolName(entry.Name, domain), node.Name, coords, why))
			continue
		}
		hostname := node.Labels[corev1.LabelHostname]
		if hostname == "" {
			hostname = node.Name
		}
		byDomain[domain] = append(byDomain[domain], topology.HostEntry{Node: node.Name, Hostname: hostname, Coordinates: coords})
	}

	if len(unlabelled) > 0 {
		slices.Sort(unlabelled)
		plan.Problems = append(plan.Problems, fmt.Sprintf("%s: %s selected by the nodeSelector without a %s label, so in no pool",
			ReasonMissingDomainLabel, listNames("node", unlabelled), entry.DomainLabel))
	}
	for _, domain := range slices.Sorted(maps.Keys(byDomain)) {
		hosts, err := topology.BuildHosts(hostGrid, byDomain[domain])
		if err != nil {
			plan.Invalid = fmt.Sprintf("%s: %v", ReasonInvalidTopology, err)
			plan.Pools = nil
			plan.Problems = append(plan.Problems, plan.Invalid)
			break
		}
		plan.Pools = append(plan.Pools, DomainPool{Domain: domain, Spec: topology.Spec{
			Driver:       entry.Driver,
			Pool:         stack.PoolName(entry.Name, domain),
			Domain:       domain,
			HostGrid:     hostGrid,
			ChipsPerHost: toInts(entry.ChipsPerHost),
			Partitions:   slices.Clone(entry.Partitions),
			Attributes:   maps.Clone(entry.Attributes),
			Hosts:        hosts,
			MissingHosts: missingHostPolicy(entry.MissingHostPolicy),
		}})
	}
	slices.SortFunc(plan.Pools, func(a, b DomainPool) int { return strings.Compare(a.Spec.Pool, b.Spec.Pool) })
	if len(byDomain) == 0 && plan.Invalid == "" {
		plan.Problems = append(plan.Problems, fmt.Sprintf("%s: no selected node has a %s label", ReasonNoNodes, entry.DomainLabel))
	}
	slices.Sort(plan.Problems)
	return plan
}

// unusable says why a selected node cannot be a host now, or "".
func unusable(node *corev1.Node) string {
	switch {
	case node.DeletionTimestamp != nil:
		return "is being deleted"
	case node.Spec.Unschedulable:
		return "is unschedulable (cordoned)"
	}
	return ""
}

// missingHostPolicy maps the API enum onto topology's; empty (an object
// written without the CRD default) means Withhold, as in the API.
func missingHostPolicy(p v1alpha1.MissingHostPolicy) topology.MissingHostPolicy {
	if p == v1alpha1.MissingHostPublishAvailable {
		return topology.PublishAvailable
	}
	if p == "" {
		return topology.Withhold
	}
	// An unknown value reaches topology, which rejects it with a reason.
	return topology.MissingHostPolicy(p)
}

func toInts(v []int32) []int {
	out := make([]int, len(v))
	for i, n := range v {
		out[i] = int(n)
	}
	return out
}
