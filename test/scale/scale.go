package scale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/internal/simdriver"
	"github.com/drastack/drastack/test/cluster"
)

// What the simulated cluster runs.
const (
	// Namespace holds the burst's claims and the probe's dry runs.
	Namespace = "scale"
	// GPUDriver publishes two A100 40GB GPUs per node with MIG-like
	// partitions (shared counters); its whole GPUs are central devices.
	GPUDriver = "gpu.scale.drastack.io"
	// NICDriver publishes four NICs per node.
	NICDriver = "nic.scale.drastack.io"
	// TPUDriver is the central publisher's multi-host driver.
	TPUDriver = "tpu.scale.drastack.io"
	// GPUClass selects whole GPUs; its claims are immediate.
	GPUClass = "scale-gpu"
	// TPUClass selects the multi-host partitions.
	TPUClass = "scale-tpu"
	// NICClass selects NICs, which are not central: kube-scheduler
	// allocates them (Config.SchedulerBurst).
	NICClass = "scale-nic"

	tpuSelectLabel = "scale.drastack.io/tpu"
	tpuDomainLabel = "scale.drastack.io/tpu-domain"
	tpuCoordsLabel = "scale.drastack.io/tpu-coords"
	// A domain is 4x4 hosts of 2x2 chips, published as 29 partitions.
	domainHostsX, domainHostsY = 4, 4
	domainHosts                = domainHostsX * domainHostsY
)

// Inventory is what the simulated driver publishes on every node: two
// drivers, GPUs partitioned with shared counters and NICs.
func Inventory() *simdriver.Inventory {
	sel := map[string]string{cluster.KwokTypeLabel: cluster.KwokTypeValue}
	return &simdriver.Inventory{
		Topology: simdriver.Topology{PCIeRoots: 2},
		Drivers: []simdriver.DriverSpec{
			{Name: GPUDriver, NodeSelector: sel, Devices: []simdriver.DeviceGroup{{Kind: simdriver.KindGPU, Count: 2, Model: "A100-SXM4-40GB", Partitions: simdriver.ProfileA100_40GB}}},
			{Name: NICDriver, NodeSelector: sel, Devices: []simdriver.DeviceGroup{{Kind: simdriver.KindNIC, Count: 4, Bandwidth: "400G"}}},
		},
	}
}

// Config configures Run.
type Config struct {
	// Nodes is how many kwok nodes the cluster gets (required).
	Nodes int
	// Domains is how many multi-host domains of 16 hosts the central
	// publisher publishes (on the first 16 x Domains nodes). Default 2.
	Domains int
	// Claims is the size of the burst of immediate claims, each for one
	// whole GPU (at most 2 x Nodes). Default Nodes.
	Claims int
	// RepublishPercent of the nodes republish their pools under a new
	// generation. Default 10.
	RepublishPercent int
	// SchedulerBurst adds a phase after the operator's burst: as many
	// pods, each with a claim for one NIC, which kube-scheduler allocates,
	// measured as the operator's burst is (Report.SchedulerBurst), so the
	// two compare in one run on the same cluster.
	SchedulerBurst bool
	// SchedulerQPS and SchedulerQPSBurst are kube-scheduler's client-side
	// limits; default the operator's (operator.DefaultKubeAPIQPS and
	// DefaultKubeAPIBurst), so neither side has more room than the other.
	SchedulerQPS      float32
	SchedulerQPSBurst int
	// PublishSteps splits the initial publication: the nodes are created
	// in that many equal steps, the next once every DevicePool of the
	// previous is right, and the operator's memory is measured after each
	// (Report.Memory), so that the memory each step of nodes adds can be
	// compared. Default 1.
	PublishSteps int
	// NodeHeartbeat slows kwok (cluster.Options.NodeHeartbeat). Default 60s.
	NodeHeartbeat time.Duration
	// CRDDir and DeployDir are config/crd/bases and config/default.
	CRDDir, DeployDir string
	// OperatorExecutable, when set, runs the operator in a child process
	// started from it (a program that calls OperatorProcessMain first),
	// so that its CPU time and memory can be measured. Empty runs it in
	// this process.
	OperatorExecutable string
	// HeapProfile, with OperatorExecutable, is where the operator process
	// writes its in-use heap profile when it is stopped.
	HeapProfile string
	// Tuning overrides defaults of the operator.
	Tuning Tuning
	// CPUProfile, with OperatorExecutable, is where the operator process
	// writes its CPU profile of the whole run.
	CPUProfile string
	// LogDir keeps the component and operator logs. Default: a temporary
	// folder removed with the cluster.
	LogDir string
	// PhaseTimeout bounds each wait. Default 15m.
	PhaseTimeout time.Duration
	// CheckInterval is how often the DevicePools are compared with the
	// model. Default 1s.
	CheckInterval time.Duration
	// PhaseEnded, when set, is called at the end of each phase, with its
	// name, while the cluster still runs (the harness's own heap profile).
	PhaseEnded func(phase string)
	// Logf receives progress lines. Default: discard.
	Logf func(format string, args ...any)
}

func (c *Config) defaults() error {
	if c.Nodes <= 0 {
		return errors.New("scale: Config.Nodes must be positive")
	}
	if c.Domains <= 0 {
		c.Domains = 2
	}
	if c.Domains*domainHosts > c.Nodes {
		return fmt.Errorf("scale: %d domains of %d hosts need %d nodes, have %d", c.Domains, domainHosts, c.Domains*domainHosts, c.Nodes)
	}
	if c.Claims <= 0 {
		c.Claims = c.Nodes
	}
	if c.Claims > 2*c.Nodes {
		return fmt.Errorf("scale: %d claims for one whole GPU each, but %d nodes have only %d GPUs", c.Claims, c.Nodes, 2*c.Nodes)
	}
	if c.RepublishPercent <= 0 {
		c.RepublishPercent = 10
	}
	if c.SchedulerQPS <= 0 {
		c.SchedulerQPS = operator.DefaultKubeAPIQPS
	}
	if c.SchedulerQPSBurst <= 0 {
		c.SchedulerQPSBurst = operator.DefaultKubeAPIBurst
	}
	if c.PublishSteps <= 0 {
		c.PublishSteps = 1
	}
	if c.Nodes/c.PublishSteps < c.Domains*domainHosts {
		return fmt.Errorf("scale: the first of %d publication steps has %d nodes, fewer than the %d hosts of %d domains", c.PublishSteps, c.Nodes/c.PublishSteps, c.Domains*domainHosts, c.Domains)
	}
	if c.NodeHeartbeat <= 0 {
		c.NodeHeartbeat = time.Minute
	}
	if c.CRDDir == "" || c.DeployDir == "" {
		return errors.New("scale: Config.CRDDir and Config.DeployDir are required")
	}
	if c.PhaseTimeout <= 0 {
		c.PhaseTimeout = 15 * time.Minute
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// BurstStats are the figures of a burst: allocations per second (first
// claim created to last allocation seen) and the latency of each claim
// from its create call to its allocation seen in a watch.
type BurstStats struct {
	Claims int
	Rate   float64
	Wall   time.Duration
	// Create is how long creating the burst's objects took.
	Create        time.Duration
	P50, P99, Max time.Duration
}

// Phase is one phase of the run, from the operator's point of view.
type Phase struct {
	Name string
	// Wall is how long the phase took.
	Wall time.Duration
	// CPU is the operator process's CPU time in the phase (0 when the
	// operator ran in-process).
	CPU time.Duration
	// Requests the operator made in the phase.
	Requests RequestCounts
	// Processes is what the operator (when in a child process), each
	// process of the control plane and the harness used in the phase, by
	// name (Operator, Harness, the binaries' names).
	Processes map[string]ProcessUsage
}

// MemoryReport is the operator's memory after a full collection
// (Memory), before the simulated driver published and after each
// publication step.
type MemoryReport struct {
	// Measured is false when the operator ran in the harness's process.
	Measured bool
	// Before is measured once the operator runs, before any slice.
	Before Memory
	// Steps is measured after each publication step, once every
	// DevicePool was right; StepNodes are the nodes each step added.
	Steps     []Memory
	StepNodes []int
}

// PerNode is what each node of publication step i added to the
// operator's resident set and live heap, in bytes.
func (m MemoryReport) PerNode(i int) (rss, heap float64) {
	if !m.Measured || i >= len(m.Steps) || m.StepNodes[i] == 0 {
		return 0, 0
	}
	prev := m.Before
	if i > 0 {
		prev = m.Steps[i-1]
	}
	n := float64(m.StepNodes[i])
	return float64(m.Steps[i].RSS-prev.RSS) / n, float64(m.Steps[i].HeapLive-prev.HeapLive) / n
}

// PerNodeAll is what each node of the whole publication added.
func (m MemoryReport) PerNodeAll() (rss, heap float64) {
	if !m.Measured || len(m.Steps) == 0 {
		return 0, 0
	}
	n := 0
	for _, k := range m.StepNodes {
		n += k
	}
	last := m.Steps[len(m.Steps)-1]
	return float64(last.RSS-m.Before.RSS) / float64(n), float64(last.HeapLive-m.Before.HeapLive) / float64(n)
}

// Report is what Run measured. Problems lists every correctness failure;
// a run without problems had every DevicePool right after each phase,
// every burst claim allocated and no device allocated twice.
type Report struct {
	Config Config
	// Pools, Slices and Devices at the end of the initial publication.
	Pools, Slices, Devices int
	// ClusterStart: control plane up; NodesReady: nodes created and Ready.
	ClusterStart, NodesReady time.Duration
	// Publish is from the simulated driver's start to its last slice.
	Publish time.Duration
	// SyncCorrect is from the last slice written to every DevicePool
	// correct.
	SyncCorrect time.Duration
	// Burst is the operator's burst of immediate claims; SchedulerBurst
	// kube-scheduler's of pods (nil unless Config.SchedulerBurst).
	Burst          BurstStats
	SchedulerBurst *BurstStats
	// BurstPoolsCorrect is from the operator's last allocation to every
	// DevicePool right.
	BurstPoolsCorrect                   time.Duration
	Republished                         int
	RepublishCorrect, RepublishFromEdit time.Duration
	// RepublishFirstSlice and RepublishLastSlice are the first and last
	// slice events after the relabel, from the relabel: how long the
	// simulated driver took.
	RepublishFirstSlice, RepublishLastSlice time.Duration
	Phases                                  []Phase
	// Requests is every request of the operator; Usage its process.
	Requests RequestCounts
	Usage    Usage
	// Memory is the operator's memory around the publication.
	Memory MemoryReport
	// LoadBefore and LoadAfter are /proc/loadavg.
	LoadBefore, LoadAfter string
	Problems              []string
}

func (r *Report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// watcher follows the objects the checks read, and when they last
// changed.
type watcher struct {
	cache     cache.Cache
	lastSlice atomic.Int64 // unix nanoseconds of the last slice event
	lastAny   atomic.Int64 // ... of the last event of any watched kind
	// firstSlice is the first slice event after mark (0: none yet).
	mark, firstSlice atomic.Int64
	// sliceEvents counts slice adds, updates and deletes, for the
	// progress lines.
	sliceEvents    [3]atomic.Int64
	mu             sync.Mutex
	allocatedAt    map[string]time.Time
	lastAllocation time.Time
}

func (w *watcher) touch(slice bool) {
	now := time.Now().UnixNano()
	if slice {
		w.lastSlice.Store(now)
		if m := w.mark.Load(); m != 0 && now >= m {
			w.firstSlice.CompareAndSwap(0, now)
		}
	}
	w.lastAny.Store(now)
}

// markAt starts waiting for the first slice event after t.
func (w *watcher) markAt(t time.Time) {
	w.firstSlice.Store(0)
	w.mark.Store(t.UnixNano())
}

func startWatcher(ctx context.Context, cfg *rest.Config) (*watcher, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: operator.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("watch cache: %w", err)
	}
	w := &watcher{cache: c, allocatedAt: map[string]time.Time{}}
	handler := func(slice bool, onClaim bool) toolscache.ResourceEventHandler {
		return toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				w.touch(slice)
				if slice {
					w.sliceEvents[0].Add(1)
				}
				if onClaim {
					w.claimSeen(obj)
				}
			},
			UpdateFunc: func(_, obj any) {
				w.touch(slice)
				if slice {
					w.sliceEvents[1].Add(1)
				}
				if onClaim {
					w.claimSeen(obj)
				}
			},
			DeleteFunc: func(any) {
				w.touch(slice)
				if slice {
					w.sliceEvents[2].Add(1)
				}
			},
		}
	}
	for _, h := range []struct {
		obj          client.Object
		slice, claim bool
	}{
		{&resourceapi.ResourceSlice{}, true, false},
		{&resourceapi.ResourceClaim{}, false, true},
		{&resourceapi.DeviceTaintRule{}, false, false},
		{&v1alpha1.DevicePool{}, false, false},
	} {
		inf, err := c.GetInformer(ctx, h.obj)
		if err != nil {
			return nil, fmt.Errorf("informer for %T: %w", h.obj, err)
		}
		if _, err := inf.AddEventHandler(handler(h.slice, h.claim)); err != nil {
			return nil, fmt.Errorf("handler for %T: %w", h.obj, err)
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, errors.New("watch cache did not sync")
	}
	return w, nil
}

func (w *watcher) claimSeen(obj any) {
	cl, ok := obj.(*resourceapi.ResourceClaim)
	if !ok || cl.Status.Allocation == nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.allocatedAt[cl.Name]; !seen {
		w.allocatedAt[cl.Name] = now
		w.lastAllocation = now
	}
}

// nodeLabels are the labels Run gave each node (what sim.Render sees).
type nodeLabels struct {
	mu     sync.Mutex
	labels map[string]map[string]string
}

// unpublished counts the pools the simulated driver should publish (by
// sim.Render of each node) that are not in the snapshot in full at their
// expected generation, and the multi-host domains without a complete
// pool.
func (n *nodeLabels) unpublished(s *snapshot, inv *simdriver.Inventory, domains int) (int, error) {
	type seen struct {
		gen   int64
		n     int
		count int64
	}
	have := map[pool.ID]*seen{}
	for _, sl := range s.slices {
		id := pool.KeyOf(sl)
		h := have[id]
		if h == nil || sl.Spec.Pool.Generation > h.gen {
			h = &seen{gen: sl.Spec.Pool.Generation}
			have[id] = h
		}
		if sl.Spec.Pool.Generation == h.gen {
			h.n++
			h.count = sl.Spec.Pool.ResourceSliceCount
		}
	}
	missing := 0
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, labels := range n.labels {
		pools, err := simdriver.Render(inv, name, labels)
		if err != nil {
			return 0, err
		}
		for _, p := range pools {
			h := have[pool.ID{Driver: p.Driver, Pool: p.Name}]
			if h == nil || h.gen < p.Generation || h.n != len(p.Slices) || h.count != int64(len(p.Slices)) {
				missing++
			}
		}
	}
	tpu := 0
	for id, h := range have {
		if id.Driver == TPUDriver && int64(h.n) == h.count {
			tpu++
		}
	}
	if tpu < domains {
		missing += domains - tpu
	}
	return missing, nil
}

// Run starts a cluster, runs the scenario and returns what it measured.
// An error means the run could not be completed; correctness failures are
// in Report.Problems.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Tuning.MemoryLimit == 0 && cfg.OperatorExecutable != "" {
		// As deployed. (An operator in this process gets none: the limit
		// is a setting of the whole process.)
		limit, err := deployedMemoryLimit(cfg.DeployDir)
		if err != nil {
			return nil, err
		}
		cfg.Tuning.MemoryLimit = limit
	}
	rep := &Report{Config: cfg, LoadBefore: loadavg()}
	logf := cfg.Logf

	begin := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		CRDDirectoryPaths: []string{cfg.CRDDir},
		LogDir:            cfg.LogDir,
		NodeHeartbeat:     cfg.NodeHeartbeat,
		StartTimeout:      5 * time.Minute,
		SchedulerArgs: []string{
			fmt.Sprintf("--kube-api-qps=%g", cfg.SchedulerQPS),
			fmt.Sprintf("--kube-api-burst=%d", cfg.SchedulerQPSBurst),
		},
		Logf: logf,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			logf("stop the cluster: %v", err)
		}
	}()
	// Watches and informers end before the control plane stops.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep.ClusterStart = time.Since(begin)
	logDir := cfg.LogDir
	if logDir == "" {
		logDir = c.LogDir
	}

	fast := rest.CopyConfig(c.Config)
	fast.QPS, fast.Burst = 2000, 2000
	cs, err := kubernetes.NewForConfig(fast)
	if err != nil {
		return nil, err
	}
	crc, err := client.New(c.Config, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		return nil, err
	}
	if err := setup(ctx, cs, crc, cfg); err != nil {
		return nil, err
	}

	// Nodes of the first publication step.
	steps := stepSizes(cfg.Nodes, cfg.PublishSteps)
	begin = time.Now()
	nodes := &nodeLabels{labels: map[string]map[string]string{}}
	if err := createNodes(ctx, cs, cfg, nodes, 0, steps[0]); err != nil {
		return nil, err
	}
	if err := waitNodesReady(ctx, cs, cfg, steps[0]); err != nil {
		return nil, err
	}
	rep.NodesReady = time.Since(begin)
	logf("%d nodes Ready in %s", steps[0], rep.NodesReady.Round(time.Millisecond))

	w, err := startWatcher(ctx, c.Config)
	if err != nil {
		return nil, err
	}

	// The operator; its memory once it runs; then the simulated driver.
	phaseStart := time.Now()
	op, err := startOperator(ctx, c, cfg.DeployDir, Namespace, cfg.OperatorExecutable, logDir, cfg.HeapProfile, cfg.CPUProfile, cfg.Tuning)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _, _ = op.stop()
		}
	}()
	mon := startMonitor(c.Dir, op.pid())
	defer mon.close()
	var phaseReq RequestCounts
	var phaseCPU time.Duration
	endPhase := func(name string) {
		req, err := op.requests(ctx)
		if err != nil {
			rep.problem("phase %s: %v", name, err)
		}
		cpu, _ := op.cpu()
		rep.Phases = append(rep.Phases, Phase{Name: name, Wall: time.Since(phaseStart), CPU: cpu - phaseCPU, Requests: req.Minus(phaseReq),
			Processes: mon.end()})
		if cfg.PhaseEnded != nil {
			cfg.PhaseEnded(name)
		}
		phaseReq, phaseCPU, phaseStart = req, cpu, time.Now()
	}
	measure := func(what string) (Memory, bool) {
		m, ok, err := op.memory(ctx)
		if err != nil {
			rep.problem("operator memory %s: %v", what, err)
			return Memory{}, false
		}
		if ok {
			logf("operator memory %s: RSS %.0f MiB, live heap %.0f MiB", what, mib(m.RSS), mib(m.HeapLive))
		}
		return m, ok
	}
	if err := waitStackReady(ctx, crc, cfg.PhaseTimeout); err != nil {
		return nil, err
	}
	rep.Memory.Before, rep.Memory.Measured = measure("before the publication")

	inv := Inventory()
	stepStart := time.Now()
	s, err := simdriver.Start(ctx, simdriver.Options{Client: cs, Inventory: inv, KeepSlicesOnStop: true, Workers: 64})
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Stop() }()

	check := func(what string) (time.Duration, *snapshot, error) {
		var last []string
		deadline := time.Now().Add(cfg.PhaseTimeout)
		nextProgress := time.Now().Add(progressInterval)
		for {
			select {
			case <-ctx.Done():
				return 0, nil, ctx.Err()
			case <-time.After(cfg.CheckInterval):
			}
			lastAny := w.lastAny.Load()
			snap, err := readSnapshot(ctx, w.cache)
			if err != nil {
				return 0, nil, err
			}
			missing, err := nodes.unpublished(snap, inv, cfg.Domains)
			if err != nil {
				return 0, nil, err
			}
			mism, n, wrong := snap.mismatches(time.Now())
			if missing == 0 && len(mism) == 0 && w.lastAny.Load() == lastAny {
				// Nothing changed while the snapshot was read and
				// compared: it held since the last event.
				correctAt := time.Unix(0, lastAny)
				sliceAt := time.Unix(0, w.lastSlice.Load())
				logf("%s: %d pools correct (last slice %s ago, last change %s ago)", what, n,
					time.Since(sliceAt).Round(time.Millisecond), time.Since(correctAt).Round(time.Millisecond))
				return correctAt.Sub(sliceAt), snap, nil
			}
			last = append([]string{fmt.Sprintf("%d pools unpublished", missing)}, mism...)
			if time.Now().After(nextProgress) {
				nextProgress = time.Now().Add(progressInterval)
				logf("%s: %d DevicePools, %d pools unpublished, %d of %d wrong (slices added %d, updated %d, deleted %d; last slice %s ago)", what,
					len(snap.pools), missing, wrong, n, w.sliceEvents[0].Load(), w.sliceEvents[1].Load(), w.sliceEvents[2].Load(),
					time.Since(time.Unix(0, w.lastSlice.Load())).Round(time.Millisecond))
			}
			if time.Now().After(deadline) {
				return 0, snap, fmt.Errorf("%s: DevicePools not correct after %s: %s", what, cfg.PhaseTimeout, strings.Join(last, "; "))
			}
		}
	}

	// Phase 1: the initial publication, in steps.
	var snap *snapshot
	created := steps[0]
	for i, n := range steps {
		name := "publish and validate"
		if len(steps) > 1 {
			name = fmt.Sprintf("publish and validate %d/%d", i+1, len(steps))
		}
		if i > 0 {
			stepStart = time.Now()
			if err := createNodes(ctx, cs, cfg, nodes, created, created+n); err != nil {
				return nil, err
			}
			created += n
		}
		var d time.Duration
		d, snap, err = check(name)
		if err != nil {
			rep.problem("%v", err)
			return rep, nil
		}
		rep.SyncCorrect = d
		rep.Publish = time.Unix(0, w.lastSlice.Load()).Sub(stepStart)
		endPhase(name)
		m, _ := measure(fmt.Sprintf("after %d nodes", created))
		rep.Memory.Steps = append(rep.Memory.Steps, m)
		rep.Memory.StepNodes = append(rep.Memory.StepNodes, n)
	}
	rep.Pools, rep.Slices = len(snap.pools), len(snap.slices)
	for _, sl := range snap.slices {
		rep.Devices += len(sl.Spec.Devices)
	}

	// Phase 2: the burst.
	if rep.Burst, err = burst(ctx, cs, w, cfg); err != nil {
		rep.problem("%v", err)
		return rep, nil
	}
	lastAlloc := w.lastAllocationTime()
	if _, _, err := check("after the burst"); err != nil {
		rep.problem("%v", err)
		return rep, nil
	}
	rep.BurstPoolsCorrect = time.Unix(0, w.lastAny.Load()).Sub(lastAlloc)
	var claims resourceapi.ResourceClaimList
	if err := w.cache.List(ctx, &claims, client.InNamespace(Namespace)); err != nil {
		return nil, err
	}
	for _, v := range doubleAllocations(claims.Items) {
		rep.problem("device allocated twice: %s", v)
	}
	endPhase(PhaseBurst)

	// Phase 2b: kube-scheduler's burst on the same cluster.
	if cfg.SchedulerBurst {
		st, err := schedulerBurst(ctx, cs, w, cfg)
		if err != nil {
			rep.problem("%v", err)
			return rep, nil
		}
		rep.SchedulerBurst = &st
		if _, _, err := check("after kube-scheduler's burst"); err != nil {
			rep.problem("%v", err)
			return rep, nil
		}
		if err := w.cache.List(ctx, &claims, client.InNamespace(Namespace)); err != nil {
			return nil, err
		}
		for _, v := range doubleAllocations(claims.Items) {
			rep.problem("device allocated twice: %s", v)
		}
		endPhase(PhaseSchedulerBurst)
	}

	// Phase 3: 10% of the nodes republish under a new generation.
	edit := time.Now()
	w.markAt(edit)
	rep.Republished, err = republish(ctx, cs, nodes, cfg)
	if err != nil {
		return nil, err
	}
	d, _, err := check("republish")
	if err != nil {
		rep.problem("%v", err)
		return rep, nil
	}
	rep.RepublishCorrect = d
	rep.RepublishFromEdit = time.Unix(0, w.lastAny.Load()).Sub(edit)
	rep.RepublishFirstSlice = time.Unix(0, w.firstSlice.Load()).Sub(edit)
	rep.RepublishLastSlice = time.Unix(0, w.lastSlice.Load()).Sub(edit)
	endPhase("republish")

	stopped = true
	counts, usage, err := op.stop()
	if err != nil {
		rep.problem("operator: %v", err)
	}
	rep.Requests, rep.Usage = counts, usage
	if len(counts.Refused) > 0 {
		rep.problem("the API server refused %d request(s) of the operator: %s", len(counts.Refused), strings.Join(counts.Refused, "; "))
	}
	rep.LoadAfter = loadavg()
	return rep, nil
}

// progressInterval is how often a check that has not passed yet logs
// where it stands.
const progressInterval = 5 * time.Second

// PhaseBurst names the phase of the claim burst; PhaseSchedulerBurst
// kube-scheduler's.
const (
	PhaseBurst          = "claim burst"
	PhaseSchedulerBurst = "kube-scheduler burst"
)

// Phase returns the phase of that name.
func (r *Report) Phase(name string) (Phase, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p, true
		}
	}
	return Phase{}, false
}

// PerAllocation is the operator's requests in the claim burst by verb and
// resource, divided by the claims of the burst.
func (r *Report) PerAllocation() map[string]float64 {
	p, ok := r.Phase(PhaseBurst)
	if !ok || r.Config.Claims == 0 {
		return nil
	}
	out := map[string]float64{}
	for k, v := range p.Requests.ByVerbResource {
		out[k] = float64(v) / float64(r.Config.Claims)
	}
	return out
}

// stepSizes splits n nodes into steps equal steps, the remainder in the
// last.
func stepSizes(n, steps int) []int {
	out := make([]int, steps)
	for i := range out {
		out[i] = n / steps
	}
	out[steps-1] += n % steps
	return out
}

// waitStackReady waits until the operator has written the DRAStack's
// Ready condition: its caches synced and its controllers run.
func waitStackReady(ctx context.Context, c client.Client, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var st v1alpha1.DRAStack
		err := c.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &st)
		if err == nil && meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionReady) != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the operator wrote no Ready condition on the DRAStack within %s (last error %v)", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func (w *watcher) lastAllocationTime() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastAllocation
}

// setup creates the namespace, the DeviceClasses and the DRAStack: the
// multi-host domains and the central, immediate GPU class.
func setup(ctx context.Context, cs kubernetes.Interface, crc client.Client, cfg Config) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	for _, dc := range []struct{ name, expr string }{
		{GPUClass, fmt.Sprintf(`device.driver == %q && device.attributes[%q].type == "gpu"`, GPUDriver, GPUDriver)},
		{TPUClass, fmt.Sprintf(`device.driver == %q`, TPUDriver)},
		{NICClass, fmt.Sprintf(`device.driver == %q`, NICDriver)},
	} {
		obj := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: dc.name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: dc.expr}}}}}
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create DeviceClass %s: %w", dc.name, err)
		}
	}
	stack := &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}
	stack.Spec.MultiHost = []v1alpha1.MultiHostSpec{{
		Name: "tpu", Driver: TPUDriver,
		NodeSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{tpuSelectLabel: "true"}},
		DomainLabel:      tpuDomainLabel,
		CoordinatesLabel: tpuCoordsLabel,
		HostGrid:         []int32{domainHostsX, domainHostsY},
		ChipsPerHost:     []int32{2, 2},
		Partitions:       []string{"2x2", "2x4", "4x4", "8x8"},
	}}
	stack.Spec.Claims = v1alpha1.ClaimsSpec{
		Engine: v1alpha1.EngineNative, GatePods: ptr.To(false), ImmediateClasses: []string{GPUClass},
		Central: []v1alpha1.CentralDevices{{Driver: GPUDriver, Classes: []string{GPUClass}, AllowImmediate: true}, {Driver: TPUDriver, Classes: []string{TPUClass}, AllowImmediate: true}},
	}
	if err := crc.Create(ctx, stack); err != nil {
		return fmt.Errorf("create the DRAStack: %w", err)
	}
	return nil
}

// nodeName is the name of the i-th node.
func nodeName(i int) string { return fmt.Sprintf("scale-%04d", i) }

// createNodes creates nodes from to to-1 in parallel and records their
// labels in out; the first 16 x Domains nodes are the hosts of the
// multi-host domains.
func createNodes(ctx context.Context, cs kubernetes.Interface, cfg Config, out *nodeLabels, from, to int) error {
	specs := make([]cluster.NodeSpec, 0, to-from)
	for i := from; i < to; i++ {
		labels := map[string]string{}
		if d := i / domainHosts; d < cfg.Domains {
			h := i % domainHosts
			labels[tpuSelectLabel] = "true"
			labels[tpuDomainLabel] = "d" + strconv.Itoa(d)
			labels[tpuCoordsLabel] = fmt.Sprintf("%d.%d", h/domainHostsY, h%domainHostsY)
		}
		specs = append(specs, cluster.NodeSpec{Name: nodeName(i), Labels: labels})
	}
	out.mu.Lock()
	for _, spec := range specs {
		out.labels[spec.Name] = cluster.NewNode(spec).Labels
	}
	out.mu.Unlock()
	return parallel(ctx, 16, len(specs), func(ctx context.Context, i int) error {
		if _, err := cs.CoreV1().Nodes().Create(ctx, cluster.NewNode(specs[i]), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", specs[i].Name, err)
		}
		return nil
	})
}

// waitNodesReady waits until n nodes are Ready.
func waitNodesReady(ctx context.Context, cs kubernetes.Interface, cfg Config, n int) error {
	deadline := time.Now().Add(cfg.PhaseTimeout)
	for {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		ready := 0
		if err == nil {
			for i := range list.Items {
				if cluster.NodeReady(&list.Items[i]) {
					ready++
				}
			}
			if ready >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d nodes Ready after %s (last error %v)", ready, n, cfg.PhaseTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// burst creates cfg.Claims immediate claims for one whole GPU each, as
// fast as 32 clients can, and waits until each is seen allocated.
func burst(ctx context.Context, cs kubernetes.Interface, w *watcher, cfg Config) (BurstStats, error) {
	return runBurst(ctx, w, cfg, "burst", "claims", func(ctx context.Context, name string) error {
		return createOneDeviceClaim(ctx, cs, name, "gpu", GPUClass)
	})
}

// createOneDeviceClaim creates a claim for one device of class.
func createOneDeviceClaim(ctx context.Context, cs kubernetes.Interface, name, request, class string) error {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: request, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, Count: 1},
		}}}},
	}
	if _, err := cs.ResourceV1().ResourceClaims(Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create claim %s: %w", claim.Name, err)
	}
	return nil
}

// schedulerBurst creates cfg.Claims pods, each with a claim of its own
// for one NIC (created just before the pod), and measures, as burst does,
// until kube-scheduler has allocated every claim.
func schedulerBurst(ctx context.Context, cs kubernetes.Interface, w *watcher, cfg Config) (BurstStats, error) {
	return runBurst(ctx, w, cfg, "sched", "pods", func(ctx context.Context, name string) error {
		if err := createOneDeviceClaim(ctx, cs, name, "nic", NICClass); err != nil {
			return err
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
			Spec: corev1.PodSpec{
				ResourceClaims: []corev1.PodResourceClaim{{Name: "nic", ResourceClaimName: &name}},
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "nic"}}}}},
			},
		}
		if _, err := cs.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", pod.Name, err)
		}
		return nil
	})
}

// runBurst calls create for cfg.Claims names prefix-NNNNN from 32
// goroutines and waits until the watch has seen every claim of those
// names allocated; what names the objects in the log.
func runBurst(ctx context.Context, w *watcher, cfg Config, prefix, what string, create func(ctx context.Context, name string) error) (BurstStats, error) {
	n := cfg.Claims
	st := BurstStats{Claims: n}
	names := make([]string, n)
	created := make([]time.Time, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	begin := time.Now()
	err := parallel(ctx, 32, n, func(ctx context.Context, i int) error {
		created[i] = time.Now()
		return create(ctx, names[i])
	})
	if err != nil {
		return st, err
	}
	st.Create = time.Since(begin)
	cfg.Logf("%s: %d %s created in %s", prefix, n, what, st.Create.Round(time.Millisecond))
	deadline := time.Now().Add(cfg.PhaseTimeout)
	for {
		w.mu.Lock()
		allocated := 0
		for _, name := range names {
			if _, ok := w.allocatedAt[name]; ok {
				allocated++
			}
		}
		w.mu.Unlock()
		if allocated == n {
			break
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("%s: %d of %d claims allocated after %s", prefix, allocated, n, cfg.PhaseTimeout)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	w.mu.Lock()
	lat := make([]time.Duration, n)
	var last time.Time
	for i, name := range names {
		at := w.allocatedAt[name]
		lat[i] = at.Sub(created[i])
		if at.After(last) {
			last = at
		}
	}
	w.mu.Unlock()
	slices.Sort(lat)
	st.Wall = last.Sub(begin)
	st.Rate = float64(n) / st.Wall.Seconds()
	st.P50 = lat[len(lat)*50/100]
	st.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
	st.Max = lat[len(lat)-1]
	cfg.Logf("%s: %d claims allocated in %s (%.0f/s), p50 %s p99 %s", prefix, n, st.Wall.Round(time.Millisecond),
		st.Rate, st.P50.Round(time.Millisecond), st.P99.Round(time.Millisecond))
	return st, nil
}

// republish labels every node whose index is a multiple of
// 100/RepublishPercent with sim.GenerationLabel=2: the simulated driver
// republishes its two pools under generation 2.
func republish(ctx context.Context, cs kubernetes.Interface, nodes *nodeLabels, cfg Config) (int, error) {
	step := max(1, 100/cfg.RepublishPercent)
	var picked []string
	for i := 0; i < cfg.Nodes; i += step {
		picked = append(picked, nodeName(i))
	}
	nodes.mu.Lock()
	for _, n := range picked {
		nodes.labels[n][simdriver.GenerationLabel] = "2"
	}
	nodes.mu.Unlock()
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:"2"}}}`, simdriver.GenerationLabel))
	err := parallel(ctx, 16, len(picked), func(ctx context.Context, i int) error {
		if _, err := cs.CoreV1().Nodes().Patch(ctx, picked[i], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label node %s: %w", picked[i], err)
		}
		return nil
	})
	return len(picked), err
}

// parallel runs f(0..n-1) on workers goroutines and returns the first
// error.
func parallel(ctx context.Context, workers, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return strings.TrimSpace(string(data))
	}
	return strings.Join(f[:3], " ")
}

// RepoDirs returns config/crd/bases and config/default under root.
func RepoDirs(root string) (crd, deploy string) {
	return filepath.Join(root, "config", "crd", "bases"), filepath.Join(root, "config", "default")
}
