package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/explain"
)

const explainSynopsis = `Explain why a claim or a pod is or is not allocated.

Usage:
  kubectl dra explain claim/NAME | pod/NAME [-n NAMESPACE]
      [--kubeconfig PATH] [--context NAME]
      [-o table|json|yaml] [--timeout 10s] [--features GATE=true|false,...]
  kubectl dra explain -f FILE [-f FILE...] claim/NAME [-n NAMESPACE]
      [-o table|json|yaml] [--timeout 10s] [--features GATE=true|false,...]

Without -f, reads the cluster (--kubeconfig, else $KUBECONFIG, else
~/.kube/config): ResourceSlices, DeviceClasses, ResourceClaims, Nodes,
DeviceTaintRules (v1 or v1beta2) and the DRAStack, with the cluster's
feature gates (the DRAStack's probe, else a probe of its own, else
Kubernetes 1.37's defaults; --features applies on top). A pod's claims
(spec.resourceClaims, resolved through status.resourceClaimStatuses, or
their template while they are not created) are explained together, on
the nodes kube-scheduler's node filters leave (cordoned, tainted, node
selector and affinity, cpu, memory and pod count; each ruled-out node is
listed with the reason).

With -f, reads the same objects as simulate and explains claim NAME in
the state the files describe: the claims with status.allocation hold
their devices, the others are not allocated.

A claim without status.allocation gets a verdict (where it would go, or
the closest miss and its obstacle) and one funnel table per group of
alike nodes; an allocated claim is explained where it is, with its
devices. The output is described in docs/cli-explain.md.

Exit codes: 0 done (also when the claim cannot be allocated), 1 input that
cannot be read or decoded, a cluster that cannot be read, or a claim or
pod that is not in the files or the cluster (the message names it), 2
usage error.
`

// explainClaim runs kubectl dra explain on files.
func (a *App) explainClaim(ctx context.Context, args []string) error {
	fs := newFlagSet("explain", explainSynopsis)
	files := fs.fileFlag()
	output := fs.outputFlag()
	namespace := fs.StringP("namespace", "n", "default", "Namespace of the claim.")
	timeout := fs.Duration("timeout", explain.DefaultTimeout, "Time limit of the explanation.")
	featureSpec := fs.String("features", "", "Feature gates, as simulate --features takes them.")
	kubeconfig := fs.String("kubeconfig", "", "Path to the kubeconfig file (default $KUBECONFIG, else ~/.kube/config); without -f only.")
	kubeContext := fs.String("context", "", "The kubeconfig context to use (default the current context); without -f only.")
	if err := fs.parse(args); err != nil {
		return err
	}
	features, err := allocator.ParseFeatures(allocator.Kubernetes137Features(), *featureSpec)
	if err != nil {
		return fs.usagef("--features: %v", err)
	}
	if fs.NArg() != 1 {
		return fs.usagef("want exactly one claim/NAME or pod/NAME, got %q", fs.Args())
	}
	kind, name, ok := strings.Cut(fs.Arg(0), "/")
	switch kind {
	case "claim", "claims", "resourceclaim", "resourceclaims":
		kind = "claim"
	case "pod", "pods", "po":
		kind = "pod"
	default:
		ok = false
	}
	if !ok || name == "" {
		return fs.usagef("want claim/NAME or pod/NAME, not %q", fs.Arg(0))
	}
	if err := fs.checkOutput(*output); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fs.usagef("--timeout must be positive, not %s", *timeout)
	}
	if len(*files) == 0 {
		out, err := a.explainLive(ctx, liveTarget{kind: kind, namespace: *namespace, name: name}, *kubeconfig, *kubeContext, *featureSpec, *timeout)
		if err != nil {
			return err
		}
		if *output != outputTable {
			return writeStructured(a.Stdout, *output, out)
		}
		return writeExplainTable(a.Stdout, out)
	}
	if kind == "pod" {
		return fs.usagef("pods are explained live only (without -f)")
	}
	if *kubeconfig != "" || *kubeContext != "" {
		return fs.usagef("--kubeconfig and --context read the cluster, which -f does not")
	}
	if err := fs.checkFiles(*files); err != nil {
		return err
	}
	in, err := a.readInput(*files)
	if err != nil {
		return err
	}
	var target *resourceapi.ResourceClaim
	var allocated []*resourceapi.ResourceClaim
	for _, c := range in.Claims {
		if c.Namespace == *namespace && c.Name == name {
			target = c
		} else if c.Status.Allocation != nil {
			allocated = append(allocated, c)
		}
	}
	if target == nil {
		// An object that does not exist, as live (exit 1), not a usage
		// error: the command line was right.
		return fmt.Errorf("claim %s/%s is not in the files", *namespace, name)
	}
	rep, err := explainOne(ctx, a.Engines[defaultEngine](), in, target, allocated, *timeout, features)
	if err != nil {
		return err
	}
	out := &ExplainOutput{Engine: "native", Explanations: []*explain.Report{rep}}
	if *output != outputTable {
		return writeStructured(a.Stdout, *output, out)
	}
	return writeExplainTable(a.Stdout, out)
}

// explainOne explains one claim; an allocated claim is described where it is.
func explainOne(ctx context.Context, engine allocator.Engine, in *inputSet, c *resourceapi.ResourceClaim, allocated []*resourceapi.ResourceClaim,
	timeout time.Duration, features allocator.Features) (*explain.Report, error) {
	key := allocator.ClaimKey(c)
	if a := c.Status.Allocation; a != nil {
		rep := &explain.Report{Claims: []string{key}, Fits: true, Groups: []explain.NodeGroup{}}
		for _, d := range a.Devices.Results {
			rep.Devices = append(rep.Devices, fmt.Sprintf("%s %s: %s/%s/%s", key, d.Request, d.Driver, d.Pool, d.Device))
		}
		rep.Verdict = "allocated (status.allocation): " + strings.Join(rep.Devices, ", ")
		return rep, nil
	}
	if err := checkCELConstraintsAnnotation(c); err != nil {
		r := ClaimResult{}
		in.markInvalid(&r, err)
		return &explain.Report{Claims: []string{key}, Invalid: true, Reason: r.Reason, Verdict: r.Reason, Groups: []explain.NodeGroup{}}, nil
	}
	rep, err := explain.Explain(ctx, engine, allocator.Inputs{
		Slices:     in.Slices,
		Classes:    in.Classes,
		Nodes:      withSliceNodes(in.Nodes, in.Slices),
		Allocated:  allocated,
		TaintRules: in.TaintRules,
		Features:   &features,
	}, []*resourceapi.ResourceClaim{c}, explain.Options{Timeout: timeout})
	if err != nil {
		return nil, in.claimError(err, c)
	}
	if rep.Groups == nil {
		rep.Groups = []explain.NodeGroup{}
	}
	return rep, nil
}
