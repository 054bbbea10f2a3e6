package topology

import (
	"fmt"
	"slices"
	"strings"
)

// Host is the node at one grid position.
type Host struct {
	// Node is the Node object's name. One-host devices name it in nodeName
	// and the hosts attribute lists it.
	Node string
	// Hostname is the node's kubernetes.io/hostname label, which multi-host
	// devices select on (a node selector can match several nodes only
	// through labels). Empty means the same as Node, as on most clusters.
	Hostname string
}

// hostname is the kubernetes.io/hostname value to select the host by.
func (h Host) hostname() string {
	if h.Hostname != "" {
		return h.Hostname
	}
	return h.Node
}

// HostEntry is one node as the publisher sees it: its names and the raw
// value of its coordinates label.
type HostEntry struct {
	// Node and Hostname mean what they mean in Host.
	Node     string
	Hostname string
	// Coordinates is the coordinates label value, e.g. "1.0".
	Coordinates string
}

// HostMap is the hosts of one pool by grid position, with the problems
// found while building it. A position missing from Hosts has no usable host.
type HostMap struct {
	Hosts map[Coord]Host
	// Problems found while building Hosts; Generate copies them into its
	// summary so that the caller reports one list.
	Problems []Problem
}

// ProblemReason says what is wrong with the hosts of a pool. These are
// topology findings, reported on the DRAStack; pool health reasons are the
// ones of internal/pool.
type ProblemReason string

const (
	// ReasonMissingHost: no usable host at a grid position.
	ReasonMissingHost ProblemReason = "MissingHost"
	// ReasonDuplicateCoordinates: several nodes claim one grid position;
	// none of them is used, since picking one would be a guess.
	ReasonDuplicateCoordinates ProblemReason = "DuplicateCoordinates"
	// ReasonCoordinatesOutOfGrid: a node's coordinates are outside the grid.
	ReasonCoordinatesOutOfGrid ProblemReason = "CoordinatesOutOfGrid"
	// ReasonInvalidCoordinates: a node's coordinates label does not parse.
	ReasonInvalidCoordinates ProblemReason = "InvalidCoordinates"
	// ReasonDuplicateHost: one node name or hostname at several positions;
	// none of those positions is used.
	ReasonDuplicateHost ProblemReason = "DuplicateHost"
	// ReasonInvalidHost: a node name or hostname that cannot appear in a
	// ResourceSlice (not a valid name, or too long for an attribute value).
	ReasonInvalidHost ProblemReason = "InvalidHost"
	// ReasonPoolWithheld: the MissingHosts policy is Withhold and the grid
	// is incomplete, so nothing is published for the pool.
	ReasonPoolWithheld ProblemReason = "PoolWithheld"
)

// Problem is one finding about the hosts of a pool.
type Problem struct {
	Reason ProblemReason
	// Node and Coordinates locate the problem when it has one place.
	Node        string
	Coordinates string
	Message     string
}

func (p Problem) String() string { return string(p.Reason) + ": " + p.Message }

// sortProblems orders problems by reason, coordinates, node, message so
// that summaries are deterministic.
func sortProblems(ps []Problem) {
	slices.SortFunc(ps, func(a, b Problem) int {
		if c := strings.Compare(string(a.Reason), string(b.Reason)); c != 0 {
			return c
		}
		if c := strings.Compare(a.Coordinates, b.Coordinates); c != 0 {
			return c
		}
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
}

// BuildHosts places nodes on a grid of hostGrid hosts by their coordinates
// label. Nodes whose coordinates do not parse or fall outside the grid are
// left out; a position claimed by several nodes is left empty; a node listed
// more than once is left out. Each case is a problem, never an error: node
// labels are data that may be wrong for a while, and the MissingHosts policy
// decides what to publish. The error is for an invalid grid only.
func BuildHosts(hostGrid []int, entries []HostEntry) (HostMap, error) {
	dims := len(hostGrid)
	if err := checkGrid("host grid", hostGrid); err != nil {
		return HostMap{}, err
	}
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b HostEntry) int { return strings.Compare(a.Node, b.Node) })

	hm := HostMap{Hosts: map[Coord]Host{}}
	nodeCount := map[string]int{}
	for _, e := range sorted {
		nodeCount[e.Node]++
	}
	claims := map[Coord][]string{}
	var order []Coord
	for i, e := range sorted {
		if nodeCount[e.Node] > 1 {
			if i == 0 || sorted[i-1].Node != e.Node {
				hm.Problems = append(hm.Problems, Problem{
					Reason: ReasonDuplicateHost, Node: e.Node,
					Message: fmt.Sprintf("node %s is listed %d times; it is left out", e.Node, nodeCount[e.Node]),
				})
			}
			continue
		}
		c, err := ParseCoords(e.Coordinates, dims)
		if err != nil {
			hm.Problems = append(hm.Problems, Problem{
				Reason: ReasonInvalidCoordinates, Node: e.Node, Coordinates: e.Coordinates,
				Message: fmt.Sprintf("node %s: %v", e.Node, err),
			})
			continue
		}
		if !inGrid(c, hostGrid) {
			hm.Problems = append(hm.Problems, Problem{
				Reason: ReasonCoordinatesOutOfGrid, Node: e.Node, Coordinates: e.Coordinates,
				Message: fmt.Sprintf("node %s has coordinates %s outside the %s host grid",
					e.Node, e.Coordinates, formatShape(toCoord(hostGrid), dims)),
			})
			continue
		}
		if _, seen := claims[c]; !seen {
			order = append(order, c)
		}
		claims[c] = append(claims[c], e.Node)
		if len(claims[c]) == 1 {
			hm.Hosts[c] = Host{Node: e.Node, Hostname: e.Hostname}
		}
	}
	for _, c := range order {
		nodes := claims[c]
		if len(nodes) < 2 {
			continue
		}
		delete(hm.Hosts, c)
		hm.Problems = append(hm.Problems, Problem{
			Reason: ReasonDuplicateCoordinates, Node: strings.Join(nodes, ","), Coordinates: FormatCoords(c, dims),
			Message: fmt.Sprintf("nodes %s all claim coordinates %s; the position is left empty",
				strings.Join(nodes, ", "), FormatCoords(c, dims)),
		})
	}
	sortProblems(hm.Problems)
	return hm, nil
}

// inGrid reports whether c lies in a grid of the given size.
func inGrid(c Coord, grid []int) bool {
	for d := 0; d < MaxDims; d++ {
		limit := 1
		if d < len(grid) {
			limit = grid[d]
		}
		if c[d] < 0 || c[d] >= limit {
			return false
		}
	}
	return true
}

// toCoord copies a per-dimension slice into a Coord.
func toCoord(v []int) Coord {
	var c Coord
	copy(c[:], v)
	return c
}

// FullHostMap puts a node at every position of a grid, named by nodeName
// from the position's coordinates ("1.0"). It is for callers without real
// nodes (benchmarks, demos, tests) that want a complete pool from Generate.
func FullHostMap(hostGrid []int, nodeName func(coords string) string) (HostMap, error) {
	if err := checkGrid("host grid", hostGrid); err != nil {
		return HostMap{}, err
	}
	hm := HostMap{Hosts: map[Coord]Host{}}
	forEach(Coord{}, toGrid(hostGrid), func(c Coord) {
		hm.Hosts[c] = Host{Node: nodeName(FormatCoords(c, len(hostGrid)))}
	})
	return hm, nil
}

// toGrid turns a per-dimension size list into a Coord with 1 in the
// dimensions the grid does not have, so that forEach visits it.
func toGrid(v []int) Coord {
	c := Coord{1, 1, 1}
	copy(c[:], v)
	return c
}
