package publisher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// drivers runs one resourceslice controller per driver name. The library
// reconciles every node-less slice of its driver, so two controllers for
// one driver would delete each other's pools: all entries of a driver are
// published through one controller, with the pools of all of them.
type drivers struct {
	kube kubernetes.Interface
	// base lives as long as the manager; controllers are started under it
	// because a reconcile's context ends with the reconcile.
	base context.Context
	// onError receives the library's publishing errors.
	onError func(ctx context.Context, driver string, err error, msg string)
	mu      sync.Mutex
	owner   resourceslice.Owner
	running map[string]*driverController
}

// startTimeout bounds the start of one library controller, which waits
// for its informer to sync: without it, a cluster that refuses the list
// (missing RBAC, no resource.k8s.io/v1) would hang the reconciler.
const startTimeout = 30 * time.Second

// driverController is one running library controller.
type driverController struct {
	ctrl *resourceslice.Controller
	// cancel ends the context the controller was started under.
	cancel context.CancelFunc
	// retiring is set once the driver left the spec: the controller was
	// told to publish nothing and is stopped when its slices are gone.
	retiring bool
}

// apply hands every driver its pools: it starts controllers for new
// drivers, updates the others, and tells controllers of drivers that left
// the spec to remove their slices. A different owner (the DRAStack was
// deleted and created again) restarts every controller, because the
// library writes the owner it was started with. It returns the retiring
// drivers.
func (d *drivers) apply(owner resourceslice.Owner, desired map[string]map[string]resourceslice.Pool) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running == nil {
		d.running = map[string]*driverController{}
	}
	if owner != d.owner {
		d.stopLocked()
		d.owner = owner
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(desired)) {
		res := &resourceslice.DriverResources{Pools: desired[name]}
		if dc, ok := d.running[name]; ok {
			dc.ctrl.Update(res)
			dc.retiring = false
			continue
		}
		dc, err := d.start(name, res)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.running[name] = dc
	}
	var retiring []string
	for _, name := range slices.Sorted(maps.Keys(d.running)) {
		if _, ok := desired[name]; ok {
			continue
		}
		dc := d.running[name]
		if !dc.retiring {
			dc.ctrl.Update(&resourceslice.DriverResources{})
			dc.retiring = true
		}
		retiring = append(retiring, name)
	}
	if len(errs) > 0 {
		return retiring, fmt.Errorf("start ResourceSlice controllers: %w", errors.Join(errs...))
	}
	return retiring, nil
}

// start runs the library controller of one driver with its first pools,
// so that it never sees an empty desired state and removes nothing that
// is still wanted.
func (d *drivers) start(driver string, res *resourceslice.DriverResources) (*driverController, error) {
	owner := d.owner
	opts := resourceslice.Options{
		DriverName: driver,
		KubeClient: d.kube,
		Owner:      &owner,
		Resources:  res,
		ErrorHandler: func(ctx context.Context, err error, msg string) {
			if d.onError != nil {
				d.onError(ctx, driver, err, msg)
			}
		},
	}
	ctx, cancel := context.WithCancel(d.base)
	timer := time.AfterFunc(startTimeout, cancel)
	ctrl, err := resourceslice.StartController(ctx, opts)
	timedOut := !timer.Stop()
	if err != nil {
		cancel()
		if timedOut {
			return nil, fmt.Errorf("driver %s: ResourceSlice informer not synced after %s: %w", driver, startTimeout, err)
		}
		return nil, fmt.Errorf("driver %s: %w", driver, err)
	}
	return &driverController{ctrl: ctrl, cancel: cancel}, nil
}

// retire stops the controller of a driver that left the spec, once its
// slices are gone.
func (d *drivers) retire(driver string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dc, ok := d.running[driver]; ok && dc.retiring {
		dc.stop()
		delete(d.running, driver)
	}
}

// stop stops every controller. Published slices stay: they are owned by the
// DRAStack and removed by the garbage collector when it goes.
func (d *drivers) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopLocked()
}

func (d *drivers) stopLocked() {
	for name, dc := range d.running {
		dc.stop()
		delete(d.running, name)
	}
	d.owner = resourceslice.Owner{}
}

func (dc *driverController) stop() {
	dc.ctrl.Stop()
	dc.cancel()
}

// ownerOf is the owner the library writes on every slice.
func ownerOf(apiVersion, kind, name string, uid types.UID) resourceslice.Owner {
	return resourceslice.Owner{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid}
}
