package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/pool"
)

const simulateSynopsis = `Allocate the claims read from files, as the scheduler would.

Usage:
  kubectl dra simulate -f FILE [-f FILE...] [-o table|json|yaml]
      [--engine native|upstream] [--node NAME] [--timeout 10s]
      [--features GATE=true|false,...] [--explain]

Reads the same objects as validate and allocates every ResourceClaim that
has no status.allocation, in document order; each result counts as allocated
for the claims after it. Claims with status.allocation are allocated from
the start. The pools printed afterwards include the new allocations.

Without --node the engine picks a node among the Nodes of the files (in
their order); nodes that slices name in spec.nodeName but that the files do
not define are added with only their name (no labels).

Allocation follows kube-scheduler with the feature gates of --features
(default: those Kubernetes 1.37 turns on by default): with a gate off, a
slice that uses its field is ignored or its devices are not allocated, and
a claim that uses its field is invalid. DeviceTaintRules in the files taint
the devices they select while DRADeviceTaintRules is on.

Every claim gets an outcome: allocated, or not with the reason. A claim
that can never be allocated as written (a CEL expression that does not
compile or fails at run time, a broken resource.drastack.io/cel-constraints
annotation) is not allocated, with the offending field; the others are
allocated as usual, as kube-scheduler leaves only that claim's pod pending.

With --explain (native engine, central allocation only) every claim is
explained before it is allocated: a verdict (where it would go, or the
closest miss and its obstacle), then per group of alike nodes how the
candidates of each request shrink. docs/cli-explain.md has the shape of
-o json|yaml.

Exit codes: 0 done (also when claims cannot be allocated or are invalid),
1 input that cannot be read or decoded, 2 usage error.
`

// SimulateOutput is the JSON and YAML output of simulate (CLI.md).
type SimulateOutput struct {
	// Engine is the name of the engine that allocated ("native" or
	// "upstream").
	Engine string `json:"engine"`
	// Results, one per claim that had no allocation, in document order.
	Results []ClaimResult `json:"results"`
	// Pools after the simulation, the new allocations included.
	Pools []PoolEntry `json:"pools"`
}

// ClaimResult is the outcome of one claim. Allocated results carry node and
// allocation, the others reason, and invalid claims also field (CLI.md).
type ClaimResult struct {
	// Claim is namespace/name.
	Claim string
	// Allocated tells which of the two shapes this is.
	Allocated bool
	// Node the allocation was made for; empty when it needs none.
	Node string
	// Allocation is what the claim's status.allocation would be.
	Allocation *resourceapi.AllocationResult
	// Reason why the claim could not be allocated.
	Reason string
	// Field is the path of the offending field of an invalid claim (one
	// that can never be allocated as written); empty otherwise.
	Field string
	// Seconds the engine took for this claim.
	Seconds float64
}

// MarshalJSON writes the two shapes of CLI.md: node is present (possibly
// empty) exactly when the claim was allocated, reason exactly when not, and
// field only for an invalid claim.
func (r ClaimResult) MarshalJSON() ([]byte, error) {
	if r.Allocated {
		return json.Marshal(struct {
			Claim      string                        `json:"claim"`
			Allocated  bool                          `json:"allocated"`
			Node       string                        `json:"node"`
			Allocation *resourceapi.AllocationResult `json:"allocation"`
			Seconds    float64                       `json:"seconds"`
		}{r.Claim, true, r.Node, r.Allocation, r.Seconds})
	}
	return json.Marshal(struct {
		Claim     string  `json:"claim"`
		Allocated bool    `json:"allocated"`
		Reason    string  `json:"reason"`
		Field     string  `json:"field,omitempty"`
		Seconds   float64 `json:"seconds"`
	}{r.Claim, false, r.Reason, r.Field, r.Seconds})
}

// UnmarshalJSON reads either shape back.
func (r *ClaimResult) UnmarshalJSON(data []byte) error {
	var v struct {
		Claim      string                        `json:"claim"`
		Allocated  bool                          `json:"allocated"`
		Node       string                        `json:"node"`
		Allocation *resourceapi.AllocationResult `json:"allocation"`
		Reason     string                        `json:"reason"`
		Field      string                        `json:"field"`
		Seconds    float64                       `json:"seconds"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*r = ClaimResult(v)
	return nil
}

func (a *App) simulate(ctx context.Context, args []string) error {
	fs := newFlagSet("simulate", simulateSynopsis)
	files := fs.fileFlag()
	output := fs.outputFlag()
	engineName := fs.String("engine", defaultEngine, "Allocation engine: "+strings.Join(engineNames(a.Engines), " or ")+".")
	node := fs.String("node", "", "Allocate only for this node, like one kube-scheduler Filter call.")
	timeout := fs.Duration("timeout", 10*time.Second, "Time limit per claim.")
	featureSpec := fs.String("features", "", "Feature gates to allocate under, as kube-scheduler's --feature-gates takes them: a comma-separated list of `GATE=true|false` "+
		"(all=true|false sets every gate first) applied to what Kubernetes 1.37 turns on by default ("+enabledGates(allocator.Kubernetes137Features())+"). "+
		"Gates: "+strings.Join(allocator.FeatureGateNames(), ", ")+". Example: --features DRAListTypeAttributes=true,DRADeviceCompatibilityGroups=true.")
	explainFlag := fs.Bool("explain", false, "Explain why each claim is or is not allocated (native engine, without --node).")
	if err := fs.parse(args); err != nil {
		return err
	}
	features, err := allocator.ParseFeatures(allocator.Kubernetes137Features(), *featureSpec)
	if err != nil {
		return fs.usagef("--features: %v", err)
	}
	if fs.NArg() > 0 {
		return fs.usagef("unexpected arguments %q", fs.Args())
	}
	if err := fs.checkOutput(*output); err != nil {
		return err
	}
	if err := fs.checkFiles(*files); err != nil {
		return err
	}
	newEngine, ok := a.Engines[*engineName]
	if !ok {
		return fs.usagef("unknown engine %q (want %s)", *engineName, strings.Join(engineNames(a.Engines), " or "))
	}
	if *timeout <= 0 {
		return fs.usagef("--timeout must be positive, not %s", *timeout)
	}

	if *explainFlag && (*engineName != "native" || *node != "") {
		return fs.usagef("--explain needs the native engine and no --node")
	}

	in, err := a.readInput(*files)
	if err != nil {
		return err
	}
	if *explainFlag {
		return a.simulateExplain(ctx, in, newEngine(), *timeout, features, *output)
	}
	out, err := runSimulation(ctx, newEngine(), in, *node, *timeout, features)
	if err != nil {
		return err
	}
	warnUnknownPools(a.Stderr, in.Claims, out.Pools)
	if *output != outputTable {
		return writeStructured(a.Stdout, *output, out)
	}
	return writeSimulateTable(a.Stdout, a.Stderr, out)
}

// runSimulation allocates the unallocated claims of in one by one.
func runSimulation(ctx context.Context, engine allocator.Engine, in *inputSet, node string, timeout time.Duration, features allocator.Features) (*SimulateOutput, error) {
	var allocated, pending []*resourceapi.ResourceClaim
	for _, c := range in.Claims {
		if c.Status.Allocation != nil {
			allocated = append(allocated, c)
		} else {
			pending = append(pending, c)
		}
	}
	session, err := engine.NewSession(ctx, allocator.Inputs{
		Slices:     in.Slices,
		Classes:    in.Classes,
		Nodes:      withSliceNodes(in.Nodes, in.Slices),
		Allocated:  allocated,
		TaintRules: in.TaintRules,
		Features:   &features,
	})
	if err != nil {
		return nil, in.claimError(err, nil)
	}
	ledger := ledgerFor(allocated)
	out := &SimulateOutput{Engine: engine.Name(), Results: make([]ClaimResult, 0, len(pending))}
	for _, c := range pending {
		var r ClaimResult
		if err := checkCELConstraintsAnnotation(c); err != nil {
			r = ClaimResult{Claim: allocator.ClaimKey(c)}
			in.markInvalid(&r, err)
		} else if r, err = allocateOne(ctx, session, c, node, timeout); err != nil {
			var invalid *allocator.InvalidClaimError
			if !errors.As(err, &invalid) {
				return nil, in.claimError(err, c)
			}
			in.markInvalid(&r, err)
		}
		if r.Allocated {
			done := c.DeepCopy()
			done.Status.Allocation = r.Allocation
			if err := session.Record(done); err != nil {
				return nil, fmt.Errorf("record allocation of claim %s: %w", r.Claim, err)
			}
			ledger.AddClaim(done)
		}
		out.Results = append(out.Results, r)
	}
	out.Pools = assessPools(in.Slices, ledger, pool.Options{})
	return out, nil
}

// allocateOne allocates one claim within the timeout. A claim that cannot be
// allocated, for whatever reason the engine gives, is a result; an invalid
// claim (an *allocator.InvalidClaimError, which the caller turns into a
// result too) or an interrupted run is an error.
func allocateOne(ctx context.Context, session allocator.Session, c *resourceapi.ResourceClaim, node string, timeout time.Duration) (ClaimResult, error) {
	start := time.Now() // before the deadline is set, so a timeout never reads as shorter than it was
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results, err := session.Allocate(cctx, []*resourceapi.ResourceClaim{c}, allocator.Options{Node: node})
	r := ClaimResult{Claim: allocator.ClaimKey(c), Seconds: time.Since(start).Seconds()}
	var invalid *allocator.InvalidClaimError
	switch {
	case errors.As(err, &invalid):
		return r, err
	case ctx.Err() != nil:
		return r, fmt.Errorf("simulation interrupted at claim %s: %w", r.Claim, ctx.Err())
	case err != nil && cctx.Err() != nil:
		r.Reason = fmt.Sprintf("timed out after %s: %v", timeout, err)
	case err != nil:
		r.Reason = err.Error()
	case len(results) != 1 || results[0].Allocation == nil:
		return r, fmt.Errorf("engine returned %d results without error for claim %s", len(results), r.Claim)
	default:
		r.Allocated = true
		r.Node = results[0].Node
		r.Allocation = results[0].Allocation
	}
	return r, nil
}

// markInvalid makes r the outcome of an invalid claim: not allocated, the
// reason naming the file and document of the claim, and the field. err
// must wrap an *allocator.InvalidClaimError.
func (in *inputSet) markInvalid(r *ClaimResult, err error) {
	r.Allocated, r.Node, r.Allocation = false, "", nil
	r.Reason = "invalid claim: " + err.Error()
	var ie *InputError
	if errors.As(in.claimError(err, nil), &ie) {
		r.Field = ie.Field
		ie.Object = "" // the result names the claim already
		r.Reason = "invalid claim: " + ie.Error()
	}
}

// claimError turns an engine's InvalidClaimError into an InputError that
// points at the file and document of the claim. c is the claim being
// allocated, if any.
func (in *inputSet) claimError(err error, c *resourceapi.ResourceClaim) error {
	var invalid *allocator.InvalidClaimError
	if !errors.As(err, &invalid) {
		if c == nil {
			return fmt.Errorf("prepare allocation: %w", err)
		}
		return fmt.Errorf("allocate claim %s: %w", allocator.ClaimKey(c), err)
	}
	ie := &InputError{Object: "ResourceClaim " + invalid.Claim, Field: invalid.Field, Err: invalid.Err}
	for claim, src := range in.claimSources {
		if allocator.ClaimKey(claim) == invalid.Claim {
			ie.Source = src
			break
		}
	}
	return ie
}

// withSliceNodes returns nodes plus a name-only Node for every
// node name of a slice or of a device (per-device node selection) that
// nodes do not define, in the order the
// slices name them: files often hold slices without their Nodes, and a
// central allocator only tries nodes it knows.
func withSliceNodes(nodes []*corev1.Node, slices []*resourceapi.ResourceSlice) []*corev1.Node {
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n.Name] = true
	}
	out := nodes
	add := func(name *string) {
		if name == nil || *name == "" || known[*name] {
			return
		}
		known[*name] = true
		out = append(out[:len(out):len(out)], &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: *name}})
	}
	for _, s := range slices {
		add(s.Spec.NodeName)
		for i := range s.Spec.Devices {
			add(s.Spec.Devices[i].NodeName)
		}
	}
	return out
}

// enabledGates lists the gates f turns on.
func enabledGates(f allocator.Features) string {
	var on []string
	for _, kv := range strings.Split(f.String(), ",") {
		if name, ok := strings.CutSuffix(kv, "=true"); ok {
			on = append(on, name)
		}
	}
	return strings.Join(on, ", ")
}
