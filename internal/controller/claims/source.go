package claims

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/handover"
	"github.com/drastack/drastack/internal/ledger"
)

// cacheSource reads the engine's inputs from the informer caches for the
// ledger (ledger.Source). The slices are the engine view of package
// central: DeviceTaintRules applied, and devices the operator must not
// allocate (not central, not tainted yet, or of a pool that has not joined
// the partition) tainted in the view only, so that claims passed through
// central.ForOperator get only central devices and claims passed through
// central.ForScheduler only the others.
type cacheSource struct {
	reader client.Reader
	cfg    *configStore
	// taintRules: the cluster serves resource.k8s.io/v1 DeviceTaintRule,
	// so the cache holds the rules.
	taintRules bool
	// floor is the current term's start (term_floor.go).
	floor termFloor
	// off are the Reconciler's protocol switches (the simulation's).
	off *protocolSwitches
	// retired are the rules the taint loop deleted or narrowed.
	retired *retiredRules
}

var _ ledger.Source = (*cacheSource)(nil)

// Read implements ledger.Source.
func (s *cacheSource) Read(ctx context.Context) (ledger.View, error) {
	var view ledger.View
	if err := s.caughtUp(ctx); err != nil {
		return view, err
	}
	config := s.cfg.cur.Load()
	var slices resourceapi.ResourceSliceList
	if err := s.reader.List(ctx, &slices, client.UnsafeDisableDeepCopy); err != nil {
		return view, fmt.Errorf("list ResourceSlices: %w", err)
	}
	var classes resourceapi.DeviceClassList
	if err := s.reader.List(ctx, &classes, client.UnsafeDisableDeepCopy); err != nil {
		return view, fmt.Errorf("list DeviceClasses: %w", err)
	}
	var nodes corev1.NodeList
	if err := s.reader.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return view, fmt.Errorf("list Nodes: %w", err)
	}
	var rules []resourceapi.DeviceTaintRule
	if s.taintRules {
		var list resourceapi.DeviceTaintRuleList
		if err := s.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return view, fmt.Errorf("list DeviceTaintRules: %w", err)
		}
		rules = list.Items
		if s.retired != nil && (s.off == nil || !s.off.trustCache) {
			rules = s.retired.current(rules)
		}
	}
	raw := make([]*resourceapi.ResourceSlice, len(slices.Items))
	for i := range slices.Items {
		raw[i] = &slices.Items[i]
	}
	in := &view.Inputs
	for i := range classes.Items {
		in.Classes = append(in.Classes, &classes.Items[i])
	}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	cfg := configOf(config)
	part, err := central.NewPartition(central.Inputs{
		Entries: cfg.Central, Slices: raw, Nodes: in.Nodes, Published: publishedOf(config),
	})
	if err != nil {
		// The DRAStack controller reports a bad selector as SpecValid
		// False; until it is fixed no device is central.
		part, _ = central.NewPartition(central.Inputs{Slices: raw, Nodes: in.Nodes})
	}
	// A central pool is the operator's only once it joined the partition
	// (docs/allocation-protocol.md, section 4): its rule records the join.
	joined := handover.JoinedPools(part, rules)
	if s.off != nil && s.off.noJoin {
		// Switched off: a pool is used as soon as its rule shows.
		joined = func(central.PoolID) bool { return true }
	}
	in.Slices = central.EngineView(part, raw, rules, joined)
	f := engineFeatures(config)
	in.Features = &f
	view.LabelKeys = central.LabelKeys(raw, cfg.Central)
	view.Config = config
	return view, nil
}

// Current implements ledger.Source: config is the configuration in force.
func (s *cacheSource) Current(config any) bool {
	v, ok := config.(*configVersion)
	return ok && s.cfg.unchangedSince(v)
}

// engineFeatures are the engine's switches for a session: the gates the
// cluster probe found (the engine's defaults before a probe), so the engine
// applies them as kube-scheduler would. The DeviceTaintRules are already in
// the view (they say what is central), and DeviceTaints stays on whatever
// the cluster says: the view's own taints are what keep each claim to its
// side.
func engineFeatures(v *configVersion) allocator.Features {
	var in *allocator.Features
	if v != nil {
		in = v.features
	}
	f := allocator.FeaturesOf(in)
	f.DeviceTaints = true
	return f
}
