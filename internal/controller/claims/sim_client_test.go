package claims

// The simulation's clients: an operator instance reads through its own
// lagging informer cache (simCache) or the API server (the store), and its
// writes reach the store through the world's fault injector.

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// simCache is one informer cache: per kind, the objects as of a cursor into
// the store's event log of that kind. Kinds advance independently, so the
// events of two kinds reorder, while each kind's stay in order.
type simCache struct {
	objs   map[string]map[string]client.Object
	cursor map[string]int
}

func newSimCache() *simCache {
	c := &simCache{objs: map[string]map[string]client.Object{}, cursor: map[string]int{}}
	for _, k := range simKinds {
		c.objs[k] = map[string]client.Object{}
	}
	return c
}

// deliver applies the next event of kind, if any.
func (c *simCache) deliver(s *simStore, kind string) (simEvent, bool) {
	i := c.cursor[kind]
	if i >= len(s.log[kind]) {
		return simEvent{}, false
	}
	ev := s.log[kind][i]
	c.cursor[kind] = i + 1
	if ev.typ == watch.Deleted {
		delete(c.objs[kind], keyOf(ev.obj))
	} else {
		c.objs[kind][keyOf(ev.obj)] = ev.obj
	}
	return ev, true
}

// behind counts the events of kind not delivered yet.
func (c *simCache) behind(s *simStore, kind string) int { return len(s.log[kind]) - c.cursor[kind] }

// simReader reads from a cache (cache set) or from the store.
type simReader struct {
	w     *simWorld
	cache *simCache
}

func (r *simReader) objects(kind string) map[string]client.Object {
	if r.cache != nil {
		return r.cache.objs[kind]
	}
	return r.w.store.objs[kind]
}

func (r *simReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	kind := kindOf(obj)
	o, ok := r.objects(kind)[key.Namespace+"/"+key.Name]
	if !ok {
		return apierrors.NewNotFound(gr(kind), key.Name)
	}
	into(obj, o)
	return nil
}

func (r *simReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	kind := kindOf(list)
	objs := r.objects(kind)
	keys := sortedKeys(objs)
	var items []client.Object
	for _, k := range keys {
		o := objs[k]
		if lo.Namespace != "" && o.GetNamespace() != lo.Namespace {
			continue
		}
		items = append(items, o)
	}
	switch l := list.(type) {
	case *resourceapi.ResourceClaimList:
		l.Items = make([]resourceapi.ResourceClaim, len(items))
		for i, o := range items {
			l.Items[i] = *o.(*resourceapi.ResourceClaim).DeepCopy()
		}
	case *corev1.PodList:
		l.Items = make([]corev1.Pod, len(items))
		for i, o := range items {
			l.Items[i] = *o.(*corev1.Pod).DeepCopy()
		}
	case *resourceapi.ResourceSliceList:
		l.Items = make([]resourceapi.ResourceSlice, len(items))
		for i, o := range items {
			l.Items[i] = *o.(*resourceapi.ResourceSlice).DeepCopy()
		}
	case *resourceapi.DeviceClassList:
		l.Items = make([]resourceapi.DeviceClass, len(items))
		for i, o := range items {
			l.Items[i] = *o.(*resourceapi.DeviceClass).DeepCopy()
		}
	case *corev1.NodeList:
		l.Items = make([]corev1.Node, len(items))
		for i, o := range items {
			l.Items[i] = *o.(*corev1.Node).DeepCopy()
		}
	case *resourceapi.DeviceTaintRuleList:
		l.Items = make([]resourceapi.DeviceTaintRule, len(items))
		for i, o := range items {
			l.Items[i] = *o.(*resourceapi.DeviceTaintRule).DeepCopy()
		}
	case *v1alpha1.DRAStackList:
		l.Items = make([]v1alpha1.DRAStack, len(items))
		for i, o := range items {
			l.Items[i] = *o.(*v1alpha1.DRAStack).DeepCopy()
		}
	case *coordinationv1.LeaseList:
		l.Items = make([]coordinationv1.Lease, len(items))
		for i, o := range items {
			l.Items[i] = *o.(*coordinationv1.Lease).DeepCopy()
		}
	default:
		return fmt.Errorf("list of %T not simulated", list)
	}
	return nil
}

// simWriter sends an instance's writes through the world's fault injector.
// It embeds client.Client only for its type: the methods below are all
// the controller uses.
type simWriter struct {
	client.Client
	*simReader
	w    *simWorld
	from string
}

func (c *simWriter) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.simReader.Get(ctx, key, obj, opts...)
}

func (c *simWriter) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.simReader.List(ctx, list, opts...)
}

func (c *simWriter) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	return c.w.request(c.from, obj, func(o client.Object) error { return c.w.store.create(o) })
}

func (c *simWriter) Update(_ context.Context, obj client.Object, _ ...client.UpdateOption) error {
	return c.w.request(c.from, obj, func(o client.Object) error { return c.w.store.replace(o, "") })
}

func (c *simWriter) Patch(_ context.Context, obj client.Object, p client.Patch, _ ...client.PatchOption) error {
	return c.w.request(c.from, obj, func(o client.Object) error { return c.w.store.patch(o, p, "") })
}

func (c *simWriter) Delete(_ context.Context, obj client.Object, opts ...client.DeleteOption) error {
	var do client.DeleteOptions
	do.ApplyOptions(opts)
	return c.w.request(c.from, obj, func(o client.Object) error { return c.w.store.remove(o, do.Preconditions) })
}

func (c *simWriter) Status() client.SubResourceWriter { return &simStatus{c: c} }

type simStatus struct {
	client.SubResourceWriter
	c *simWriter
}

func (s *simStatus) Patch(_ context.Context, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	var po client.SubResourcePatchOptions
	po.ApplyOptions(opts)
	return s.c.w.request(s.c.from, obj, func(o client.Object) error {
		return s.c.w.store.patchAs(o, p, "status", po.FieldManager)
	})
}

func (s *simStatus) Update(_ context.Context, obj client.Object, _ ...client.SubResourceUpdateOption) error {
	return s.c.w.request(s.c.from, obj, func(o client.Object) error { return s.c.w.store.replace(o, "status") })
}
