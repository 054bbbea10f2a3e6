package simdriver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// DefaultSyncDelay is how long a slice controller waits after a change to
// its slices before it repairs them. The library's 30 s suits real
// clusters; a demo where someone deletes a slice by hand should heal
// faster.
const DefaultSyncDelay = 5 * time.Second

// cleanupTimeout bounds the slice deletion Stop does.
const cleanupTimeout = 30 * time.Second

// Options configures Start.
type Options struct {
	// Client talks to the API server (required).
	Client kubernetes.Interface
	// Inventory is the simulated hardware (required, validated).
	Inventory *Inventory
	// KeepSlicesOnStop leaves the published slices in place when Stop
	// runs, as a restarting driver would. By default Stop deletes them,
	// as the kubelet does when a plugin goes away for good.
	KeepSlicesOnStop bool
	// SyncDelay is passed to every slice controller. Default
	// DefaultSyncDelay.
	SyncDelay time.Duration
	// Workers is how many nodes are synced in parallel. A new slice
	// controller needs about a second before its first write (it waits for
	// its informer), so a large cluster wants several. Default
	// DefaultWorkers.
	Workers int
}

// DefaultWorkers is the default of Options.Workers.
const DefaultWorkers = 32

// Sim is a running simulated driver.
type Sim struct {
	opts   Options
	nodes  corelisters.NodeLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
	cancel context.CancelFunc
	wg     sync.WaitGroup

	brokenDriver map[string]bool

	mu    sync.Mutex
	state map[string]*nodeState // by node name; touched by the worker and Stop
	errs  map[string]error      // last publishing error by "node/driver"
}

// nodeState is what the sim currently publishes for one node.
type nodeState struct {
	uid         types.UID
	controllers map[string]*driverController // by driver, valid pools
	broken      map[string][]Pool            // by driver, broken pools
}

type driverController struct {
	ctrl    *resourceslice.Controller
	applied *resourceslice.DriverResources
}

// Start watches Nodes and publishes each matching node's pools until Stop
// (or until ctx ends). It returns once the node cache has synced; use
// WaitPublished to wait for the slices themselves.
func Start(ctx context.Context, opts Options) (*Sim, error) {
	if opts.Client == nil {
		return nil, errors.New("sim: Options.Client is required")
	}
	if opts.Inventory == nil {
		return nil, errors.New("sim: Options.Inventory is required")
	}
	if err := opts.Inventory.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if opts.SyncDelay <= 0 {
		opts.SyncDelay = DefaultSyncDelay
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Sim{
		opts:         opts,
		queue:        workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		cancel:       cancel,
		brokenDriver: map[string]bool{},
		state:        map[string]*nodeState{},
		errs:         map[string]error{},
	}
	for _, d := range opts.Inventory.Drivers {
		if d.Broken {
			s.brokenDriver[d.Name] = true
		}
	}

	factory := informers.NewSharedInformerFactory(opts.Client, 0)
	informer := factory.Core().V1().Nodes()
	s.nodes = informer.Lister()
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: s.enqueue,
		UpdateFunc: func(oldObj, newObj any) {
			// Heartbeats update every node every few seconds; only
			// identity, labels and deletion change what is published.
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			if !ok1 || !ok2 || o.UID != n.UID || !maps.Equal(o.Labels, n.Labels) || n.DeletionTimestamp != nil {
				s.enqueue(newObj)
			}
		},
		DeleteFunc: s.enqueue,
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("sim: watch nodes: %w", err)
	}
	s.synced = informer.Informer().HasSynced
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.synced) {
		cancel()
		factory.Shutdown()
		return nil, fmt.Errorf("sim: node cache did not sync: %w", context.Cause(ctx))
	}

	s.wg.Add(1 + opts.Workers)
	go func() {
		defer s.wg.Done()
		<-ctx.Done()
		s.queue.ShutDown()
		factory.Shutdown()
	}()
	for range opts.Workers {
		go func() {
			defer s.wg.Done()
			for s.processNext(ctx) {
			}
		}()
	}
	return s, nil
}

func (s *Sim) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	s.queue.Add(key)
}

func (s *Sim) processNext(ctx context.Context) bool {
	name, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	defer s.queue.Done(name)
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "node", name)
	if err := s.syncNode(klog.NewContext(ctx, logger), name); err != nil {
		logger.Error(err, "Publishing for node failed, will retry")
		s.queue.AddRateLimited(name)
		return true
	}
	s.queue.Forget(name)
	return true
}

// syncNode makes what is published for one node match the inventory.
func (s *Sim) syncNode(ctx context.Context, name string) error {
	node, err := s.nodes.Get(name)
	if apierrors.IsNotFound(err) || (err == nil && node.DeletionTimestamp != nil) {
		return s.forgetNode(ctx, name)
	}
	if err != nil {
		return fmt.Errorf("get node from cache: %w", err)
	}
	pools, err := Render(s.opts.Inventory, node.Name, node.Labels)
	if err != nil {
		// The inventory cannot describe this node; retrying will not help.
		s.recordErr(name, "", err)
		klog.FromContext(ctx).Error(err, "Cannot render pools")
		return nil
	}

	s.mu.Lock()
	st := s.state[name]
	s.mu.Unlock()
	if st != nil && st.uid != node.UID {
		// The node was replaced: its old slices belong to the old object.
		if err := s.forgetNode(ctx, name); err != nil {
			return err
		}
		st = nil
	}
	if st == nil {
		st = &nodeState{uid: node.UID, controllers: map[string]*driverController{}, broken: map[string][]Pool{}}
		s.mu.Lock()
		s.state[name] = st
		s.mu.Unlock()
	}

	valid, broken := splitByDriver(pools)

	// Drivers are published in parallel: starting a slice controller
	// takes a second of waiting for its informer.
	var (
		errs    []error
		started = map[string]*driverController{}
		wg      sync.WaitGroup
		mu      sync.Mutex
	)
	for driver, res := range valid {
		dc := st.controllers[driver]
		wg.Go(func() {
			dc, err := s.publish(ctx, node, dc, driver, res)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			started[driver] = dc
		})
	}
	wg.Wait()
	maps.Copy(st.controllers, started)
	for driver, dc := range st.controllers {
		if valid[driver] == nil {
			dc.ctrl.Stop()
			delete(st.controllers, driver)
			if err := s.deleteSlices(ctx, driver, name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for driver, ps := range broken {
		if err := s.writeBroken(ctx, node, driver, ps); err != nil {
			errs = append(errs, err)
			continue
		}
		st.broken[driver] = ps
	}
	for driver := range st.broken {
		if broken[driver] == nil {
			delete(st.broken, driver)
			if err := s.deleteSlices(ctx, driver, name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// splitByDriver groups a node's pools by driver: valid ones as the input
// of that driver's slice controller, broken ones for the direct writer.
func splitByDriver(pools []Pool) (valid map[string]*resourceslice.DriverResources, broken map[string][]Pool) {
	valid = map[string]*resourceslice.DriverResources{}
	broken = map[string][]Pool{}
	for _, p := range pools {
		if p.Broken {
			broken[p.Driver] = append(broken[p.Driver], p)
			continue
		}
		if valid[p.Driver] == nil {
			valid[p.Driver] = &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
		}
		valid[p.Driver].Pools[p.Name] = resourceslice.Pool{Slices: p.Slices, Generation: p.Generation}
	}
	return valid, broken
}

// publish hands a driver's valid pools for a node to its slice controller
// dc, or starts the controller when dc is nil.
func (s *Sim) publish(ctx context.Context, node *corev1.Node, dc *driverController, driver string, res *resourceslice.DriverResources) (*driverController, error) {
	if dc != nil {
		if !apiequality.Semantic.DeepEqual(dc.applied, res) {
			dc.ctrl.Update(res)
			dc.applied = res
		}
		return dc, nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "driver", driver)
	syncDelay := s.opts.SyncDelay
	ctrl, err := resourceslice.StartController(klog.NewContext(ctx, logger), resourceslice.Options{
		DriverName: driver,
		KubeClient: s.opts.Client,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
		Resources:  res,
		SyncDelay:  &syncDelay,
		ErrorHandler: func(ctx context.Context, err error, msg string) {
			logger.Error(err, msg)
			s.recordErr(node.Name, driver, fmt.Errorf("%s: %w", msg, err))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("start slice controller for driver %s: %w", driver, err)
	}
	return &driverController{ctrl: ctrl, applied: res}, nil
}

// forgetNode stops publishing for a node and removes its slices (the
// garbage collector would too, through the owner reference, but only
// after a delay and only when the Node is really gone).
func (s *Sim) forgetNode(ctx context.Context, name string) error {
	s.mu.Lock()
	st := s.state[name]
	delete(s.state, name)
	s.mu.Unlock()
	if st == nil {
		return nil
	}
	var errs []error
	for driver, dc := range st.controllers {
		dc.ctrl.Stop()
		if err := s.deleteSlices(ctx, driver, name); err != nil {
			errs = append(errs, err)
		}
	}
	for driver := range st.broken {
		if err := s.deleteSlices(ctx, driver, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Sim) recordErr(node, driver string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs[node+"/"+driver] = err
}

// Errors returns the last publishing error per "node/driver", for
// diagnostics: a slice the API server rejected, or fields it dropped
// because a feature gate is off.
func (s *Sim) Errors() map[string]error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.errs)
}

// Stop stops publishing and, unless KeepSlicesOnStop, deletes what was
// published. It waits for the background work to end.
func (s *Sim) Stop() error {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	state := s.state
	s.state = map[string]*nodeState{}
	s.mu.Unlock()
	for _, st := range state {
		for _, dc := range st.controllers {
			dc.ctrl.Stop()
		}
	}
	if s.opts.KeepSlicesOnStop {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var errs []error
	for _, node := range slices.Sorted(maps.Keys(state)) {
		st := state[node]
		for _, driver := range slices.Sorted(maps.Keys(st.controllers)) {
			errs = append(errs, s.deleteSlices(ctx, driver, node))
		}
		for _, driver := range slices.Sorted(maps.Keys(st.broken)) {
			errs = append(errs, s.deleteSlices(ctx, driver, node))
		}
	}
	return errors.Join(errs...)
}
