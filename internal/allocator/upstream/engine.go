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

// DefaultFeatures are the allocator features of the cluster drastack targets
// (Kubernetes 1.36 with the feature gates of LOCAL-CLUSTER.md):
// DRAPrioritizedList, DRAPartitionableDevices, DRADeviceTaints,
// DRAConsumableCapacity, DRAListTypeAttributes and DRAAdminAccess, plus
// binding conditions and device status, which 1.36 enables by default.
// Features that are still off there (compatibility groups, derived
// attributes, optional node operations, fractional capacity ranges) stay off,
// so slices and claims that use them are treated as kube-scheduler 1.36 would.
var DefaultFeatures = structured.Features{
	AdminAccess:            true,
	ConsumableCapacity:     true,
	DeviceBindingAndStatus: true,
	DeviceTaints:           true,
	ListTypeAttributes:     true,
	PartitionableDevices:   true,
	PrioritizedList:        true,
}

// Engine is the upstream adapter. It is safe for concurrent use; its sessions
// are not.
type Engine struct {
	features structured.Features
	// celCache is shared across sessions because compiling a selector costs
	// far more than evaluating it, and expressions repeat across claims.
	celCache *cel.Cache
}

var _ allocator.Engine = (*Engine)(nil)

// New returns the upstream adapter with DefaultFeatures.
func New() allocator.Engine { return NewWithFeatures(DefaultFeatures) }

// NewWithFeatures returns the upstream adapter with the given allocator
// features, for tests and for comparing against other feature-gate sets.
func NewWithFeatures(features structured.Features) *Engine {
	return &Engine{
		features: features,
		celCache: cel.NewCache(celCacheSize, SelectorFeatures(features)),
	}
}

// SelectorFeatures are the CEL features kube-scheduler compiles selectors
// with under the given allocator features.
func SelectorFeatures(features structured.Features) cel.Features {
	return cel.Features{
		EnableConsumableCapacity: features.ConsumableCapacity,
		EnableListTypeAttributes: features.ListTypeAttributes,
	}
}

// compiles reports whether a selector expression compiles, to tell which
// selector an upstream compile error is about.
func (e *Engine) compiles(expr string) bool {
	return e.celCache.GetOrCompile(expr).Error == nil
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
	s := &session{
		engine:          e,
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
