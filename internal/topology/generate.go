package topology

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"

	"github.com/drastack/drastack/internal/pool"
)

// Result is what Generate computed for one pool.
type Result struct {
	// Slices to publish: counter slices, then device slices, all of the
	// same pool generation. Empty when the pool is withheld: the publisher
	// must then remove whatever it published for the pool before.
	Slices []*resourceapi.ResourceSlice
	// Summary is what the publisher reports in DRAStack status.
	Summary Summary
}

// Summary describes a generated pool for status and logs.
type Summary struct {
	Driver     string
	Pool       string
	Generation int64
	// Withheld is true when nothing is published because hosts are missing
	// and the policy is Withhold.
	Withheld bool
	// GridHosts is the number of grid positions; Hosts those with a usable
	// host.
	GridHosts int
	Hosts     int
	// Devices, CounterSets and Slices are what Slices holds.
	Devices     int
	CounterSets int
	Slices      int
	// Shapes in device order (smallest first).
	Shapes []ShapeSummary
	// Problems with the hosts, including those of the HostMap, sorted.
	Problems []Problem
}

// ShapeSummary describes one partition shape of the pool.
type ShapeSummary struct {
	Shape string
	// Chips and Hosts of one device of the shape.
	Chips int
	Hosts int
	// Placements on the full grid; Devices of them are published.
	Placements int
	Devices    int
}

// Generate computes the slices of one multi-host pool at the given pool
// generation. An invalid spec (bad names, a shape that breaks the alignment
// rule or an API limit) is an error naming every reason. Problems with the
// hosts are not errors: they are in the summary, and spec.MissingHosts
// decides whether the pool is withheld or published with the devices whose
// hosts all exist. The slices are checked with internal/pool before they
// are returned; a finding there is a bug of this package and an error.
func Generate(spec Spec, generation int64) (*Result, error) {
	p, err := newPlan(&spec)
	if err != nil {
		return nil, err
	}
	if generation < 0 {
		return nil, fmt.Errorf("pool %q: generation %d is negative", spec.Pool, generation)
	}
	block, err := p.chooseBlock()
	if err != nil {
		return nil, fmt.Errorf("invalid multi-host spec for pool %q: %w", spec.Pool, err)
	}

	hosts, problems := p.usableHosts(spec.Hosts)
	sum := Summary{
		Driver:     spec.Driver,
		Pool:       spec.Pool,
		Generation: generation,
		GridHosts:  p.hostGrid[0] * p.hostGrid[1] * p.hostGrid[2],
		Hosts:      len(hosts),
	}
	res := &Result{}
	missing := sum.GridHosts - sum.Hosts
	if missing > 0 && p.policy == Withhold {
		problems = append(problems, Problem{
			Reason:  ReasonPoolWithheld,
			Message: fmt.Sprintf("pool %s is withheld: %d of %d hosts are missing and the policy is %s", spec.Pool, missing, sum.GridHosts, Withhold),
		})
		sum.Withheld = true
		sum.Shapes = p.shapeSummaries(nil)
	} else {
		sets := p.counterSets(block, hosts)
		devices, published := p.devices(block, hosts)
		res.Slices = p.slices(generation, sets, devices)
		if err := checkPool(res.Slices); err != nil {
			return nil, fmt.Errorf("pool %q: generated slices are invalid (a bug in the topology package): %w", spec.Pool, err)
		}
		sum.Devices, sum.CounterSets, sum.Slices = len(devices), len(sets), len(res.Slices)
		sum.Shapes = p.shapeSummaries(published)
	}
	sortProblems(problems)
	sum.Problems = problems
	res.Summary = sum
	return res, nil
}

// shapeSummaries reports every shape with its published device count.
func (p *plan) shapeSummaries(published []int) []ShapeSummary {
	out := make([]ShapeSummary, len(p.shapes))
	for i, si := range p.shapes {
		out[i] = ShapeSummary{Shape: si.name, Chips: si.chips, Hosts: si.hosts, Placements: si.placements}
		if published != nil {
			out[i].Devices = published[i]
		}
	}
	return out
}

// usableHosts returns the hosts that can appear in slices, and the problems
// of the HostMap plus those found here: positions outside the grid, names
// that are not valid in a slice, a node or hostname at several positions
// (all of them dropped), and every position left without a host.
func (p *plan) usableHosts(hm HostMap) (map[Coord]Host, []Problem) {
	problems := append([]Problem(nil), hm.Problems...)
	hosts := make(map[Coord]Host, len(hm.Hosts))
	byNode := map[string][]Coord{}
	byHostname := map[string][]Coord{}
	for c, h := range hm.Hosts {
		at := FormatCoords(c, p.dims)
		if !inGrid(c, p.spec.HostGrid) {
			// Show every coordinate that puts the host outside the grid,
			// extra dimensions included.
			for d := p.dims; d < MaxDims; d++ {
				if c[d] != 0 {
					at = FormatCoords(c, d+1)
				}
			}
			problems = append(problems, Problem{Reason: ReasonCoordinatesOutOfGrid, Node: h.Node, Coordinates: at,
				Message: fmt.Sprintf("node %s has coordinates %s outside the %s host grid", h.Node, at, formatShape(p.hostGrid, p.dims))})
			continue
		}
		if reason := p.invalidHost(h); reason != "" {
			problems = append(problems, Problem{Reason: ReasonInvalidHost, Node: h.Node, Coordinates: at,
				Message: fmt.Sprintf("host at %s: %s; the position is treated as missing", at, reason)})
			continue
		}
		hosts[c] = h
		byNode[h.Node] = append(byNode[h.Node], c)
		byHostname[h.hostname()] = append(byHostname[h.hostname()], c)
	}
	// Node names first: a node at two positions has a duplicate hostname
	// too, and is reported once.
	for _, index := range []struct {
		what  string
		names map[string][]Coord
	}{{"node", byNode}, {"hostname", byHostname}} {
		what := index.what
		for name, all := range index.names {
			var at []Coord
			for _, c := range all {
				if _, ok := hosts[c]; ok {
					at = append(at, c)
				}
			}
			if len(at) < 2 {
				continue
			}
			spelled := make([]string, len(at))
			for i, c := range at {
				spelled[i] = FormatCoords(c, p.dims)
				delete(hosts, c)
			}
			slices.Sort(spelled)
			problems = append(problems, Problem{Reason: ReasonDuplicateHost, Node: name, Coordinates: strings.Join(spelled, ","),
				Message: fmt.Sprintf("%s %s is at coordinates %s; none of these positions is used", what, name, strings.Join(spelled, ", "))})
		}
	}
	forEach(Coord{}, p.hostGrid, func(c Coord) {
		if _, ok := hosts[c]; !ok {
			at := FormatCoords(c, p.dims)
			problems = append(problems, Problem{Reason: ReasonMissingHost, Coordinates: at,
				Message: fmt.Sprintf("no usable host at coordinates %s", at)})
		}
	})
	return hosts, problems
}

// invalidHost says why a host cannot be written into a slice, or "".
func (p *plan) invalidHost(h Host) string {
	if h.Node == "" {
		return "the node name is empty"
	}
	if msgs := content.IsDNS1123Subdomain(h.Node); len(msgs) > 0 {
		return fmt.Sprintf("node name %q is not valid: %s", h.Node, strings.Join(msgs, "; "))
	}
	if msgs := content.IsLabelValue(h.hostname()); len(msgs) > 0 {
		return fmt.Sprintf("hostname %q is not a valid label value: %s", h.hostname(), strings.Join(msgs, "; "))
	}
	if !p.spec.OmitHostsAttribute && len(h.Node) > maxAttributeValueLength {
		return fmt.Sprintf("node name %q is longer than %d characters and cannot be listed in the %q attribute", h.Node, maxAttributeValueLength, AttrHosts)
	}
	return ""
}

// checkPool validates the slices with internal/pool, the same validator
// that judges published pools: the pool must be complete and free of any
// problem, warnings (API limits) included.
func checkPool(slices []*resourceapi.ResourceSlice) error {
	if len(slices) == 0 {
		return fmt.Errorf("no slices")
	}
	id := pool.KeyOf(slices[0])
	p := pool.Build(id, slices)
	if p == nil {
		return fmt.Errorf("pool %s: no slices", id)
	}
	if !p.Complete() {
		return fmt.Errorf("pool %s is incomplete: %d of %d slices", id, len(p.Slices), p.ExpectedSlices)
	}
	if len(p.Problems) > 0 {
		msgs := make([]string, len(p.Problems))
		for i, pr := range p.Problems {
			msgs[i] = fmt.Sprintf("%s %s: %s", pr.Severity, pr.Reason, pr.Message)
		}
		return fmt.Errorf("pool %s: %s", id, strings.Join(msgs, "; "))
	}
	return nil
}
