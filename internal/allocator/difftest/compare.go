package difftest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/upstream"
	"github.com/drastack/drastack/internal/allocator/verify"
)

// Verdict is what an engine said about one claim.
type Verdict string

// Verdicts. Allocated and Unsatisfiable must agree between engines; Invalid
// must too. Inconclusive (search bound or timeout) and NotSupported are not
// compared.
//
// The comparison rules, and the semantic decisions behind them:
//
//   - Aborted (upstream.ErrAborted) counts as Unsatisfiable, with no
//     tolerance: kube-scheduler gives up on a node when a request for All
//     devices meets an incomplete or invalid pool, or when a device of an
//     All request breaks a claim constraint, and the native engine follows
//     it on purpose (native Session.allBlocked and strict.go), so a native
//     allocation where upstream aborted is a disagreement like any other.
//   - A pool with an over-consumed counter refuses every device of the pool
//     that consumes counters, in both engines (native poolState.overdrawn).
//   - Selectors are compiled with the same CEL features in both engines
//     (list attributes and consumable capacity; TestSelectorFeatures).
//   - Claims with CEL constraints are answered by the native engine only;
//     its answer must be Allocated, Unsatisfiable or Inconclusive and its
//     allocations are verified.
const (
	Allocated     Verdict = "allocated"
	Unsatisfiable Verdict = "unsatisfiable"
	Invalid       Verdict = "invalid"
	Inconclusive  Verdict = "inconclusive"
	NotSupported  Verdict = "not supported"
	Failed        Verdict = "failed"
	// Aborted is upstream's "cannot allocate" after it stopped early at a
	// request for All devices (upstream.ErrAborted). It is compared as
	// Unsatisfiable.
	Aborted Verdict = "aborted"
)

// compared is the verdict a comparison uses.
func (v Verdict) compared() Verdict {
	if v == Aborted {
		return Unsatisfiable
	}
	return v
}

// Limits of one Allocate call in the differential test: generous for the
// small generated clusters, so hitting them is worth looking at.
const (
	maxSteps     = 2_000_000
	claimTimeout = 10 * time.Second
)

// Outcome is one engine's answer for one claim.
type Outcome struct {
	Verdict Verdict
	Err     error
	Result  allocator.Result
}

// Run lets eng allocate every claim of c on its own, from the starting
// state (nothing is recorded between claims), then records every
// allocation in the session. After NewSession, after the Allocate calls
// and after the Record calls it checks that the engine left everything it
// was given as it was (inputCopy); a change is an error naming the calls
// and the field. (Once per phase, not per call: the check walks every
// object, and per call it would cost more than the allocations.)
func Run(ctx context.Context, eng allocator.Engine, c *Case) ([]Outcome, error) {
	orig := copyInputs(c.Inputs, c.Claims)
	unchanged := func(calls string) error {
		if err := orig.changed(c.Inputs, c.Claims); err != nil {
			return fmt.Errorf("%s: %s modified its inputs: %w", eng.Name(), calls, err)
		}
		return nil
	}
	sess, err := eng.NewSession(ctx, c.Inputs)
	if err != nil {
		return nil, fmt.Errorf("%s: new session: %w", eng.Name(), err)
	}
	if err := unchanged("NewSession"); err != nil {
		return nil, err
	}
	out := make([]Outcome, len(c.Claims))
	for i, claim := range c.Claims {
		cctx, cancel := context.WithTimeout(ctx, claimTimeout)
		results, err := sess.Allocate(cctx, []*resourceapi.ResourceClaim{claim}, allocator.Options{Node: c.Node[i], MaxSteps: maxSteps})
		cancel()
		out[i] = classify(results, err)
	}
	if err := unchanged("Allocate"); err != nil {
		return nil, err
	}
	var recorded []*resourceapi.ResourceClaim
	for i, claim := range c.Claims {
		if out[i].Verdict != Allocated {
			continue
		}
		rec := claim.DeepCopy()
		rec.Status.Allocation = out[i].Result.Allocation.DeepCopy()
		recorded = append(recorded, rec)
	}
	recCopy := copyInputs(allocator.Inputs{}, recorded)
	for _, rec := range recorded {
		if err := sess.Record(rec); err != nil {
			return nil, fmt.Errorf("%s: record claim %s: %w", eng.Name(), rec.Name, err)
		}
	}
	if err := unchanged("Record"); err != nil {
		return nil, err
	}
	if err := recCopy.changed(allocator.Inputs{}, recorded); err != nil {
		return nil, fmt.Errorf("%s: Record modified the claims it was given: %w", eng.Name(), err)
	}
	return out, nil
}

func classify(results []allocator.Result, err error) Outcome {
	var invalid *allocator.InvalidClaimError
	switch {
	case err == nil && len(results) == 1:
		return Outcome{Verdict: Allocated, Result: results[0]}
	case err == nil:
		return Outcome{Verdict: Failed, Err: fmt.Errorf("want 1 result, got %d", len(results))}
	case errors.Is(err, upstream.ErrAborted):
		return Outcome{Verdict: Aborted, Err: err}
	case errors.Is(err, allocator.ErrUnsatisfiable):
		return Outcome{Verdict: Unsatisfiable, Err: err}
	case errors.As(err, &invalid):
		return Outcome{Verdict: Invalid, Err: err}
	case errors.Is(err, allocator.ErrSearchBound), errors.Is(err, context.DeadlineExceeded):
		return Outcome{Verdict: Inconclusive, Err: err}
	case errors.Is(err, allocator.ErrNotSupported):
		return Outcome{Verdict: NotSupported, Err: err}
	}
	return Outcome{Verdict: Failed, Err: err}
}

// Problem is a disagreement or a rejected result.
type Problem struct {
	Seed  uint64
	Claim string
	// Node the claim was allocated for ("" for a central allocation).
	Node    string
	Message string
}

func (p Problem) String() string {
	return fmt.Sprintf("seed %d, claim %s (node %q): %s", p.Seed, p.Claim, p.Node, p.Message)
}

// Stats counts verdicts over compared claims. Aborted counts agreements
// where upstream stopped early (see Aborted) and the native engine refused
// the claim too; OneEngine counts claims with CEL constraints, which only
// one engine supports: they are not compared, but that engine's allocations
// are verified.
type Stats struct {
	Claims, Agreed, Allocated, Unsatisfiable, Inconclusive, Aborted, OneEngine int
}

// Compare checks two engines' outcomes on c against each other and every
// allocation against the verifier. Engines must both fail or both succeed
// (invalid claims count as failing alike); inconclusive answers are not
// compared but are counted.
func Compare(c *Case, names [2]string, a, b []Outcome) ([]Problem, Stats) {
	var problems []Problem
	var st Stats
	checker := verify.New(c.Inputs)
	for i, claim := range c.Claims {
		p := Problem{Seed: c.Seed, Claim: claim.Name, Node: c.Node[i]}
		st.Claims++
		_, hasCEL := claim.Annotations[allocator.CELConstraintsAnnotation]
		for k, o := range [2]Outcome{a[i], b[i]} {
			switch o.Verdict {
			case NotSupported:
				if !hasCEL {
					p.Message = fmt.Sprintf("%s: not supported: %v", names[k], o.Err)
					problems = append(problems, p)
				}
			case Failed:
				p.Message = fmt.Sprintf("%s: unexpected error: %v", names[k], o.Err)
				problems = append(problems, p)
			case Allocated:
				node := c.Node[i]
				if node == "" {
					node = o.Result.Node
				}
				for _, err := range checker.Check(claim, o.Result.Allocation, node) {
					p.Message = fmt.Sprintf("%s: verifier rejects the allocation: %v", names[k], err)
					problems = append(problems, p)
				}
			}
		}
		va, vb := a[i].Verdict.compared(), b[i].Verdict.compared()
		switch {
		case hasCEL && (va == NotSupported) != (vb == NotSupported):
			st.OneEngine++
			// The generated constraints are valid: the engine that supports
			// them must give an answer.
			k, v := 0, va
			if va == NotSupported {
				k, v = 1, vb
			}
			// A claim may still be invalid for another reason (a count
			// above the per-claim limit), never for its constraints.
			var invalid *allocator.InvalidClaimError
			otherwise := v == Invalid && errors.As([2]Outcome{a[i], b[i]}[k].Err, &invalid) &&
				!strings.HasPrefix(invalid.Field, allocator.CELConstraintsField)
			if v != Allocated && v != Unsatisfiable && v != Inconclusive && !otherwise {
				p.Message = fmt.Sprintf("%s says %s (%v) for valid CEL constraints", names[k], v, [2]Outcome{a[i], b[i]}[k].Err)
				problems = append(problems, p)
			}
		case va == Inconclusive || vb == Inconclusive:
			st.Inconclusive++
		case va == vb:
			st.Agreed++
			if a[i].Verdict == Aborted || b[i].Verdict == Aborted {
				st.Aborted++
			}
			if va == Allocated {
				st.Allocated++
			} else if va == Unsatisfiable {
				st.Unsatisfiable++
			}
		default:
			p.Message = fmt.Sprintf("%s says %s (%v), %s says %s (%v)", names[0], a[i].Verdict, a[i].Err, names[1], b[i].Verdict, b[i].Err)
			problems = append(problems, p)
		}
	}
	return problems, st
}
