package claims

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
)

// writtenTTL bounds how long an allocation this process wrote is added to
// the engine's inputs while the informer cache does not show it. The watch
// delivers a write within milliseconds; the bound only keeps a lost event
// from blocking devices for ever.
const writtenTTL = time.Minute

// snapshot feeds the engine from the informer caches. One engine session
// is kept while the inputs only grow (new allocations are recorded into
// it); anything that can free devices or change what exists (slices,
// classes, nodes, a deallocation or deletion) invalidates it, and the next
// attempt builds a new one. Allocations this process chose are added until
// the cache shows them, so that the next attempt never hands out the same
// devices again.
//
// Allocation decisions are serialized (withSession holds the engine lock
// while a worker allocates and reserves), so the session sees every
// allocation the operator chose; the API writes that follow run in
// parallel. A reserved allocation is part of the inputs from the moment it
// is chosen until the cache shows it, or its write fails (release).
//
// Event handlers call the note* methods from informer goroutines.
type snapshot struct {
	reader client.Reader
	// api reads claims from the API server itself, once, before the first
	// session (see seed); nil skips that (unit tests on a fake client).
	api client.Reader
	// seeded: the claims the API server had when this process started are
	// in written or in the cache.
	seeded bool
	// cfg says which devices are central (spec.claims.central).
	cfg *configStore
	// taintRules: the cluster serves resource.k8s.io/v1 DeviceTaintRule,
	// so the cache holds the rules.
	taintRules bool

	// engine serializes the use of session (an engine session is not safe
	// for concurrent use).
	engine sync.Mutex

	mu sync.Mutex
	// version counts changes that invalidate a session.
	version        uint64
	session        allocator.Session
	sessionEngine  string
	sessionVersion uint64
	// sessionFeatures are the feature switches the session was built with;
	// a new probe result rebuilds it.
	sessionFeatures allocator.Features
	// sessionConfig is the configuration in force when the session's build
	// started: a session is used only while the configuration equals it,
	// whoever stored the new one (an event handler, or a reconcile that
	// read the DRAStack first) and whether or not anything invalidated.
	sessionConfig *configVersion
	recorded      map[types.UID]bool
	// building: sessionFor is building a session outside the lock, from
	// caches that may miss allocations noted meanwhile.
	building bool
	// toRecord are allocations that appeared since the session was built,
	// kept only for a session that is current or being built.
	toRecord []*resourceapi.ResourceClaim
	written  map[types.UID]written
	// labelKeys are the node label keys the current session's slices and
	// central entries read (central.LabelKeys); nil without a session, when
	// every label change counts. buildingKeys are those of the session
	// being built, from the slices it read: a label change that touches none
	// of them cannot make it stale, so it does not start the build over
	// (on a new 1,000-node cluster, label updates came faster than a build).
	labelKeys    map[string]bool
	buildingKeys map[string]bool
	// changedKeys are the label keys changed on some node while a build
	// was reading the caches, before its keys were known: the build
	// judges them once it knows its keys (keysRead). Bumping at once made
	// every build at 1,000 nodes stale while kube-controller-manager
	// labelled nodes (about five a second for three minutes).
	changedKeys map[string]bool
}

type written struct {
	claim *resourceapi.ResourceClaim
	at    time.Time
}

func newSnapshot(reader client.Reader, cfg *configStore) *snapshot {
	return &snapshot{reader: reader, cfg: cfg, recorded: map[types.UID]bool{}, written: map[types.UID]written{}}
}

// invalidate drops the session at the next attempt.
func (s *snapshot) invalidate() {
	s.mu.Lock()
	s.bump()
	s.mu.Unlock()
}

// bump invalidates the session; the caller holds s.mu. The stale session
// is dropped at once, with the UIDs it recorded and the allocations queued
// for it: the next attempt builds a new one from the caches, and until
// then they would hold claims that may be long gone (for ever, if the
// operator allocates nothing again). A worker that holds the engine lock
// keeps using its own reference to the stale session.
func (s *snapshot) bump() {
	s.version++
	s.session, s.recorded, s.toRecord, s.labelKeys, s.buildingKeys = nil, map[types.UID]bool{}, nil, nil, nil
}

// labelsMatter says whether a node's label change, old to cur, can change
// what the current session sees: it touches a key that its slices or the
// central entries select on, or there is no session to judge by.
func (s *snapshot) labelsMatter(old, cur map[string]string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := s.labelKeys
	if s.building {
		keys = s.buildingKeys
		if keys == nil {
			// The build has not read its slices yet: it decides once it
			// has (keysRead).
			if s.changedKeys == nil {
				s.changedKeys = map[string]bool{}
			}
			for k, v := range cur {
				if w, ok := old[k]; !ok || w != v {
					s.changedKeys[k] = true
				}
			}
			for k := range old {
				if _, ok := cur[k]; !ok {
					s.changedKeys[k] = true
				}
			}
			return false
		}
	}
	return keys == nil || central.LabelsChanged(keys, old, cur)
}

// keysRead records the label keys of the build of version, from the
// slices and central entries it read, and reports whether the build is
// still current: a label changed meanwhile on one of those keys makes it
// stale; changes of other keys are forgotten. The caller holds s.mu.
func (s *snapshot) keysRead(version uint64, keys map[string]bool) bool {
	changed := s.changedKeys
	s.changedKeys = nil
	if s.version != version {
		return false
	}
	for k := range changed {
		if keys[k] {
			s.bump()
			return false
		}
	}
	s.buildingKeys = keys
	return true
}

// current says whether the session is up to date or being built, so that
// a new allocation must be queued for it; the caller holds s.mu.
func (s *snapshot) current() bool {
	return s.building || (s.session != nil && s.sessionVersion == s.version && s.cfg.unchangedSince(s.sessionConfig))
}

// noteClaim follows a claim's change: a new allocation is recorded into
// the session at the next attempt; a removed or replaced allocation
// invalidates it. It also forgets a written allocation once the cache
// shows the claim allocated (by this write or a later one).
func (s *snapshot) noteClaim(old, cur *resourceapi.ResourceClaim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur.Status.Allocation != nil {
		delete(s.written, cur.UID)
	}
	switch {
	case old != nil && old.Status.Allocation != nil && cur.Status.Allocation == nil:
		s.bump()
	case old != nil && old.Status.Allocation != nil && old.Status.Allocation != cur.Status.Allocation &&
		!sameResults(old.Status.Allocation, cur.Status.Allocation):
		s.bump()
	case cur.Status.Allocation != nil && (old == nil || old.Status.Allocation == nil) && s.current():
		// Without a current session nothing is queued: the next session
		// is built from the caches, which already show this allocation
		// (otherwise toRecord grew with every allocation in the cluster
		// while the operator allocated nothing).
		s.toRecord = append(s.toRecord, cur)
	}
}

// noteDeleted follows a claim's deletion.
func (s *snapshot) noteDeleted(c *resourceapi.ResourceClaim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.written, c.UID)
	if c.Status.Allocation != nil {
		s.bump()
	}
}

func sameResults(a, b *resourceapi.AllocationResult) bool {
	if len(a.Devices.Results) != len(b.Devices.Results) {
		return false
	}
	for i := range a.Devices.Results {
		x, y := a.Devices.Results[i], b.Devices.Results[i]
		if x.Driver != y.Driver || x.Pool != y.Pool || x.Device != y.Device {
			return false
		}
	}
	return true
}

// withSession runs fn with a session of engine e that reflects the caches
// and every allocation this process reserved, under the engine lock.
func (s *snapshot) withSession(ctx context.Context, e allocator.Engine, fn func(allocator.Session) error) error {
	s.engine.Lock()
	defer s.engine.Unlock()
	sess, err := s.sessionFor(ctx, e)
	// A few rebuilds absorb a burst of changes; beyond that the reconcile
	// is retried with the queue's backoff.
	for range 4 {
		if !errors.Is(err, errSessionChanged) {
			break
		}
		sess, err = s.sessionFor(ctx, e)
	}
	if err != nil {
		return err
	}
	return fn(sess)
}

// sessionFor returns the current session, built anew when the inputs
// changed; the caller holds the engine lock.
func (s *snapshot) sessionFor(ctx context.Context, e allocator.Engine) (allocator.Session, error) {
	s.mu.Lock()
	if s.session != nil && s.sessionVersion == s.version && s.sessionEngine == e.Name() && s.sessionFeatures == s.features() &&
		s.cfg.unchangedSince(s.sessionConfig) {
		pending := s.toRecord
		s.toRecord = nil
		sess := s.session
		for _, c := range pending {
			if s.recorded[c.UID] {
				continue
			}
			if err := sess.Record(c); err != nil {
				s.bump()
				s.mu.Unlock()
				return nil, fmt.Errorf("record allocation of %s: %w", allocator.ClaimKey(c), err)
			}
			s.recorded[c.UID] = true
		}
		s.mu.Unlock()
		return sess, nil
	}
	if !s.seeded && s.api != nil {
		s.mu.Unlock()
		if err := s.seed(ctx); err != nil {
			return nil, err
		}
		s.mu.Lock()
	}
	version := s.version
	config := s.cfg.cur.Load()
	s.toRecord = nil
	// The session this build replaces (one of another engine or feature
	// set) is dropped now: were the build to fail, it would otherwise
	// outlive label changes the build only recorded (changedKeys).
	s.building, s.changedKeys, s.session, s.labelKeys = true, nil, nil, nil
	s.mu.Unlock()
	built := false
	defer func() {
		if !built {
			s.mu.Lock()
			s.building, s.buildingKeys, s.changedKeys = false, nil, nil
			s.mu.Unlock()
		}
	}()

	in, err := s.inputs(ctx)
	if err != nil {
		return nil, err
	}
	keys := central.LabelKeys(in.Slices, s.cfg.get().Central)
	s.mu.Lock()
	// The caches were read: from now on only changes of these keys can
	// make this build stale.
	current := s.keysRead(version, keys)
	s.mu.Unlock()
	if !current {
		return nil, errSessionChanged
	}
	sess, err := e.NewSession(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("start %s engine session: %w", e.Name(), err)
	}
	recorded := make(map[types.UID]bool, len(in.Allocated))
	for _, c := range in.Allocated {
		recorded[c.UID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.building, built = false, true
	if s.version != version {
		// Invalidated while it was built: the caches it read may lack an
		// allocation that the invalidation also dropped from toRecord.
		// Never hand out an incomplete session; the caller retries.
		return nil, errSessionChanged
	}
	s.session, s.sessionEngine, s.sessionVersion, s.recorded = sess, e.Name(), version, recorded
	s.sessionFeatures, s.sessionConfig = *in.Features, config
	s.labelKeys, s.buildingKeys = keys, nil
	// The caches were read at one moment and the reservations (written) at
	// another: an allocation whose cache event arrived in between is in
	// neither, but in toRecord. Record those, and every reservation the
	// session lacks, before anyone allocates from it; otherwise its first
	// Allocate could hand out their devices again.
	for _, c := range s.toRecord {
		if !s.recorded[c.UID] {
			if err := sess.Record(c); err != nil {
				s.bump()
				return nil, fmt.Errorf("record allocation of %s: %w", allocator.ClaimKey(c), err)
			}
			s.recorded[c.UID] = true
		}
	}
	s.toRecord = nil
	for uid, w := range s.written {
		if !s.recorded[uid] {
			if err := sess.Record(w.claim); err != nil {
				s.bump()
				return nil, fmt.Errorf("record reserved allocation of %s: %w", allocator.ClaimKey(w.claim), err)
			}
			s.recorded[uid] = true
		}
	}
	return sess, nil
}

// seed reads every claim from the API server with a consistent list and
// reserves, in written, the allocations the informer cache does not show
// yet. An informer starts from a list the API server may serve from its
// watch cache, which can lag behind what was committed: after a restart,
// allocations the previous operator wrote just before it stopped could be
// missing from the first sessions, and their devices handed out again.
// Once the cache shows them, noteClaim drops the reservations.
func (s *snapshot) seed(ctx context.Context) error {
	var fresh resourceapi.ResourceClaimList
	if err := s.api.List(ctx, &fresh); err != nil {
		return fmt.Errorf("read the claims from the API server: %w", err)
	}
	var cached resourceapi.ResourceClaimList
	if err := s.reader.List(ctx, &cached, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list ResourceClaims: %w", err)
	}
	shown := make(map[types.UID]bool, len(cached.Items))
	for i := range cached.Items {
		if cached.Items[i].Status.Allocation != nil {
			shown[cached.Items[i].UID] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for i := range fresh.Items {
		c := &fresh.Items[i]
		if c.Status.Allocation != nil && !shown[c.UID] {
			if _, ok := s.written[c.UID]; !ok {
				s.written[c.UID] = written{claim: c, at: now}
			}
		}
	}
	s.seeded = true
	return nil
}

// inFlight reports whether this process chose an allocation for the claim
// that the cache does not show yet (a reservation whose write is under way
// or done). Such a claim must not be allocated again: its own earlier
// write re-queues it, and a second attempt on the stale cached object
// would replace, then drop, the reservation of the first, freeing devices
// it holds. noteClaim ends the state when the cache shows the allocation.
func (s *snapshot) inFlight(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.written[uid]
	return ok
}

// errSessionChanged: the cluster changed while a session was built; the
// reconcile is retried at once.
var errSessionChanged = errors.New("the cluster changed while the engine's view of it was built; retrying")

// reserve records an allocation chosen for claim c (c carries it in
// status.allocation) into the session and the inputs, before it is
// written; the caller holds the engine lock.
func (s *snapshot) reserve(sess allocator.Session, c *resourceapi.ResourceClaim, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.written[c.UID]; ok {
		// Callers check inFlight first; never replace a reservation.
		return fmt.Errorf("claim %s already has an allocation being written", allocator.ClaimKey(c))
	}
	s.written[c.UID] = written{claim: c, at: now}
	if s.recorded[c.UID] {
		return nil
	}
	if err := sess.Record(c); err != nil {
		// Rebuild rather than trust the session, and drop the
		// reservation: nothing writes it (it blocked the devices until
		// writtenTTL).
		delete(s.written, c.UID)
		s.bump()
		return fmt.Errorf("record allocation of %s: %w", allocator.ClaimKey(c), err)
	}
	s.recorded[c.UID] = true
	return nil
}

// confirm replaces a reserved allocation by the claim as written, unless
// the cache has shown it already.
func (s *snapshot) confirm(c *resourceapi.ResourceClaim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.written[c.UID]; ok {
		s.written[c.UID] = written{claim: c, at: w.at}
	}
}

// release drops a reserved allocation whose write did not happen: the
// session recorded it, so it must be rebuilt.
func (s *snapshot) release(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.written, uid)
	s.bump()
}

// inputs reads everything the engine needs from the caches. The slices
// are the engine view of package central: DeviceTaintRules applied, and
// devices the operator must not allocate tainted in the view only, so
// that claims passed through central.ForOperator get only central devices
// and claims passed through central.ForScheduler only the others.
func (s *snapshot) inputs(ctx context.Context) (allocator.Inputs, error) {
	var in allocator.Inputs
	var slices resourceapi.ResourceSliceList
	if err := s.reader.List(ctx, &slices, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list ResourceSlices: %w", err)
	}
	var classes resourceapi.DeviceClassList
	if err := s.reader.List(ctx, &classes, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list DeviceClasses: %w", err)
	}
	var nodes corev1.NodeList
	if err := s.reader.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list Nodes: %w", err)
	}
	var rules []resourceapi.DeviceTaintRule
	if s.taintRules {
		var list resourceapi.DeviceTaintRuleList
		if err := s.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return in, fmt.Errorf("list DeviceTaintRules: %w", err)
		}
		rules = list.Items
	}
	allocated, err := s.allocated(ctx)
	if err != nil {
		return in, err
	}
	raw := make([]*resourceapi.ResourceSlice, len(slices.Items))
	for i := range slices.Items {
		raw[i] = &slices.Items[i]
	}
	for i := range classes.Items {
		in.Classes = append(in.Classes, &classes.Items[i])
	}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	part, err := central.NewPartition(central.Inputs{
		Entries: s.cfg.get().Central, Slices: raw, Nodes: in.Nodes, Published: s.cfg.published(),
	})
	if err != nil {
		// The DRAStack controller reports a bad selector as SpecValid
		// False; until it is fixed no device is central.
		part, _ = central.NewPartition(central.Inputs{Slices: raw, Nodes: in.Nodes})
	}
	in.Slices = central.EngineView(part, raw, rules)
	in.Allocated = allocated
	f := s.features()
	in.Features = &f
	return in, nil
}

// features are the engine's switches for a session: the gates the cluster
// probe found (the engine's defaults before a probe), so the engine applies
// them as kube-scheduler would. The DeviceTaintRules are already in the view
// (they say what is central), and DeviceTaints stays on whatever the
// cluster says: the view's own taints are what keep each claim to its side.
func (s *snapshot) features() allocator.Features {
	f := allocator.FeaturesOf(s.cfg.engineFeatures())
	f.DeviceTaints = true
	return f
}

// allocated lists every allocated claim: the cache's, plus allocations
// this process wrote that the cache does not show yet.
func (s *snapshot) allocated(ctx context.Context) ([]*resourceapi.ResourceClaim, error) {
	var claims resourceapi.ResourceClaimList
	if err := s.reader.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list ResourceClaims: %w", err)
	}
	out := make([]*resourceapi.ResourceClaim, 0, len(claims.Items))
	seen := make(map[types.UID]bool, len(claims.Items))
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Status.Allocation != nil {
			out = append(out, c)
			seen[c.UID] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for uid, w := range s.written {
		switch {
		case now.Sub(w.at) > writtenTTL:
			delete(s.written, uid)
		case !seen[uid]:
			out = append(out, w.claim)
		}
	}
	return out, nil
}
