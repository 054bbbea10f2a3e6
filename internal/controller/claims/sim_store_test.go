package claims

// The simulation's API server: one store of typed objects with one
// resourceVersion counter (as etcd's revision), the semantics the protocol
// relies on (preconditions, status subresources, finalizers, JSON-patch
// tests), and a log of events per kind for the simulated informers.

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/handover"
)

// The kinds the simulation stores.
const (
	kClaim = "ResourceClaim"
	kPod   = "Pod"
	kSlice = "ResourceSlice"
	kClass = "DeviceClass"
	kNode  = "Node"
	kRule  = "DeviceTaintRule"
	kStack = "DRAStack"
	kLease = "Lease"
)

var simKinds = []string{kClaim, kPod, kSlice, kClass, kNode, kRule, kStack, kLease}

func kindOf(obj any) string {
	switch obj.(type) {
	case *resourceapi.ResourceClaim, *resourceapi.ResourceClaimList:
		return kClaim
	case *corev1.Pod, *corev1.PodList:
		return kPod
	case *resourceapi.ResourceSlice, *resourceapi.ResourceSliceList:
		return kSlice
	case *resourceapi.DeviceClass, *resourceapi.DeviceClassList:
		return kClass
	case *corev1.Node, *corev1.NodeList:
		return kNode
	case *resourceapi.DeviceTaintRule, *resourceapi.DeviceTaintRuleList:
		return kRule
	case *v1alpha1.DRAStack, *v1alpha1.DRAStackList:
		return kStack
	case *coordinationv1.Lease, *coordinationv1.LeaseList:
		return kLease
	}
	return ""
}

func newOf(kind string) client.Object {
	switch kind {
	case kClaim:
		return &resourceapi.ResourceClaim{}
	case kPod:
		return &corev1.Pod{}
	case kSlice:
		return &resourceapi.ResourceSlice{}
	case kClass:
		return &resourceapi.DeviceClass{}
	case kNode:
		return &corev1.Node{}
	case kRule:
		return &resourceapi.DeviceTaintRule{}
	case kStack:
		return &v1alpha1.DRAStack{}
	case kLease:
		return &coordinationv1.Lease{}
	}
	return nil
}

func keyOf(obj client.Object) string { return obj.GetNamespace() + "/" + obj.GetName() }

type simEvent struct {
	typ watch.EventType
	obj client.Object
}

// simStore is the simulated API server's storage.
type simStore struct {
	// manager is the field manager of the write under way.
	manager string
	rv      uint64
	uid     uint64
	objs    map[string]map[string]client.Object
	log     map[string][]simEvent
	// joins counts the joins recorded on central rules (a run that joins
	// nothing checks nothing of the join barrier).
	joins int
	debug func(format string, args ...any)
}

func newSimStore() *simStore {
	s := &simStore{objs: map[string]map[string]client.Object{}, log: map[string][]simEvent{}}
	for _, k := range simKinds {
		s.objs[k] = map[string]client.Object{}
	}
	return s
}

func gr(kind string) schema.GroupResource {
	return schema.GroupResource{Resource: strings.ToLower(kind) + "s"}
}

func copyObj(o client.Object) client.Object { return o.DeepCopyObject().(client.Object) }

// into copies src into dst (same type).
func into(dst, src client.Object) {
	reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(src.DeepCopyObject()).Elem())
}

func (s *simStore) get(kind, key string) (client.Object, bool) {
	o, ok := s.objs[kind][key]
	return o, ok
}

// list returns the stored objects of a kind sorted by key.
func (s *simStore) list(kind string) []client.Object {
	keys := make([]string, 0, len(s.objs[kind]))
	for k := range s.objs[kind] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]client.Object, len(keys))
	for i, k := range keys {
		out[i] = s.objs[kind][k]
	}
	return out
}

func (s *simStore) commit(kind string, typ watch.EventType, obj client.Object) {
	s.rv++
	obj.SetResourceVersion(strconv.FormatUint(s.rv, 10))
	if typ == watch.Deleted {
		delete(s.objs[kind], keyOf(obj))
	} else {
		s.objs[kind][keyOf(obj)] = obj
	}
	s.log[kind] = append(s.log[kind], simEvent{typ: typ, obj: copyObj(obj)})
	if s.debug != nil {
		switch o := obj.(type) {
		case *resourceapi.ResourceClaim:
			a := "none"
			if o.Status.Allocation != nil {
				a = fmt.Sprint(len(o.Status.Allocation.Devices.Results), " ", o.Status.Allocation.Devices.Results[0].Pool, "/", o.Status.Allocation.Devices.Results[0].Device)
			}
			s.debug("  [store] %s claim %s rv %d by %s alloc %s reservedFor %d", typ, o.Name, s.rv, s.manager, a, len(o.Status.ReservedFor))
		case *resourceapi.DeviceTaintRule:
			s.debug("  [store] %s rule %s rv %d gen %d by %s ann %v", typ, o.Name, s.rv, o.Generation, s.manager, o.Annotations)
		}
	}
}

func (s *simStore) create(obj client.Object) error {
	kind := kindOf(obj)
	if _, ok := s.objs[kind][keyOf(obj)]; ok {
		return apierrors.NewAlreadyExists(gr(kind), obj.GetName())
	}
	if obj.GetResourceVersion() != "" {
		return apierrors.NewBadRequest("resourceVersion must not be set on create")
	}
	stored := copyObj(obj)
	// metadata.generation starts at 1 (and counts spec changes, replace).
	stored.SetGeneration(1)
	s.uid++
	stored.SetUID(types.UID(fmt.Sprintf("uid-%d", s.uid)))
	stored.SetCreationTimestamp(metav1.Unix(int64(s.uid), 0))
	s.commit(kind, watch.Added, stored)
	into(obj, stored)
	return nil
}

// replace stores upd over the current object under the rules of the main
// resource (sub "": status kept) or the status subresource (spec and
// metadata but the version kept), with upd's resourceVersion as
// precondition when set.
func (s *simStore) replace(upd client.Object, sub string) error {
	kind := kindOf(upd)
	cur, ok := s.objs[kind][keyOf(upd)]
	if !ok {
		return apierrors.NewNotFound(gr(kind), upd.GetName())
	}
	if rv := upd.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
		return apierrors.NewConflict(gr(kind), upd.GetName(), errors.New("the object has been modified"))
	}
	if uid := upd.GetUID(); uid != "" && uid != cur.GetUID() {
		return apierrors.NewConflict(gr(kind), upd.GetName(), errors.New("UID precondition failed"))
	}
	next := copyObj(upd)
	switch sub {
	case "status":
		next = withStatusOf(copyObj(cur), upd)
	case "":
		next = withStatusOf(next, cur)
		next.SetUID(cur.GetUID())
		next.SetCreationTimestamp(cur.GetCreationTimestamp())
		next.SetDeletionTimestamp(cur.GetDeletionTimestamp())
		// The API server counts spec changes in metadata.generation and
		// ignores a client's value.
		next.SetGeneration(cur.GetGeneration())
		if !equalSpec(cur, next) {
			next.SetGeneration(cur.GetGeneration() + 1)
		}
	}
	if p, ok := next.(*corev1.Pod); ok && sub == "status" {
		// The writer's managedFields entry, with the API server's time
		// (simScheduler.verdict stamps it).
		p.ManagedFields = upd.(*corev1.Pod).ManagedFields
	}
	if err := validate(cur, next); err != nil {
		return err
	}
	if c, ok := next.(*resourceapi.ResourceClaim); ok && sub == "status" {
		if was := cur.(*resourceapi.ResourceClaim).Status.Allocation; was == nil && c.Status.Allocation != nil {
			m := s.manager
			if m == "" {
				m = claimpolicy.SchedulerName
			}
			c.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:allocation":{}}}`)}}}
		}
	}
	if r, ok := next.(*resourceapi.DeviceTaintRule); ok && handover.Joined(r) && !handover.Joined(cur.(*resourceapi.DeviceTaintRule)) {
		s.joins++
	}
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 {
		s.commit(kind, watch.Deleted, next)
	} else if equalObj(cur, next) {
		// No change, no new version (as the API server).
		into(upd, cur)
		return nil
	} else {
		s.commit(kind, watch.Modified, next)
	}
	into(upd, next)
	return nil
}

// equalSpec compares the spec of two objects of one kind (equal when the
// kind has none).
func equalSpec(a, b client.Object) bool {
	spec := func(o client.Object) string {
		var m map[string]json.RawMessage
		raw, _ := json.Marshal(o)
		_ = json.Unmarshal(raw, &m)
		return string(m["spec"])
	}
	return spec(a) == spec(b)
}

func equalObj(a, b client.Object) bool {
	x, y := copyObj(a), copyObj(b)
	x.SetResourceVersion("")
	y.SetResourceVersion("")
	ra, _ := json.Marshal(x)
	rb, _ := json.Marshal(y)
	return string(ra) == string(rb)
}

// withStatusOf returns dst with the status of src.
func withStatusOf(dst, src client.Object) client.Object {
	switch d := dst.(type) {
	case *resourceapi.ResourceClaim:
		d.Status = *src.(*resourceapi.ResourceClaim).Status.DeepCopy()
	case *corev1.Pod:
		d.Status = *src.(*corev1.Pod).Status.DeepCopy()
	case *v1alpha1.DRAStack:
		d.Status = *src.(*v1alpha1.DRAStack).Status.DeepCopy()
	}
	return dst
}

// validate applies the API server's rules the protocol relies on.
func validate(cur, next client.Object) error {
	c, ok := cur.(*resourceapi.ResourceClaim)
	if !ok {
		return nil
	}
	n := next.(*resourceapi.ResourceClaim)
	if c.Status.Allocation != nil && n.Status.Allocation != nil && !equalAlloc(c.Status.Allocation, n.Status.Allocation) {
		return apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: kClaim}, n.Name,
			field.ErrorList{field.Invalid(field.NewPath("status", "allocation"), nil, "field is immutable")})
	}
	if c.Status.Allocation == nil && n.Status.Allocation != nil && n.DeletionTimestamp != nil {
		return apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: kClaim}, n.Name,
			field.ErrorList{field.Forbidden(field.NewPath("status", "allocation"), "a claim being deleted cannot be allocated")})
	}
	return nil
}

func equalAlloc(a, b *resourceapi.AllocationResult) bool {
	ra, _ := json.Marshal(a)
	rb, _ := json.Marshal(b)
	return string(ra) == string(rb)
}

// patchAs is patch by a field manager: a claim whose allocation it sets
// records it as the allocation's manager, as managedFields would (what
// claimpolicy.AllocatedBy reads).
func (s *simStore) patchAs(obj client.Object, p client.Patch, sub, manager string) error {
	s.manager = manager
	defer func() { s.manager = "" }()
	return s.patch(obj, p, sub)
}

// patch applies a merge or JSON patch (its resourceVersion, or its test
// operations, as preconditions).
func (s *simStore) patch(obj client.Object, p client.Patch, sub string) error {
	kind := kindOf(obj)
	cur, ok := s.objs[kind][keyOf(obj)]
	if !ok {
		return apierrors.NewNotFound(gr(kind), obj.GetName())
	}
	data, err := p.Data(obj)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(cur)
	var patched []byte
	switch p.Type() {
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(raw, data)
	case types.StrategicMergePatchType:
		patched, err = strategicpatch.StrategicMergePatch(raw, data, newOf(kind))
	case types.JSONPatchType:
		var ops jsonpatch.Patch
		if ops, err = jsonpatch.DecodePatch(data); err == nil {
			if patched, err = ops.Apply(raw); err != nil {
				return apierrors.NewInvalid(schema.GroupKind{Kind: kind}, obj.GetName(), field.ErrorList{field.Invalid(field.NewPath(""), nil, err.Error())})
			}
		}
	default:
		return fmt.Errorf("patch type %s not simulated", p.Type())
	}
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	upd := newOf(kind)
	if err := json.Unmarshal(patched, upd); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	// A merge patch without a resourceVersion applies to the current
	// version; with one, replace checks it.
	if err := s.replace(upd, sub); err != nil {
		return err
	}
	into(obj, upd)
	return nil
}

// remove deletes an object, or marks it deleted while it has finalizers.
func (s *simStore) remove(obj client.Object, pre *metav1.Preconditions) error {
	kind := kindOf(obj)
	cur, ok := s.objs[kind][keyOf(obj)]
	if !ok {
		return apierrors.NewNotFound(gr(kind), obj.GetName())
	}
	if pre != nil {
		if pre.UID != nil && *pre.UID != cur.GetUID() {
			return apierrors.NewConflict(gr(kind), obj.GetName(), errors.New("UID precondition failed"))
		}
		if pre.ResourceVersion != nil && *pre.ResourceVersion != cur.GetResourceVersion() {
			return apierrors.NewConflict(gr(kind), obj.GetName(), errors.New("resourceVersion precondition failed"))
		}
	}
	next := copyObj(cur)
	if len(next.GetFinalizers()) > 0 {
		if next.GetDeletionTimestamp() == nil {
			now := metav1.Unix(int64(s.rv), 0)
			next.SetDeletionTimestamp(&now)
			s.commit(kind, watch.Modified, next)
		}
		return nil
	}
	s.commit(kind, watch.Deleted, next)
	return nil
}
