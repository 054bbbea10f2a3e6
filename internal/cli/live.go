package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	drastackv1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

const poolsSynopsis = `Show the DevicePools of the cluster with their problems.

Usage:
  kubectl dra pools [DRIVER/POOL] [-o table|json|yaml] [--kubeconfig PATH] [--context NAME]

The live view of what the drastack operator reports: the same table as
'kubectl get pool' with each pool's problems underneath, for all pools or
for one (DRIVER/POOL; the pool name may itself contain slashes). -o json and
-o yaml print the pool entries of 'kubectl dra validate'.

The cluster is read through --kubeconfig, else $KUBECONFIG, else
~/.kube/config.
`

// listTimeout bounds the request to the API server, so an unreachable
// cluster fails instead of hanging.
const listTimeout = 30 * time.Second

func (a *App) pools(ctx context.Context, args []string) error {
	fs := newFlagSet("pools", poolsSynopsis)
	output := fs.outputFlag()
	kubeconfig := fs.String("kubeconfig", "", "Path to the kubeconfig file (default $KUBECONFIG, else ~/.kube/config).")
	kubeContext := fs.String("context", "", "The kubeconfig context to use (default the current context).")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.checkOutput(*output); err != nil {
		return err
	}
	var driver, poolName string
	switch fs.NArg() {
	case 0:
	case 1:
		var ok bool
		driver, poolName, ok = strings.Cut(fs.Arg(0), "/")
		if !ok || driver == "" || poolName == "" {
			return fs.usagef("want DRIVER/POOL, not %q", fs.Arg(0))
		}
	default:
		return fs.usagef("at most one DRIVER/POOL, not %q", fs.Args())
	}

	c, err := a.NewClient(*kubeconfig, *kubeContext)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	var list drastackv1alpha1.DevicePoolList
	if err := c.List(lctx, &list); err != nil {
		return fmt.Errorf("list DevicePools: %w", err)
	}
	items := list.Items
	if driver != "" {
		items = slices.DeleteFunc(items, func(p drastackv1alpha1.DevicePool) bool {
			return p.Status.Driver != driver || p.Status.Pool != poolName
		})
		if len(items) == 0 {
			return fmt.Errorf("no DevicePool for driver %q and pool %q", driver, poolName)
		}
	}
	entries := livePoolEntries(items, a.Now())
	if *output != outputTable {
		return writeStructured(a.Stdout, *output, ValidateOutput{Pools: entries})
	}
	if len(entries) == 0 {
		fmt.Fprintln(a.Stderr, "No DevicePools found.")
		return nil
	}
	return writeLivePoolTable(a.Stdout, entries)
}

// livePoolEntries converts DevicePools, sorted by driver and pool, to the
// entries validate prints.
func livePoolEntries(items []drastackv1alpha1.DevicePool, now time.Time) []PoolEntry {
	out := make([]PoolEntry, 0, len(items))
	for _, p := range items {
		st := p.Status
		problems := make([]ProblemEntry, 0, len(st.Problems))
		for _, pr := range st.Problems {
			problems = append(problems, ProblemEntry{Reason: pr.Reason, Severity: pr.Severity, Slice: pr.Slice, Device: pr.Device, Message: pr.Message})
		}
		age := "<unknown>"
		if !p.CreationTimestamp.IsZero() {
			age = duration.HumanDuration(now.Sub(p.CreationTimestamp.Time))
		}
		out = append(out, PoolEntry{
			Driver:           st.Driver,
			Pool:             st.Pool,
			Generation:       st.Generation,
			Health:           string(st.Health),
			Slices:           int(st.Slices.Current),
			Devices:          int(st.Devices.Total),
			AllocatedDevices: int(st.Devices.Allocated),
			Problems:         problems,
			node:             st.Node,
			expectedSlices:   int64(st.Slices.Expected),
			name:             p.Name,
			age:              age,
			moreProblems:     int(st.MoreProblems),
			reason:           st.Reason,
		})
	}
	slices.SortFunc(out, func(a, b PoolEntry) int {
		return cmp.Or(cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.name, b.name))
	})
	return out
}

// writeLivePoolTable prints the columns of `kubectl get pool` (API.md),
// with a utilisation bar after ALLOCATED, and the problems underneath.
func writeLivePoolTable(w io.Writer, pools []PoolEntry) error {
	t := &table{header: []string{"NAME", "DRIVER", "POOL", "NODE", "DEVICES", "ALLOCATED", "UTILIZATION", "HEALTH", "REASON", "AGE"}}
	for _, p := range pools {
		t.add([]string{
			p.name, p.Driver, p.Pool, dash(p.node),
			strconv.Itoa(p.Devices), strconv.Itoa(p.AllocatedDevices),
			utilizationBar(p.AllocatedDevices, p.Devices),
			p.Health, dash(p.reason), p.age,
		}, problemLines(p.Problems, p.moreProblems)...)
	}
	return t.write(w)
}

// barWidth is the number of cells of a utilisation bar.
const barWidth = 10

// utilizationBar draws allocated/total devices as a bar of barWidth cells
// and a percentage, like "[####------] 40%". Both round down, so a full bar
// and 100% mean every device is allocated, except that any allocation shows
// at least 1%. A pool without devices shows <none>; more allocated than
// total (a status written while slices disappear) is capped at 100%.
func utilizationBar(allocated, total int) string {
	if total <= 0 {
		return dash("")
	}
	allocated = min(max(allocated, 0), total)
	cells := allocated * barWidth / total
	pct := allocated * 100 / total
	if allocated > 0 && pct == 0 {
		pct = 1
	}
	return "[" + strings.Repeat("#", cells) + strings.Repeat("-", barWidth-cells) + "] " + strconv.Itoa(pct) + "%"
}

// NewClient reads DevicePools and Kubernetes objects through a kubeconfig: the path given, else
// $KUBECONFIG, else ~/.kube/config, with the given context or the current
// one, as kubectl does.
func NewClient(kubeconfig, kubeContext string) (client.Reader, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubeContext}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := drastackv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register drastack types: %w", err)
	}
	// Kubernetes' own types, for kubectl dra explain.
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register Kubernetes types: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	return c, nil
}
