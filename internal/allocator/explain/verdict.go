package explain

import (
	"fmt"
	"strings"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
)

// maxNamed bounds the claims or nodes a verdict names.
const maxNamed = 3

// verdict is the one line of a report: where the claims go, or the
// closest miss (the group whose funnels got furthest) and its obstacle.
func verdict(r *Report) string {
	if r.Fits {
		where := "with devices that need no node"
		if r.Node != "" {
			where = "on " + r.Node
		}
		return fmt.Sprintf("fits %s: %s", where, strings.Join(r.Devices, ", "))
	}
	if len(r.Groups) == 0 {
		return strings.TrimPrefix(r.Reason, allocator.ErrUnsatisfiable.Error()+": ")
	}
	best, bestScore := 0, -1
	for i := range r.Groups {
		if sc := progress(&r.Groups[i]); sc > bestScore {
			best, bestScore = i, sc
		}
	}
	g := &r.Groups[best]
	r.Closest = g.Nodes
	where := "without a node"
	if len(g.Nodes) > 0 {
		where = "on " + names(g.Nodes)
	}
	v := ""
	for _, q := range g.Requests {
		if i := failsAt(q); i < len(q.Steps) {
			v = obstacle(q, i, where)
			break
		}
	}
	if v == "" {
		// Every request has enough candidates: a constraint or the
		// combination failed; the engine's message says which.
		msg := g.Message
		if _, after, ok := strings.Cut(msg, " on node "+firstNode(g)+": "); ok {
			msg = after
		} else {
			msg = strings.TrimPrefix(msg, allocator.ErrUnsatisfiable.Error()+": ")
		}
		v = fmt.Sprintf("enough devices for every request %s, but %s", where, msg)
	}
	if len(g.SkippedPools) > 0 {
		var p []string
		for _, sp := range g.SkippedPools {
			p = append(p, fmt.Sprintf("%s (%s)", sp.Pool, sp.Why))
		}
		v += "; pools not used: " + names(p)
	}
	if len(r.NodeFilters) > 0 {
		v += "; node filters: " + r.FilterSummary
	}
	if r.StoppedEarly != "" {
		v += " (" + r.StoppedEarly + ")"
	}
	return v
}

// need is how many candidates a request needs (All: at least one).
func need(q Request) int { return max(q.Count, 1) }

// failsAt is the index of the first step that leaves fewer candidates than
// the request needs, len(q.Steps) when none does.
func failsAt(q Request) int {
	if q.Error != "" {
		return 0
	}
	for i, s := range q.Steps {
		if s.Left < need(q) {
			return i
		}
	}
	return len(q.Steps)
}

// progress scores how far the funnels of a group got: steps passed, summed
// over requests (for a firstAvailable request, its best subrequest), with
// the candidates left at the failing step (after the last step when none
// fails, as when a constraint is what fails), then unused pools, breaking
// ties.
func progress(g *NodeGroup) int {
	best := map[string]int{}
	var order []string
	for _, q := range g.Requests {
		k := q.Claim + " " + strings.SplitN(q.Request, "/", 2)[0]
		i := failsAt(q)
		sc := i * 1000
		if len(q.Steps) > 0 {
			sc += min(q.Steps[min(i, len(q.Steps)-1)].Left, 999)
		}
		if old, ok := best[k]; !ok || sc > old {
			if !ok {
				order = append(order, k)
			}
			best[k] = sc
		}
	}
	total := 0
	for _, k := range order {
		total += best[k]
	}
	if g.Fits {
		total += 1 << 30
	}
	// On a tie, the nodes that see an unused pool: it may hold what the
	// claim is after.
	total *= 2
	if len(g.SkippedPools) > 0 {
		total++
	}
	return total
}

// obstacle describes step i of request q, the first one that leaves too few.
func obstacle(q Request, i int, where string) string {
	if q.Error != "" {
		return fmt.Sprintf("request %s %s: %s", q.Request, where, q.Error)
	}
	s := q.Steps[i]
	needed := fmt.Sprintf("%d needed", need(q))
	if q.Count == 0 {
		needed = "all needed"
	}
	if i == 0 {
		// Too few devices reachable at all: say how many there are.
		if s.Left == 0 {
			return fmt.Sprintf("request %s: no devices %s; %s", q.Request, where, needed)
		}
		return fmt.Sprintf("request %s: %d devices %s; %s", q.Request, s.Left, where, needed)
	}
	if s.Step == native.StepClassSelector {
		return fmt.Sprintf("request %s: %d devices %s, %d after class %s selector %d (%s); %s",
			q.Request, q.Steps[0].Left, where, s.Left, q.Class, *s.Selector+1, s.Expression, needed)
	}
	class := 0
	for j, st := range q.Steps {
		if st.Step == native.StepNode || st.Step == native.StepClassSelector {
			class = j
		}
	}
	return fmt.Sprintf("request %s: %d devices match the class %s, %d after %s; %s",
		q.Request, q.Steps[class].Left, where, s.Left, describe(s), needed)
}

// describe names a step for a verdict.
func describe(s Step) string {
	switch s.Step {
	case native.StepSelector:
		return fmt.Sprintf("selector %d (%s)", *s.Selector+1, s.Expression)
	case native.StepGates:
		if len(s.Reasons) == 0 {
			return "devices the feature gates refuse"
		}
		return "devices refused (" + names(s.Reasons) + ")"
	case native.StepTaints:
		return "taints not tolerated"
	case native.StepAllocated:
		if len(s.Holders) == 0 {
			return "devices already allocated"
		}
		return "devices allocated to " + names(s.Holders)
	case native.StepCounters:
		var c []string
		for _, cs := range s.Counters {
			c = append(c, fmt.Sprintf("%s counter set %s counter %s needs %s, %s left", cs.Pool, cs.CounterSet, cs.Counter, cs.Needed, cs.Left))
		}
		if len(c) == 0 {
			return "counters (a counter of the pool is over-consumed)"
		}
		return "counters (" + names(c) + ")"
	case native.StepCapacity:
		if len(s.Capacities) == 0 {
			return "capacity left on shared devices"
		}
		var c []string
		for _, cs := range s.Capacities {
			c = append(c, cs.String())
		}
		return "capacity left on shared devices (" + names(c) + ")"
	}
	return s.Step
}

// names joins a list, naming at most maxNamed.
func names(l []string) string {
	if len(l) <= maxNamed {
		return strings.Join(l, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(l[:maxNamed], ", "), len(l)-maxNamed)
}

func firstNode(g *NodeGroup) string {
	if len(g.Nodes) == 0 {
		return ""
	}
	return g.Nodes[0]
}

// String is the shortfall as verdicts and tables give it.
func (c CapacityShort) String() string {
	if c.Reason != "" {
		return c.Device + ": " + c.Reason
	}
	return fmt.Sprintf("%s capacity %s needs %s, %s left", c.Device, c.Capacity, c.Needed, c.Left)
}
