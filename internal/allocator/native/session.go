package native

import (
	"context"
	"fmt"
	"math/big"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/google/cel-go/common/types/ref"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/pool"
)

// deviceID names a device the way allocation results do.
type deviceID struct{ driver, pool, device string }

// device is one allocatable device of the snapshot with everything the
// search asks about it precomputed.
type device struct {
	id    deviceID
	slice *resourceapi.ResourceSlice
	dev   *resourceapi.Device
	// node is set for node-local devices (slice or per-device nodeName).
	node string
	// nodeIdx is the index of node in Session.nodes, -1 when the device is
	// not node-local or its node is not (yet) known.
	nodeIdx int32
	// pool indexes Session.pools.
	pool int32
	// sel indexes Session.nodeSels for devices reachable through a node
	// selector, -1 otherwise.
	sel      int32
	allNodes bool
	// hardTaints: the device has a NoSchedule or NoExecute taint (and
	// DRADeviceTaints is on).
	hardTaints bool
	// unselectable: kube-scheduler never considers the device under the
	// session's gates (binding conditions without DRADeviceBindingConditions
	// and DRAResourceClaimDeviceStatus), not even for All requests.
	unselectable bool
	// refused: the device matches requests but kube-scheduler refuses to
	// allocate it under the session's gates (skipNodeOperations without
	// DRAOptionalNodeOperations, where its allocator knows the field: see
	// experimental; counters without DRAPartitionableDevices), so an All
	// request that matches it fails.
	refused bool
	// nodeOps: the device's slice skips node operations; it can only be
	// allocated for a node that declares DRAOptionalNodeOperations.
	nodeOps bool
	// groups are the device's counter consumptions with their
	// compatibility groups, when DRADeviceCompatibilityGroups is on
	// (compat.go).
	groups []groupUse
	// multi: allowMultipleAllocations, the device is shared (capacity.go).
	multi bool
	// caps are the device's capacities by name (capacity.go).
	caps []devCap
	// capsID identifies caps with their request policies: devices with
	// equal IDs fit every request alike (capacity.go).
	capsID   int32
	consumes []consumption
	// usesCounters: the device lists counter consumptions (possibly of
	// nothing), which makes kube-scheduler check its pool's balances.
	usesCounters bool
	// footprint ranks the share of its counters the device uses (the sum
	// of consumption/capacity, compared exactly): smaller devices are tried
	// first (KEP-4815: fill partitions smallest first). Equal shares have
	// equal ranks, so identical devices are tried in snapshot order.
	footprint int32
	// cacheKey identifies the device version across sessions; empty when the
	// slice has no UID or resourceVersion (objects read from files).
	cacheKey string
	// convertible: every attribute converts to a CEL value, so selector
	// results may be shared with look-alike devices (selectorkey.go).
	convertible bool
}

// poolState is what the search needs to know about an allocatable pool.
type poolState struct {
	// overdrawn counts the pool's counters that the recorded claims consume
	// beyond their capacity (a Degraded pool, for example after the driver
	// shrank a counter). kube-scheduler then refuses every device of the
	// pool that consumes counters, not only those consuming the overdrawn
	// counter, because it checks all counters of the pool after each device;
	// the native engine does the same so that both answer alike.
	overdrawn int32
	// bindingConditions is set when a device of the pool has binding
	// conditions; kube-scheduler tries such pools after all others.
	bindingConditions bool
}

// badPool is a pool the allocator must not use; "All" requests fail when one
// can reach the node, as in kube-scheduler.
type badPool struct {
	id     pool.ID
	slices []*resourceapi.ResourceSlice
	// why is the DevicePool health and reason code, for messages.
	why string
}

// Session implements allocator.Session for the native engine.
type Session struct {
	e *Engine
	// f are the feature gates the session allocates under.
	f allocator.Features
	// stableOnly: under f, kube-scheduler runs its "stable" allocator, which
	// ignores capacity requests instead of refusing them.
	stableOnly bool
	devs       []device
	byID       map[deviceID]int32
	nodes      []*corev1.Node
	// candidates is the number of nodes a central allocation chooses
	// from: the first ones in nodes. Nodes added later, for an allocation
	// on a node that is not among the inputs, are never chosen centrally.
	candidates int
	// nodeIdx maps node names to indexes into nodes.
	nodeIdx map[string]int
	// local lists node-local devices per node index in snapshot order.
	local [][]int32
	// localByName lists node-local devices per node name, including nodes
	// that are not (yet) in nodes.
	localByName map[string][]int32
	// sharedDevs lists the devices that are not node-local.
	sharedDevs []int32
	// reachIDs interns sets of shared devices (see nodeCands.reach).
	reachIDs map[string]int32
	nodeSels []*nodeSel
	badPools []badPool
	// gatedPools are pools with slices that a gate that is off hides
	// from the engine (features.go), for messages only: kube-scheduler
	// ignores such slices as if they did not exist, so they keep no
	// request for all devices off a node. A pool that is bad besides is
	// named once, among badPools (gatedReason).
	gatedPools []badPool
	pools      []poolState
	// blocked caches, per node, whether an incomplete or invalid pool is
	// visible from it (0 unknown, 1 yes, 2 no); see allBlocked.
	blocked []int8

	// remaining is the balance of every counter of every pool, in the
	// counter's own unit (counters.go); bigRemaining holds it instead for
	// counters kept in big arithmetic (nil entries for the others, nil when
	// there are none).
	remaining    []int64
	bigRemaining []*big.Int
	inUse        []bool
	// shares counts the recorded shares of each device (results with a
	// share ID), capUsed what they and the search's tentative shares
	// consume of its capacities (nil while none), and defaultFits the fit
	// of a request without capacity requests per device (capacity.go).
	shares      []int32
	capUsed     [][]resource.Quantity
	defaultFits []*capFit
	// tent is the search's count of tentative choices per device.
	tent     []int32
	recorded map[string]bool
	// capsIDs interns device capacities (device.capsID).
	capsIDs map[string]int32
	// derived caches derived attribute values per expression and device
	// (derived.go).
	derived map[string][]*derivedResult
	// lastPlan is the last Allocate call's plan (planFor).
	lastPlan cachedPlan
	// pack is the Pack policy's view of partitions (pack.go), built on
	// first use; release is what Release needs (release.go).
	pack    *packState
	release *releaseState

	// exprResults caches selector results per expression and device:
	// 0 unknown, 1 true, 2 false.
	exprResults map[string][]int8
	// sharedResults caches selector results per expression and what the
	// expression sees of a device (selectorkey.go).
	sharedResults map[string]map[string]bool
	keyBuf        []byte
	cands         map[string]*candSet
	// classInfos and compiled cache planning work per class and selector.
	classInfos map[*resourceapi.DeviceClass]*classInfo
	compiled   map[string]error
	// attrCache holds attribute values per attribute name and device;
	// stringKeys and intKeys share the lists of scalar values.
	attrCache  map[string][][]string
	stringKeys map[string][]string
	intKeys    map[int64][]string
	// listKeys: some attribute value was a list while
	// DRAListTypeAttributes is off (attrKeysOf).
	listKeys bool
	// celVals holds the CEL constraint view per device, built on demand,
	// and content the identity of its contents (see contentID).
	celVals    []ref.Val
	content    []int32
	contentIDs map[string]int32
	exprIDs    map[string]uint32
	// celMemo remembers CEL constraint results per expression and ordered
	// device list.
	celMemo map[string]bool
	classes map[string]*resourceapi.DeviceClass
	// compat is the state of compatibility groups (compat.go).
	compat compatState
	// nodeOpsDevs: some device's slice skips node operations (device.nodeOps).
	nodeOpsDevs bool
}

var _ allocator.Session = &Session{}

func newSession(ctx context.Context, e *Engine, in allocator.Inputs) (*Session, error) {
	f := allocator.FeaturesOf(in.Features)
	s := &Session{
		e:             e,
		f:             f,
		stableOnly:    stableOnly(f),
		byID:          map[deviceID]int32{},
		nodeIdx:       map[string]int{},
		localByName:   map[string][]int32{},
		reachIDs:      map[string]int32{},
		recorded:      map[string]bool{},
		exprResults:   map[string][]int8{},
		sharedResults: map[string]map[string]bool{},
		cands:         map[string]*candSet{},
		classInfos:    map[*resourceapi.DeviceClass]*classInfo{},
		compiled:      map[string]error{},
		attrCache:     map[string][][]string{},
		stringKeys:    map[string][]string{},
		intKeys:       map[int64][]string{},
		celMemo:       map[string]bool{},
		contentIDs:    map[string]int32{},
		exprIDs:       map[string]uint32{},
		classes:       map[string]*resourceapi.DeviceClass{},
	}
	for _, c := range in.Classes {
		if c != nil {
			s.classes[c.Name] = c
		}
	}
	selIdx := map[*corev1.NodeSelector]int32{}
	var footprints []*big.Rat
	for _, p := range pool.Group(s.visibleSlices(in)) {
		if !p.Allocatable() {
			s.badPools = append(s.badPools, badPool{id: p.ID, slices: p.Slices, why: s.gatedReason(p.ID, badPoolReason(p))})
			continue
		}
		footprints = s.addPool(p, selIdx, footprints)
	}
	s.rankFootprints(footprints)
	// Nodes come after the devices so that each gets its local devices.
	for _, n := range in.Nodes {
		if n != nil {
			s.addNode(n)
		}
	}
	if len(in.Nodes) == 0 {
		// Without Node objects (for example slices read from files) the
		// nodes named by node-local devices are the candidates.
		for i := range s.devs {
			if n := s.devs[i].node; n != "" {
				if _, ok := s.nodeIdx[n]; !ok {
					s.addNode(&corev1.Node{ObjectMeta: metaName(n)})
				}
			}
		}
	}
	s.candidates = len(s.nodes)
	s.inUse = make([]bool, len(s.devs))
	s.tent = make([]int32, len(s.devs))
	s.shares = make([]int32, len(s.devs))
	s.capUsed = make([][]resource.Quantity, len(s.devs))
	s.defaultFits = make([]*capFit, len(s.devs))
	for _, c := range in.Allocated {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("build session: %w", err)
		}
		if err := s.Record(c); err != nil {
			return nil, fmt.Errorf("build session: %w", err)
		}
	}
	return s, nil
}

func (s *Session) addNode(n *corev1.Node) int {
	if i, ok := s.nodeIdx[n.Name]; ok {
		return i
	}
	ni := len(s.nodes)
	s.nodes = append(s.nodes, n)
	s.nodeIdx[n.Name] = ni
	local := s.localByName[n.Name]
	s.local = append(s.local, local)
	for _, d := range local {
		s.devs[d].nodeIdx = int32(ni)
	}
	return ni
}

// addPool adds the devices and counters of an allocatable pool. It appends
// each device's footprint (nil for none) to footprints, for rankFootprints.
func (s *Session) addPool(p *pool.Pool, selIdx map[*corev1.NodeSelector]int32, footprints []*big.Rat) []*big.Rat {
	// Counters of the pool get consecutive indexes in s.remaining.
	pi := int32(len(s.pools))
	s.pools = append(s.pools, poolState{})
	refs, counters, perDevice := poolCounters(p)
	first := int32(len(s.remaining))
	for ci := range refs {
		c := &counters[ci]
		s.remaining = append(s.remaining, c.capacity)
		if !c.small {
			for len(s.bigRemaining) < len(s.remaining) {
				s.bigRemaining = append(s.bigRemaining, nil)
			}
			s.bigRemaining[len(s.remaining)-1] = new(big.Int).Set(c.bigCapacity)
		}
	}
	for di, pd := range p.Devices {
		d := device{
			id:       deviceID{driver: p.Driver, pool: p.ID.Pool, device: pd.Device.Name},
			pool:     pi,
			slice:    pd.Slice,
			dev:      pd.Device,
			node:     pd.NodeName,
			nodeIdx:  -1,
			sel:      -1,
			allNodes: pd.AllNodes,
		}
		if pd.NodeSelector != nil {
			i, ok := selIdx[pd.NodeSelector]
			if !ok {
				i = int32(len(s.nodeSels))
				s.nodeSels = append(s.nodeSels, newNodeSel(pd.NodeSelector))
				selIdx[pd.NodeSelector] = i
			}
			d.sel = i
		}
		if pd.Device.BindingConditions != nil {
			s.pools[pi].bindingConditions = true
		}
		for _, t := range pd.Device.Taints {
			if s.f.DeviceTaints && (t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute) {
				d.hardTaints = true
			}
		}
		d.usesCounters = len(pd.Device.ConsumesCounters) > 0
		d.multi = s.f.ConsumableCapacity && ptr.Deref(pd.Device.AllowMultipleAllocations, false)
		d.unselectable = !s.f.BindingAndStatus() && len(pd.Device.BindingConditions) > 0
		if len(pd.Slice.Spec.SkipNodeOperations) > 0 && experimental(s.f) {
			d.nodeOps = true
			d.refused = !s.f.OptionalNodeOperations
			s.nodeOpsDevs = true
		}
		if !s.f.PartitionableDevices && d.usesCounters {
			d.refused = true
		}
		if s.f.CompatibilityGroups {
			d.groups = s.compatGroups(pi, pd.Device)
		}
		if s.f.ConsumableCapacity {
			// Without the gate kube-scheduler never looks at capacities.
			d.caps = deviceCaps(pd.Device)
			if len(d.caps) > 0 {
				d.capsID = s.internCaps(d.caps)
			}
		}
		d.convertible = convertible(pd.Device)
		var fp *big.Rat
		for _, u := range perDevice[di] {
			c := &counters[u.counter]
			cons := consumption{counter: first + int32(u.counter)}
			var share *big.Rat
			if c.small {
				cons.amount = c.uses[u.use]
				if c.capacity > 0 {
					share = big.NewRat(cons.amount, c.capacity)
				}
			} else {
				cons.big = c.bigUses[u.use]
				if c.bigCapacity.Sign() > 0 {
					share = new(big.Rat).SetFrac(cons.big, c.bigCapacity)
				}
			}
			d.consumes = append(d.consumes, cons)
			if share != nil {
				if fp == nil {
					fp = new(big.Rat)
				}
				fp.Add(fp, share)
			}
		}
		footprints = append(footprints, fp)
		if pd.Slice.UID != "" && pd.Slice.ResourceVersion != "" {
			d.cacheKey = string(pd.Slice.UID) + "/" + pd.Slice.ResourceVersion + "/" + pd.Device.Name
		}
		idx := int32(len(s.devs))
		s.devs = append(s.devs, d)
		s.byID[d.id] = idx
		if d.node != "" {
			s.localByName[d.node] = append(s.localByName[d.node], idx)
		} else {
			s.sharedDevs = append(s.sharedDevs, idx)
		}
	}
	return footprints
}

// rankFootprints sets each device's footprint rank from the exact shares
// addPool computed (footprints[i] for device i; nil means no counters,
// which ranks as zero).
func (s *Session) rankFootprints(footprints []*big.Rat) {
	order := make([]int32, 0, len(footprints))
	for i, fp := range footprints {
		if fp != nil && fp.Sign() != 0 {
			order = append(order, int32(i))
		}
	}
	slices.SortStableFunc(order, func(a, b int32) int { return footprints[a].Cmp(footprints[b]) })
	// Ranks follow the distinct values in order; zero (no counters) gets
	// the rank after the negative values, which the API server rejects but
	// the ranking keeps in order all the same.
	zero := int32(0)
	for k, i := range order {
		if footprints[i].Sign() > 0 {
			break
		}
		if k == 0 || footprints[order[k-1]].Cmp(footprints[i]) != 0 {
			zero++
		}
	}
	for i := range s.devs {
		s.devs[i].footprint = zero
	}
	rank := int32(-1)
	for k, i := range order {
		if k == 0 || footprints[order[k-1]].Cmp(footprints[i]) != 0 {
			rank++
			if rank == zero {
				rank++
			}
		}
		s.devs[i].footprint = rank
	}
}

// Record implements allocator.Session: the devices of an allocated claim
// are in use and consume their counters from now on. Devices allocated with
// admin access neither block others nor consume counters, as in
// kube-scheduler. A result with a share ID is a share of a device: it takes
// its consumed capacity but leaves the device to other shares. A device's
// counters are charged once, whether it is held exclusively or by shares.
// Recording the same claim twice has no further effect.
func (s *Session) Record(claim *resourceapi.ResourceClaim) error {
	if claim == nil || claim.Status.Allocation == nil {
		return nil
	}
	key := string(claim.UID)
	if key == "" {
		key = claim.Namespace + "/" + claim.Name
	}
	if s.recorded[key] {
		return nil
	}
	s.recorded[key] = true
	for _, r := range claim.Status.Allocation.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		i, ok := s.byID[deviceID{r.Driver, r.Pool, r.Device}]
		if !ok {
			// Devices of pools we cannot use change nothing we allocate from.
			continue
		}
		d := &s.devs[i]
		charged := s.inUse[i] || s.shares[i] > 0
		if r.ShareID != nil {
			s.shares[i]++
			s.recordShare(i, r.ConsumedCapacity)
		} else if s.inUse[i] {
			// A double allocation, which the pool validator reports.
			continue
		} else {
			s.inUse[i] = true
		}
		if !charged {
			s.pools[d.pool].overdrawn += s.charge(d, -1)
			s.compat.dirty = true
			s.packTouch(i)
		}
	}
	return nil
}
