// Package eventlimit bounds the Normal Events a controller emits. A burst
// of a thousand allocations would otherwise cost a thousand Event writes
// beside the thousand allocation writes, and client-go's events.k8s.io
// broadcaster can neither aggregate them (each is about another object)
// nor limit them. Warnings always pass: they say what someone must act
// on, and the controllers emit them only when an outcome is news.
package eventlimit

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Defaults of Options: a trickle of allocations gets an Event each, a
// burst gets its first fifty and then five a second.
const (
	DefaultQPS      = 5
	DefaultBurst    = 50
	DefaultInterval = 30 * time.Second
)

// ReasonHeldBack is the reason of the summary Event.
const ReasonHeldBack = "EventsHeldBack"

// Options configure a Recorder.
type Options struct {
	// QPS and Burst bound the Normal Events passed on: a token bucket
	// (client-go's flowcontrol, the one its clients use) of Burst tokens
	// refilled at QPS a second. Defaults DefaultQPS and DefaultBurst.
	QPS   float32
	Burst int
	// Interval is how often the Events held back are summarised; default
	// DefaultInterval.
	Interval time.Duration
	// Target returns the object the summary Event is about (nil: the
	// summary is only logged).
	Target func(context.Context) runtime.Object
	// Clock defaults to the real one; tests replace it.
	Clock clock.PassiveClock
}

// Recorder passes Warning Events on, and Normal Events within the limit;
// it counts the Normal Events it holds back, and Start summarises them every
// interval in one Normal Event (ReasonHeldBack) on the target and in the
// log.
type Recorder struct {
	inner    events.EventRecorder
	limiter  flowcontrol.PassiveRateLimiter
	target   func(context.Context) runtime.Object
	interval time.Duration
	qps      float32
	burst    int

	mu   sync.Mutex
	held map[heldKey]int
}

var _ events.EventRecorder = (*Recorder)(nil)

// heldKey groups the Events held back for the summary.
type heldKey struct{ reason, kind, namespace string }

// New wraps inner.
func New(inner events.EventRecorder, o Options) *Recorder {
	if o.QPS <= 0 {
		o.QPS = DefaultQPS
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Recorder{
		inner:    inner,
		limiter:  flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(o.QPS, o.Burst, o.Clock),
		target:   o.Target,
		interval: o.Interval,
		qps:      o.QPS,
		burst:    o.Burst,
		held:     map[heldKey]int{},
	}
}

// Eventf implements events.EventRecorder.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if eventtype != corev1.EventTypeNormal || r.limiter.TryAccept() {
		r.inner.Eventf(regarding, related, eventtype, reason, action, note, args...)
		return
	}
	k := heldKey{reason: reason, kind: kindOf(regarding)}
	if m, err := meta.Accessor(regarding); err == nil {
		k.namespace = m.GetNamespace()
	}
	r.mu.Lock()
	r.held[k]++
	r.mu.Unlock()
}

// kindOf names the kind of a typed object (whose TypeMeta the cache
// leaves empty) by its Go type.
func kindOf(obj runtime.Object) string {
	if obj == nil {
		return "object"
	}
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	t := reflect.TypeOf(obj)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// Summary returns what was held back since the last call, as one line,
// and forgets it ("" when nothing was).
func (r *Recorder) Summary() string {
	r.mu.Lock()
	held := r.held
	r.held = map[heldKey]int{}
	r.mu.Unlock()
	if len(held) == 0 {
		return ""
	}
	keys := make([]heldKey, 0, len(held))
	total := 0
	for k, n := range held {
		keys = append(keys, k)
		total += n
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if held[a] != held[b] {
			return held[a] > held[b]
		}
		if a.reason != b.reason {
			return a.reason < b.reason
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		return a.namespace < b.namespace
	})
	parts := make([]string, 0, min(len(keys), maxParts)+1)
	for i, k := range keys {
		if i == maxParts {
			parts = append(parts, fmt.Sprintf("and %d more kinds", len(keys)-maxParts))
			break
		}
		where := ""
		if k.namespace != "" {
			where = " in namespace " + k.namespace
		}
		parts = append(parts, fmt.Sprintf("%d %s on %ss%s", held[k], k.reason, k.kind, where))
	}
	return fmt.Sprintf("%d Normal Events held back (at most %d at once, then %g a second): %s", total, r.burst, r.qps, strings.Join(parts, ", "))
}

// maxParts bounds the groups a summary names, so that its note stays far
// below the 1 kB events.k8s.io allows.
const maxParts = 8

// Start summarises what was held back every interval until ctx ends
// (manager.Runnable).
func (r *Recorder) Start(ctx context.Context) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.flush(ctx)
		}
	}
}

func (r *Recorder) flush(ctx context.Context) {
	s := r.Summary()
	if s == "" {
		return
	}
	log.FromContext(ctx).Info("Events held back", "summary", s)
	if r.target == nil {
		return
	}
	if obj := r.target(ctx); obj != nil {
		// A summary is about many objects; it is not itself limited.
		r.inner.Eventf(obj, nil, corev1.EventTypeNormal, ReasonHeldBack, "Summarize", "%s", s)
	}
}
