package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
)

// Source reads the engine's inputs from the informer caches.
type Source interface {
	// Read returns the inputs of a session except Allocated, which the
	// ledger fills from its own states: the slices as the engine sees them,
	// classes, nodes and features; the node label keys the slices and the
	// configuration select on; and the configuration they were read under.
	Read(ctx context.Context) (View, error)
	// Current reports whether config (a View's Config) is the configuration
	// in force: a session is used only under the configuration it was
	// built for. Configurations compare by identity.
	Current(config any) bool
}

// View is what Source.Read returns.
type View struct {
	Inputs    allocator.Inputs
	LabelKeys map[string]bool
	Config    any
}

// errSessionChanged: the cluster changed while a session was built.
var errSessionChanged = errors.New("the cluster changed while the engine's view of it was built; retrying")

// sessionCache keeps one engine session while the inputs only grow (new
// allocations are recorded into it); anything that can free devices or
// change what exists invalidates it (bumpLocked), and the next decision
// builds a new one. Its fields are guarded by Ledger.mu.
type sessionCache struct {
	// version counts invalidations.
	version uint64
	cur     builtSession
	build   buildState
	// recorded are the claims the current session counts.
	recorded map[types.UID]bool
}

// builtSession is a session and what it was built for.
type builtSession struct {
	session allocator.Session
	engine  string
	version uint64
	config  any
	// labelKeys are the node label keys its slices and configuration read
	// (nil without a session: every label change counts).
	labelKeys map[string]bool
}

// buildState follows a session being built outside the lock.
type buildState struct {
	building bool
	// toRecord are allocations that appeared since the build took the
	// allocated claims.
	toRecord []*resourceapi.ResourceClaim
	// keys are the build's label keys once it has read its slices;
	// changed are the label keys changed on some node before that, judged
	// once the keys are known (keysRead).
	keys, changed map[string]bool
}

// Invalidate drops the session: something that can free devices or change
// what exists changed (slices, classes, nodes, rules, the configuration).
func (l *Ledger) Invalidate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bumpLocked()
}

// bumpLocked invalidates the session and drops it with what was queued for
// it. A decision holding the old session keeps using its own reference.
func (l *Ledger) bumpLocked() {
	l.sess.version++
	l.sess.cur = builtSession{}
	l.sess.recorded = map[types.UID]bool{}
	l.sess.build.toRecord, l.sess.build.keys = nil, nil
}

// queueLocked records a new allocation into the session at the next
// decision, if there is a session that is current or being built.
func (l *Ledger) queueLocked(c *resourceapi.ResourceClaim) {
	if l.sess.build.building || l.currentLocked() {
		l.sess.build.toRecord = append(l.sess.build.toRecord, c)
	}
}

func (l *Ledger) currentLocked() bool {
	cur := &l.sess.cur
	return cur.session != nil && cur.version == l.sess.version && l.src.Current(cur.config)
}

// LabelsMatter says whether a node's label change, old to cur, can change
// what the current session sees: it touches a key that its slices or the
// configuration select on, or there is no session to judge by. While a
// session is built and has not read its slices yet, the change is kept and
// judged once it has (keysRead): at 1,000 new nodes kube-controller-manager
// adds labels faster than a session is built.
func (l *Ledger) LabelsMatter(old, cur map[string]string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := l.sess.cur.labelKeys
	if l.sess.build.building {
		keys = l.sess.build.keys
		if keys == nil {
			if l.sess.build.changed == nil {
				l.sess.build.changed = map[string]bool{}
			}
			for k, v := range cur {
				if w, ok := old[k]; !ok || w != v {
					l.sess.build.changed[k] = true
				}
			}
			for k := range old {
				if _, ok := cur[k]; !ok {
					l.sess.build.changed[k] = true
				}
			}
			return false
		}
	}
	return keys == nil || central.LabelsChanged(keys, old, cur)
}

// keysRead records the label keys of the build of version and reports
// whether the build is still current: a label changed meanwhile on one of
// its keys makes it stale.
func (l *Ledger) keysRead(version uint64, keys map[string]bool) bool {
	changed := l.sess.build.changed
	l.sess.build.changed = nil
	if l.sess.version != version {
		return false
	}
	for k := range changed {
		if keys[k] {
			l.bumpLocked()
			return false
		}
	}
	l.sess.build.keys = keys
	return true
}

// session returns the current session of engine e, recording what was
// queued for it, or builds a new one. Only the holder of the decision turn
// calls it.
func (l *Ledger) session(ctx context.Context, e allocator.Engine) (allocator.Session, error) {
	l.mu.Lock()
	if l.currentLocked() && l.sess.cur.engine == e.Name() {
		pending := l.sess.build.toRecord
		l.sess.build.toRecord = nil
		sess := l.sess.cur.session
		for _, c := range pending {
			if l.sess.recorded[c.UID] {
				continue
			}
			if err := sess.Record(c); err != nil {
				l.bumpLocked()
				l.mu.Unlock()
				return nil, fmt.Errorf("record the allocation of %s: %w", allocator.ClaimKey(c), err)
			}
			l.sess.recorded[c.UID] = true
		}
		l.mu.Unlock()
		return sess, nil
	}
	version := l.sess.version
	allocated := l.allocatedLocked()
	// The session this build replaces is dropped now: were the build to
	// fail, it would otherwise outlive label changes the build only kept.
	l.sess.cur = builtSession{}
	l.sess.build = buildState{building: true}
	l.mu.Unlock()
	built := false
	defer func() {
		if !built {
			l.mu.Lock()
			l.sess.build = buildState{}
			l.mu.Unlock()
		}
	}()

	view, err := l.src.Read(ctx)
	if err != nil {
		return nil, err
	}
	keys := maps.Clone(view.LabelKeys)
	if keys == nil {
		// Read, and empty: no label change can make the session stale.
		keys = map[string]bool{}
	}
	l.mu.Lock()
	current := l.keysRead(version, keys)
	l.mu.Unlock()
	if !current {
		return nil, errSessionChanged
	}
	in := view.Inputs
	in.Allocated = allocated
	sess, err := e.NewSession(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("start the %s engine session: %w", e.Name(), err)
	}
	recorded := make(map[types.UID]bool, len(allocated))
	for _, c := range allocated {
		recorded[c.UID] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	toRecord := l.sess.build.toRecord
	l.sess.build, built = buildState{}, true
	if l.sess.version != version {
		// Invalidated while it was built: never hand out a session that
		// may miss a freed or changed allocation.
		return nil, errSessionChanged
	}
	l.sess.cur = builtSession{session: sess, engine: e.Name(), version: version, config: view.Config, labelKeys: keys}
	l.sess.recorded = recorded
	for _, c := range toRecord {
		if recorded[c.UID] {
			continue
		}
		if err := sess.Record(c); err != nil {
			l.bumpLocked()
			return nil, fmt.Errorf("record the allocation of %s: %w", allocator.ClaimKey(c), err)
		}
		recorded[c.UID] = true
	}
	return sess, nil
}
