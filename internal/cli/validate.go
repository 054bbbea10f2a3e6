package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/pool"
)

const validateSynopsis = `Validate the resource pools of ResourceSlices read from files.

Usage:
  kubectl dra validate -f FILE [-f FILE...] [-o table|json|yaml] [--strict]
      [--features GATE=true|false,...]

Reads resource.k8s.io/v1 ResourceSlices, DeviceClasses, ResourceClaims
(their status.allocation counts as allocated devices) and v1 Nodes, groups
the slices into pools and reports each pool's health and problems with the
reason codes of the DevicePool status. Files are a snapshot, so an
incomplete pool is reported as IncompletePool at once (no grace period).

A slice over a per-slice limit (TooManyDevices, TooManyCounterSets,
TooManyCounters, TooManyConsumptions, TooManyAttributes) is an Error here,
because the API server refuses to store it; a live DevicePool reports the
same slice as a Warning, because there it can only predate the limit and
kube-scheduler still allocates from it.

Slices are judged as kube-scheduler treats them under the feature gates of
--features (default: those Kubernetes 1.37 turns on by default): a slice
whose devices declare compatibility groups while
DRADeviceCompatibilityGroups is off is ignored by kube-scheduler, so its
pool is Invalid with FeatureGateDisabled.

Exit codes: 0 done (also when pools are invalid), 1 invalid input,
2 usage error, 3 with --strict when some pool is not Healthy.
`

func (a *App) validate(_ context.Context, args []string) error {
	fs := newFlagSet("validate", validateSynopsis)
	files := fs.fileFlag()
	output := fs.outputFlag()
	strict := fs.Bool("strict", false, "Exit with code 3 when some pool is not Healthy.")
	featureSpec := fs.String("features", "", "Feature gates of the cluster the slices are for, as kube-scheduler's --feature-gates takes them: a comma-separated list of `GATE=true|false` "+
		"(all=true|false sets every gate first) applied to what Kubernetes 1.37 turns on by default ("+enabledGates(allocator.Kubernetes137Features())+"). "+
		"Gates: "+strings.Join(allocator.FeatureGateNames(), ", ")+".")
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

	in, err := a.readInput(*files)
	if err != nil {
		return err
	}
	pools := assessPools(in.Slices, ledgerFor(in.Claims), offlineOptions(features))
	warnUnknownPools(a.Stderr, in.Claims, pools)
	if err := a.writePools(*output, pools); err != nil {
		return err
	}
	if *strict {
		if n := unhealthy(pools); n > 0 {
			return &statusError{code: ExitUnhealthy, msg: fmt.Sprintf("%d of %d pools are not Healthy", n, len(pools))}
		}
	}
	return nil
}

// readInput reads and decodes the -f files.
func (a *App) readInput(files []string) (*inputSet, error) {
	docs, err := readInputs(files, a.Stdin)
	if err != nil {
		return nil, err
	}
	return decodeDocuments(docs, a.Stderr)
}

// writePools prints pools as validate does.
func (a *App) writePools(output string, pools []PoolEntry) error {
	if output != outputTable {
		return writeStructured(a.Stdout, output, ValidateOutput{Pools: pools})
	}
	if len(pools) == 0 {
		fmt.Fprintln(a.Stderr, "No pools found.")
		return nil
	}
	return writePoolTable(a.Stdout, pools)
}

// offlineOptions is how validate groups slices read from files: limits are
// errors (the API server would refuse the slice) and slices are judged
// under the cluster's feature gates.
func offlineOptions(f allocator.Features) pool.Options {
	return pool.Options{
		StrictLimits:                true,
		CompatibilityGroupsDisabled: !f.CompatibilityGroups,
	}
}

func unhealthy(pools []PoolEntry) int {
	n := 0
	for _, p := range pools {
		if p.Health != string(pool.HealthHealthy) {
			n++
		}
	}
	return n
}
