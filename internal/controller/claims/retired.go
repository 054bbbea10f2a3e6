package claims

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drastack/drastack/internal/ledger"
)

// retiredRules are the central DeviceTaintRules this process deleted or
// narrowed, each with the resourceVersion it acted on. Until the cache
// shows such a rule at a newer version (narrowed) or not at all
// (deleted), the engine view leaves it out (cacheSource.Read): its devices
// are then no central device of a joined pool, and the operator allocates
// none of them. Without it, an engine session built right after the taint
// loop deleted a pool's rule read the rule back from a cache that had not
// seen the delete yet and allocated a device kube-scheduler was free to
// give away (the simulation's seed 11928).
//
// A rule is retired before the request that deletes or narrows it is
// sent, so an ambiguous answer changes nothing. A rule whose delete never
// committed stays left out until something writes it again (the taint
// loop's next delete or update of it, or the next term's sweep, which
// rewrites the fence annotation of every rule): safe, since the operator
// then allocates less, not more.
type retiredRules struct {
	mu sync.Mutex
	at map[types.UID]ledger.Version
}

// retire records that this process deletes or narrows rule as cached.
func (r *retiredRules) retire(rule *resourceapi.DeviceTaintRule) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[types.UID]ledger.Version{}
	}
	if v := ledger.ParseVersion(rule.ResourceVersion); v > r.at[rule.UID] {
		r.at[rule.UID] = v
	}
}

// stale reports whether rule, as cached, is a version this process
// retired (or an older one).
func (r *retiredRules) stale(rule *resourceapi.DeviceTaintRule) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.at[rule.UID]
	return ok && ledger.ParseVersion(rule.ResourceVersion) <= v
}

// current returns the cached rules without the stale ones, and forgets
// the retirements the cache has caught up with: rules it no longer holds,
// versions it has seen past.
func (r *retiredRules) current(rules []resourceapi.DeviceTaintRule) []resourceapi.DeviceTaintRule {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.at) == 0 {
		return rules
	}
	present := make(map[types.UID]bool, len(r.at))
	out := make([]resourceapi.DeviceTaintRule, 0, len(rules))
	for i := range rules {
		rule := &rules[i]
		v, ok := r.at[rule.UID]
		if ok {
			present[rule.UID] = true
			if ledger.ParseVersion(rule.ResourceVersion) <= v {
				continue
			}
			delete(r.at, rule.UID)
		}
		out = append(out, *rule)
	}
	for uid := range r.at {
		if !present[uid] {
			delete(r.at, uid)
		}
	}
	return out
}
