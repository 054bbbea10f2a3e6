// Package native is drastack's own allocation engine: a central allocator
// for resource.k8s.io/v1 claims (KEP-4381) with partitionable devices and
// per-device node selection (KEP-4815), list attributes (KEP-5491) and CEL
// constraints over the whole device set (KEP-5254).
//
// It answers the same question as kube-scheduler's structured allocator but
// is built for a controller that allocates many claims against one snapshot:
// a Session indexes devices by node and by request once, keeps selector
// results across claims (and, through the Engine, across sessions), keeps
// counter balances incrementally, and prunes the search by cardinality,
// by attribute value groups and by counters before it descends.
package native

import (
	"context"
	"sync"

	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/drastack/drastack/internal/allocator"
)

const (
	// DefaultMaxSteps bounds one Allocate call when Options.MaxSteps is 0.
	// A step is one device tentatively placed; a million steps take roughly
	// a second with CEL constraints and far less without, well below
	// kube-scheduler's 10 s filter timeout.
	DefaultMaxSteps = 1_000_000

	// selectorCacheEntries is the number of compiled selector expressions
	// kept; like kube-scheduler, a few classes and claim templates cover
	// almost every claim.
	selectorCacheEntries = 1000

	// maxCachedResults bounds the per-device selector results the engine
	// keeps across sessions. The cache is dropped when it grows past this,
	// which only costs re-evaluation.
	maxCachedResults = 2_000_000

	// maxCELMemo bounds the CEL constraint results a session remembers
	// (about 100 MB at most); the memo is dropped when full.
	maxCELMemo = 1_000_000
)

// SelectorFeatures are the CEL features selectors are compiled with: list
// attributes (includes()) and consumable capacity (allowMultipleAllocations),
// the newest environment kube-scheduler offers; stored expressions written
// for older ones still compile in it. kube-scheduler compiles selectors as
// stored expressions, whose environment does not depend on the gates, so
// one cache serves every feature set (checked by the differential test
// under several gate combinations).
var SelectorFeatures = dracel.Features{EnableListTypeAttributes: true, EnableConsumableCapacity: true}

// Option configures an Engine.
type Option func(*Engine)

// WithMaxSteps sets the search bound used when Options.MaxSteps is 0.
func WithMaxSteps(n int64) Option {
	return func(e *Engine) {
		if n > 0 {
			e.maxSteps = n
		}
	}
}

// Engine is the native engine. It is safe for concurrent use; its caches
// (compiled selectors and CEL constraints, selector results per device
// version) are shared by all sessions.
type Engine struct {
	maxSteps    int64
	selectors   *dracel.Cache
	constraints *constraintCompiler

	mu      sync.Mutex
	results map[resultKey]bool
	// shapes holds what each selector expression reads of a device.
	shapes map[string]*selectorShape
}

// resultKey identifies one selector result: a device at one version of its
// slice (UID, resourceVersion and device name) and one expression.
type resultKey struct {
	device string
	expr   string
}

// New returns the native engine.
func New(opts ...Option) allocator.Engine {
	return newEngine(opts...)
}

func newEngine(opts ...Option) *Engine {
	e := &Engine{
		maxSteps:    DefaultMaxSteps,
		selectors:   dracel.NewCache(selectorCacheEntries, SelectorFeatures),
		constraints: newConstraintCompiler(),
		results:     map[resultKey]bool{},
		shapes:      map[string]*selectorShape{},
	}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Name implements allocator.Engine.
func (e *Engine) Name() string { return "native" }

// NewSession implements allocator.Engine.
func (e *Engine) NewSession(ctx context.Context, in allocator.Inputs) (allocator.Session, error) {
	return newSession(ctx, e, in)
}

func (e *Engine) cachedResult(k resultKey) (value, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	value, ok = e.results[k]
	return value, ok
}

func (e *Engine) storeResult(k resultKey, v bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.results) >= maxCachedResults {
		e.results = map[resultKey]bool{}
	}
	e.results[k] = v
}

// shape returns the analysis of a selector expression (selectorkey.go).
func (e *Engine) shape(expr string) *selectorShape {
	e.mu.Lock()
	sh, ok := e.shapes[expr]
	e.mu.Unlock()
	if ok {
		return sh
	}
	sh = analyzeSelector(expr)
	e.mu.Lock()
	if len(e.shapes) >= selectorCacheEntries {
		e.shapes = map[string]*selectorShape{}
	}
	e.shapes[expr] = sh
	e.mu.Unlock()
	return sh
}
