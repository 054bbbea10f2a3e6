// Package upstream adapts k8s.io/dynamic-resource-allocation/structured, the
// allocator kube-scheduler runs in its DRA plugin, to allocator.Engine.
//
// It exists to measure and cross-check the native engine against the
// reference implementation: the benchmark harness and the differential test
// run both engines on identical inputs, and `kubectl dra simulate --engine
// upstream` answers "what would kube-scheduler do?".
//
// The upstream allocator answers one question per call: can these claims be
// allocated for this node? With Options.Node set, Allocate makes exactly that
// call. With Options.Node empty, it acts as a central allocator built on the
// upstream code would: it tries Inputs.Nodes in order and keeps the first
// node that fits (see session.go for the details and the shortcut taken when
// no device depends on the node).
//
// CEL constraints (KEP-5254) have no upstream implementation; a claim that
// carries them fails with an error wrapping allocator.ErrNotSupported.
package upstream

import (
	"context"
	"sync"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drastack/drastack/internal/allocator"
)

// EngineName is what Engine.Name returns.
const EngineName = "upstream"

// celCacheSize bounds the compiled-expression cache shared by all sessions of
// one engine. kube-scheduler uses a cache of this order; a benchmark or a
// cluster has a handful of distinct selectors, so eviction is rare.
const celCacheSize = 1024

// StructuredFeatures are the upstream allocator features kube-scheduler
// builds from the given gates (its AllocatorFeatures): DRADeviceTaintRules
// is not one of them, it decides which slices kube-scheduler passes in
// (see patchSlices).
func StructuredFeatures(f allocator.Features) structured.Features {
	return structured.Features{
		AdminAccess:             f.AdminAccess,
		CompatibilityGroups:     f.CompatibilityGroups,
		ConsumableCapacity:      f.ConsumableCapacity,
		DerivedAttributes:       f.DerivedAttributes,
		DeviceBindingAndStatus:  f.BindingAndStatus(),
		DeviceTaints:            f.DeviceTaints,
		FractionalCapacityRange: f.FractionalCapacityRange,
		ListTypeAttributes:      f.ListTypeAttributes,
		OptionalNodeOperations:  f.OptionalNodeOperations,
		PartitionableDevices:    f.PartitionableDevices,
		PrioritizedList:         f.PrioritizedList,
	}
}

// Engine is the upstream adapter. It is safe for concurrent use; its sessions
// are not. The feature gates come with each session's Inputs.
type Engine struct {
	mu sync.Mutex
	// caches hold compiled expressions per CEL feature set, shared across
	// sessions because compiling a selector costs far more than evaluating
	// it, and expressions repeat across claims.
	caches map[cel.Features]*cel.Cache
}

var _ allocator.Engine = (*Engine)(nil)

// New returns the upstream adapter.
func New() allocator.Engine { return &Engine{caches: map[cel.Features]*cel.Cache{}} }

// SelectorFeatures are the CEL features kube-scheduler compiles selectors
// with under the given allocator features.
func SelectorFeatures(features structured.Features) cel.Features {
	return cel.Features{
		EnableConsumableCapacity: features.ConsumableCapacity,
		EnableListTypeAttributes: features.ListTypeAttributes,
	}
}

// cache returns the expression cache for the CEL features of f.
func (e *Engine) cache(f structured.Features) *cel.Cache {
	cf := SelectorFeatures(f)
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.caches[cf]
	if !ok {
		c = cel.NewCache(celCacheSize, cf)
		e.caches[cf] = c
	}
	return c
}

// Name implements allocator.Engine.
func (e *Engine) Name() string { return EngineName }

// NewSession implements allocator.Engine. It indexes the classes, collects
// the devices in use from in.Allocated and decides whether allocation can
// depend on the node at all.
func (e *Engine) NewSession(ctx context.Context, in allocator.Inputs) (allocator.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	features := allocator.FeaturesOf(in.Features)
	sf := StructuredFeatures(features)
	if features.DeviceTaintRules {
		in.Slices = patchSlices(in.Slices, in.TaintRules)
	}
	s := &session{
		engine:          e,
		features:        sf,
		celCache:        e.cache(sf),
		in:              in,
		classes:         newClassLister(in.Classes),
		state:           newAllocatedState(),
		nodeIndependent: nodeIndependent(in),
	}
	for _, claim := range in.Allocated {
		if claim.Status.Allocation == nil {
			continue
		}
		s.state.add(claim.Status.Allocation)
	}
	return s, nil
}
