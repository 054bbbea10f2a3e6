package claims

// Gangs in the deterministic simulation: with simOptions.gangs, the
// workload's operator pods come in gangs of two (the drastack label,
// minimum count 2); pods are deleted at random as before, so some gangs
// stay incomplete. After settling, each gang is checked as one unit: I2
// (no gang is gated with members placed and others not) and I3 (a
// complete gang whose members' claims fit together is placed; a gang with
// a member whose claim is missing or being deleted cannot start, and
// waits).

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/gang"
)

var (
	simGangSeeds = flag.Int("sim.gang-seeds", 100, "seeds the allocation simulation runs with gangs")
)

// simGangMin is the minimum count of the simulation's gangs.
const simGangMin = 2

// gangPod puts an operator pod into a gang: the gang of a present pod
// that is alone in its gang, else a new one.
func (w *simWorld) gangPod(pod *corev1.Pod, operator bool) {
	if !w.opts.gangs || !operator {
		return
	}
	count := map[string]int{}
	for _, o := range w.store.list(kPod) {
		if g, ok := o.GetLabels()[gang.LabelName]; ok {
			count[g]++
		}
	}
	open := ""
	for _, g := range sortedKeys(count) {
		if count[g] < simGangMin {
			open = g
			break
		}
	}
	if open == "" {
		w.names++
		open = fmt.Sprintf("g%d", w.names)
	}
	pod.Labels = map[string]string{gang.LabelName: open}
	pod.Annotations = map[string]string{gang.AnnotationMinCount: fmt.Sprint(simGangMin)}
}

// inGang reports whether the settled checks treat the pod as part of a
// gang (checkGangs) rather than alone.
func inGang(p *corev1.Pod) bool {
	_, ok := p.Labels[gang.LabelName]
	return ok
}

// checkGangs checks I2 and I3 for each gang once the world is quiet.
func (w *simWorld) checkGangs(leader *simOperator) *violation {
	cfg := leader.r.cfg.get()
	type member struct {
		pod          *corev1.Pod
		placed, open []*resourceapi.ResourceClaim
	}
	gangs := map[string][]member{}
	present := map[string]int{}
	// gone: gangs with a member whose claim does not exist or is being
	// deleted. The member cannot start until its claim is created again,
	// so neither can its gang: the gang rightly waits (I3 does not apply).
	gone := map[string]bool{}
	for _, o := range w.store.list(kPod) {
		p := o.(*corev1.Pod)
		g, ok := p.Labels[gang.LabelName]
		if !ok || p.DeletionTimestamp != nil {
			continue
		}
		present[g]++
		if p.Spec.NodeName != "" {
			continue
		}
		m := member{pod: p}
		for _, ref := range p.Spec.ResourceClaims {
			co, ok := w.store.get(kClaim, p.Namespace+"/"+*ref.ResourceClaimName)
			if !ok || co.GetDeletionTimestamp() != nil {
				gone[g] = true
				continue
			}
			c := co.(*resourceapi.ResourceClaim)
			if claimpolicy.SelectClaim(cfg, c) == claimpolicy.WhyNone {
				continue
			}
			switch {
			case c.Status.Allocation != nil && claimpolicy.IsImmediate(cfg, c):
				// The claim loop's, allocated before any pod: not the
				// gang's to place or take back.
			case c.Status.Allocation != nil:
				m.placed = append(m.placed, c)
			default:
				m.open = append(m.open, c)
			}
		}
		gangs[g] = append(gangs[g], m)
	}
	names := make([]string, 0, len(gangs))
	for g := range gangs {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		var gatedPlaced, open []string
		var waiting []member
		for _, m := range gangs[g] {
			if len(m.placed) > 0 && claimpolicy.HasGate(m.pod) {
				gatedPlaced = append(gatedPlaced, m.pod.Name)
			}
			if len(m.open) > 0 {
				open = append(open, m.pod.Name)
				waiting = append(waiting, m)
			}
		}
		if len(gatedPlaced) > 0 && len(open) > 0 {
			return &violation{step: w.step, what: fmt.Sprintf("gang %s is placed in part: %v gated with claims allocated, %v with claims not", g, gatedPlaced, open)}
		}
		if len(waiting) == 0 || present[g] < simGangMin || gone[g] {
			continue
		}
		var claims [][]*resourceapi.ResourceClaim
		for _, m := range waiting {
			claims = append(claims, m.open)
		}
		if w.gangPlaceable(leader, g, claims) {
			return &violation{step: w.step, what: fmt.Sprintf("gang %s waits (pods %v) although its claims fit together", g, open)}
		}
	}
	return nil
}

// gangPlaceable asks the engine, on the settled state as the operator
// sees it, whether the members' claims fit together.
func (w *simWorld) gangPlaceable(op *simOperator, name string, members [][]*resourceapi.ResourceClaim) bool {
	sess, ok := w.settledSession(op)
	if !ok {
		return false
	}
	g := allocator.Gang{Name: simNS + "/" + name}
	for i, claims := range members {
		m := allocator.GangMember{Name: fmt.Sprint(i)}
		for _, c := range claims {
			scoped, _ := op.r.scoped(op.r.cfg.get(), c)
			m.Claims = append(m.Claims, scoped)
		}
		for n := range simNodes {
			m.Nodes = append(m.Nodes, simNode(n))
		}
		g.Members = append(g.Members, m)
	}
	_, err := sess.(allocator.GangSession).AllocateGang(context.Background(), g, allocator.Options{})
	return err == nil
}

// TestSimulationGangs is TestSimulation with gangs in the workload.
func TestSimulationGangs(t *testing.T) {
	opts := simFullOptions()
	opts.gangs = true
	if *simSeed != 0 {
		w := newSimWorld(*simSeed, opts)
		v := w.run()
		t.Logf("seed %d: %d steps\n%s\ngangs at the end:\n%s", *simSeed, w.step, w.lastTrace(*simTrace), w.gangDump())
		if v != nil {
			t.Fatalf("seed %d, step %d: %s", *simSeed, v.step, v.what)
		}
		return
	}
	var gangs atomic.Int64
	steps, took, failed := runSeeds(*simGangSeeds, opts, func(w *simWorld) { gangs.Add(int64(w.gangsPlaced())) })
	t.Logf("%d seeds, %d steps, %d gang members bound, in %s", *simGangSeeds, steps, gangs.Load(), took.Round(time.Millisecond))
	if gangs.Load() == 0 {
		t.Error("no gang was ever placed: the workload makes none, or the operator places none")
	}
	reportFailed(t, failed)
}

// gangsPlaced counts the pods of gangs bound at the end of a run.
func (w *simWorld) gangsPlaced() int {
	n := 0
	for _, o := range w.store.list(kPod) {
		if p := o.(*corev1.Pod); inGang(p) && p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// With the undoing of partial placements off, the simulation finds a gang
// placed in part: the gang invariant is not vacuous.
func TestSimulationGangsFindPartialPlacements(t *testing.T) {
	opts := simFullOptions()
	opts.gangs = true
	for seed := uint64(1); seed <= 500; seed++ {
		w := newSimWorld(seed, opts).switchOff(protocolSwitches{noUndo: true})
		if v := w.run(); v != nil && strings.HasPrefix(v.what, "gang ") {
			t.Logf("found at seed %d, step %d: %s", seed, v.step, v.what)
			return
		}
	}
	t.Error("no gang placed in part in 500 seeds with the undoing of partial placements off")
}

// gangDump lists the gangs' pods at the end of a replayed run, each with
// its claims and their allocations: what checkGangs judged.
func (w *simWorld) gangDump() string {
	var b strings.Builder
	for _, o := range w.store.list(kPod) {
		p := o.(*corev1.Pod)
		if !inGang(p) {
			continue
		}
		fmt.Fprintf(&b, "pod %s gang %s node %q gated %v deleting %v\n", p.Name, p.Labels[gang.LabelName], p.Spec.NodeName, claimpolicy.HasGate(p), p.DeletionTimestamp != nil)
		for _, ref := range p.Spec.ResourceClaims {
			co, ok := w.store.get(kClaim, p.Namespace+"/"+*ref.ResourceClaimName)
			if !ok {
				fmt.Fprintf(&b, "  claim %s: does not exist\n", *ref.ResourceClaimName)
				continue
			}
			c := co.(*resourceapi.ResourceClaim)
			alloc := "not allocated"
			if a := c.Status.Allocation; a != nil {
				var devs []string
				for _, r := range a.Devices.Results {
					devs = append(devs, r.Pool+"/"+r.Device)
				}
				alloc = "allocated " + strings.Join(devs, ",")
			}
			fmt.Fprintf(&b, "  claim %s: %s, labels %v, deleting %v\n", c.Name, alloc, c.Labels, c.DeletionTimestamp != nil)
		}
	}
	return b.String()
}
