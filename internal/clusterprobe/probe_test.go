package clusterprobe

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// fakeServer answers the probe's dry-run creates like an API server with
// the given gates: it drops the fields of gates that are off, then refuses
// what its validation would refuse. It models only what the probe objects
// touch.
type fakeServer struct {
	gates map[string]bool
	// fail makes every write fail with this error.
	fail error
	// writes counts the dry-run writes.
	writes int
}

func (s *fakeServer) react(action k8stesting.Action) (bool, runtime.Object, error) {
	create, ok := action.(k8stesting.CreateActionImpl)
	if !ok {
		return false, nil, nil
	}
	if !slices.Contains(create.CreateOptions.DryRun, metav1.DryRunAll) {
		return true, nil, errors.New("probe wrote without dry run")
	}
	s.writes++
	if s.fail != nil {
		return true, nil, s.fail
	}
	switch obj := create.GetObject().DeepCopyObject().(type) {
	case *resourceapi.ResourceSlice:
		return s.slice(obj)
	case *resourceapi.ResourceClaim:
		return s.claim(obj)
	case *resourceapi.DeviceClass:
		if !s.gates["DRAExtendedResource"] {
			obj.Spec.ExtendedResourceName = nil
		}
		return true, obj, nil
	}
	return true, nil, errors.New("unexpected object")
}

func (s *fakeServer) slice(sl *resourceapi.ResourceSlice) (bool, runtime.Object, error) {
	if !s.gates["DRAPartitionableDevicesType"] {
		sl.Spec.PartitionTypeAttribute = nil
	}
	if !s.gates["DRAOptionalNodeOperations"] {
		sl.Spec.SkipNodeOperations = nil
	}
	if !s.gates["DRAPartitionableDevices"] {
		sl.Spec.PerDeviceNodeSelection = nil
	}
	for i := range sl.Spec.Devices {
		d := &sl.Spec.Devices[i]
		if !s.gates["DRAPartitionableDevices"] {
			d.ConsumesCounters, d.AllNodes = nil, nil
		}
		if !s.gates["DRADeviceCompatibilityGroups"] {
			for j := range d.ConsumesCounters {
				d.ConsumesCounters[j].CompatibilityGroups = nil
			}
		}
		if !s.gates["DRADeviceTaints"] {
			d.Taints = nil
		}
		if !s.gates["DRADeviceBindingConditions"] || !s.gates["DRAResourceClaimDeviceStatus"] {
			d.BindsToNode, d.BindingConditions, d.BindingFailureConditions = nil, nil, nil
		}
		if !s.gates["DRAConsumableCapacity"] {
			d.AllowMultipleAllocations = nil
			for k, c := range d.Capacity {
				c.RequestPolicy = nil
				d.Capacity[k] = c
			}
		}
		if !s.gates["DRAListTypeAttributes"] {
			for k, a := range d.Attributes {
				a.StringValues = nil
				d.Attributes[k] = a
			}
		}
	}
	var errs field.ErrorList
	if sl.Spec.AllNodes == nil && sl.Spec.PerDeviceNodeSelection == nil {
		errs = append(errs, field.Required(field.NewPath("spec"), "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"))
	}
	counters := false
	for i, d := range sl.Spec.Devices {
		counters = counters || len(d.ConsumesCounters) > 0
		for k, a := range d.Attributes {
			if a.StringValue == nil && a.StringValues == nil {
				errs = append(errs, field.Invalid(field.NewPath("spec", "devices").Index(i).Child("attributes").Key(string(k)), "", "exactly one value must be specified"))
			}
		}
		if sl.Spec.PerDeviceNodeSelection == nil && d.AllNodes != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "devices").Index(i), nil, "`allNodes` can only be set if `perDeviceNodeSelection` is set"))
		}
	}
	if sl.Spec.PartitionTypeAttribute != nil && !counters {
		errs = append(errs, field.Invalid(field.NewPath("spec", "partitionTypeAttribute"), "", "may only be set on a slice which declares devices that consume counters"))
	}
	if len(errs) > 0 {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: resourceapi.GroupName, Kind: "ResourceSlice"}, sl.Name, errs)
	}
	return true, sl, nil
}

func (s *fakeServer) claim(c *resourceapi.ResourceClaim) (bool, runtime.Object, error) {
	var errs field.ErrorList
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		p := field.NewPath("spec", "devices", "requests").Index(i)
		if !s.gates["DRAPrioritizedList"] {
			r.FirstAvailable = nil
		}
		if r.Exactly == nil && r.FirstAvailable == nil {
			errs = append(errs, field.Required(p, "exactly one of `exactly` or `firstAvailable` is required"))
			continue
		}
		if e := r.Exactly; e != nil {
			if !s.gates["DRAConsumableCapacity"] {
				e.Capacity = nil
			}
			if !s.gates["DRADerivedAttributes"] {
				e.DerivedAttributes = nil
			}
			if !s.gates["DRAAdminAccess"] {
				e.AdminAccess = nil
			}
			if e.AdminAccess != nil && *e.AdminAccess {
				// The probe namespace is not labelled for admin access.
				errs = append(errs, field.Forbidden(p.Child("adminAccess"), "admin access to devices requires the `resource.kubernetes.io/admin-access: true` label on the containing namespace"))
			}
		}
	}
	if len(errs) > 0 {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: resourceapi.GroupName, Kind: "ResourceClaim"}, c.Name, errs)
	}
	return true, c, nil
}

// allGates are every gate the probe can see.
var allGates = []string{
	"DRAPartitionableDevices", "DRAPartitionableDevicesType", "DRADeviceCompatibilityGroups",
	"DRAListTypeAttributes", "DRADeviceTaints", "DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus",
	"DRAConsumableCapacity", "DRAOptionalNodeOperations", "DRAPrioritizedList", "DRADerivedAttributes",
	"DRAAdminAccess", "DRAExtendedResource",
}

func gates(on ...string) map[string]bool {
	m := map[string]bool{}
	for _, g := range on {
		m[g] = true
	}
	return m
}

func without(off ...string) map[string]bool {
	m := gates(allGates...)
	for _, g := range off {
		delete(m, g)
	}
	return m
}

func newProber(server *fakeServer, gitVersion string, resources ...*metav1.APIResourceList) *Prober {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "*", server.react)
	disc := cs.Discovery().(*fakediscovery.FakeDiscovery)
	disc.FakedServerVersion = &version.Info{GitVersion: gitVersion}
	disc.Resources = resources
	return &Prober{Client: cs, Namespace: "drastack-system"}
}

var (
	v1Resources = &metav1.APIResourceList{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "resourceslices", Kind: "ResourceSlice"}, {Name: "resourceclaims", Namespaced: true, Kind: "ResourceClaim"},
		{Name: "deviceclasses", Kind: "DeviceClass"},
	}}
	v1WithTaintRules = &metav1.APIResourceList{GroupVersion: "resource.k8s.io/v1", APIResources: append(
		append([]metav1.APIResource(nil), v1Resources.APIResources...), metav1.APIResource{Name: "devicetaintrules", Kind: "DeviceTaintRule"})}
	v1beta2TaintRules  = &metav1.APIResourceList{GroupVersion: "resource.k8s.io/v1beta2", APIResources: []metav1.APIResource{{Name: "devicetaintrules", Kind: "DeviceTaintRule"}}}
	v1alpha3PoolStatus = &metav1.APIResourceList{GroupVersion: "resource.k8s.io/v1alpha3", APIResources: []metav1.APIResource{{Name: "resourcepoolstatusrequests", Kind: "ResourcePoolStatusRequest"}}}
)

// everything is a cluster with every feature.
var everything = v1alpha1.ClusterFeatures{
	PartitionableDevices: true, ListTypeAttributes: true, DeviceTaints: true,
	DeviceTaintRules: true, DeviceTaintRulesVersion: "v1", PrioritizedList: true,
	ConsumableCapacity: true, BindingConditions: true, CompatibilityGroups: true, PartitionType: true,
	OptionalNodeOperations: true, DerivedAttributes: true, AdminAccess: true, ExtendedResources: true,
	ResourcePoolStatusRequests: true, ResourcePoolStatusRequestsVersion: "v1alpha3",
	GranularStatusAuthorization: true,
}

func TestProbe(t *testing.T) {
	with := func(change func(*v1alpha1.ClusterFeatures)) v1alpha1.ClusterFeatures {
		f := everything
		change(&f)
		return f
	}
	all := []*metav1.APIResourceList{v1WithTaintRules, v1beta2TaintRules, v1alpha3PoolStatus}
	tests := []struct {
		name      string
		gates     map[string]bool
		version   string
		resources []*metav1.APIResourceList
		want      v1alpha1.ClusterFeatures
	}{
		{name: "every gate on", gates: gates(allGates...), version: "v1.37.2", resources: all, want: everything},
		{
			name: "1.36 defaults: taint rules in v1beta2 only, alpha gates off", version: "v1.36.3",
			gates: without("DRAPartitionableDevicesType", "DRADeviceCompatibilityGroups", "DRAListTypeAttributes",
				"DRAOptionalNodeOperations", "DRADerivedAttributes", "DRADeviceTaints", "DRAPartitionableDevices"),
			resources: []*metav1.APIResourceList{v1Resources, v1beta2TaintRules},
			want: with(func(f *v1alpha1.ClusterFeatures) {
				f.PartitionableDevices, f.PartitionType, f.CompatibilityGroups, f.ListTypeAttributes = false, false, false, false
				f.OptionalNodeOperations, f.DerivedAttributes, f.DeviceTaints = false, false, false
				f.DeviceTaintRulesVersion = "v1beta2"
				f.ResourcePoolStatusRequests, f.ResourcePoolStatusRequestsVersion = false, ""
			}),
		},
		{
			name: "partitionable devices off: its extensions cannot be used either", version: "v1.37.2", resources: all,
			gates: without("DRAPartitionableDevices"),
			want: with(func(f *v1alpha1.ClusterFeatures) {
				f.PartitionableDevices, f.PartitionType, f.CompatibilityGroups = false, false, false
			}),
		},
		{
			name: "list attributes off: the refused list slice costs nothing else", version: "v1.37.2", resources: all,
			gates: without("DRAListTypeAttributes"),
			want:  with(func(f *v1alpha1.ClusterFeatures) { f.ListTypeAttributes = false }),
		},
		{
			name: "prioritized list off", version: "v1.37.2", resources: all,
			gates: without("DRAPrioritizedList"),
			want:  with(func(f *v1alpha1.ClusterFeatures) { f.PrioritizedList = false }),
		},
		{
			name: "consumable capacity off in both slice and claim", version: "v1.37.2", resources: all,
			gates: without("DRAConsumableCapacity"),
			want:  with(func(f *v1alpha1.ClusterFeatures) { f.ConsumableCapacity = false }),
		},
		{
			name: "binding conditions need the device status gate too", version: "v1.37.2", resources: all,
			gates: without("DRAResourceClaimDeviceStatus"),
			want:  with(func(f *v1alpha1.ClusterFeatures) { f.BindingConditions = false }),
		},
		{
			name: "admin access off: the claim is kept without the field", version: "v1.37.2", resources: all,
			gates: without("DRAAdminAccess"),
			want:  with(func(f *v1alpha1.ClusterFeatures) { f.AdminAccess = false }),
		},
		{
			name: "each alpha gate off alone", version: "v1.37.2", resources: all,
			gates: without("DRAPartitionableDevicesType", "DRADeviceCompatibilityGroups", "DRADerivedAttributes", "DRAOptionalNodeOperations", "DRAExtendedResource", "DRADeviceTaints"),
			want: with(func(f *v1alpha1.ClusterFeatures) {
				f.PartitionType, f.CompatibilityGroups, f.DerivedAttributes, f.OptionalNodeOperations, f.ExtendedResources, f.DeviceTaints = false, false, false, false, false, false
			}),
		},
		{
			name: "1.35 needs no binding permission", version: "v1.35.4", resources: all, gates: gates(allGates...),
			want: with(func(f *v1alpha1.ClusterFeatures) { f.GranularStatusAuthorization = false }),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			server := &fakeServer{gates: tc.gates}
			got, err := newProber(server, tc.version, tc.resources...).Probe(context.Background())
			if err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if got.Features != tc.want {
				t.Errorf("features\n got %+v\nwant %+v", got.Features, tc.want)
			}
			if got.KubernetesVersion != tc.version || got.LastProbeTime == nil {
				t.Errorf("version %q, lastProbeTime %v", got.KubernetesVersion, got.LastProbeTime)
			}
			if server.writes != 8 {
				t.Errorf("%d dry-run writes, want 8", server.writes)
			}
		})
	}
}

func TestProbeErrors(t *testing.T) {
	t.Run("no v1: nothing written", func(t *testing.T) {
		server := &fakeServer{gates: gates(allGates...)}
		old := &metav1.APIResourceList{GroupVersion: "resource.k8s.io/v1beta1", APIResources: []metav1.APIResource{{Name: "resourceslices"}}}
		got, err := newProber(server, "v1.31.0", old).Probe(context.Background())
		if err != nil || server.writes != 0 || got.Features != (v1alpha1.ClusterFeatures{}) {
			t.Fatalf("got %+v, %v after %d writes", got, err, server.writes)
		}
	})
	t.Run("a write that is not refused by validation fails the probe", func(t *testing.T) {
		server := &fakeServer{gates: gates(allGates...), fail: apierrors.NewForbidden(schema.GroupResource{Group: resourceapi.GroupName, Resource: "resourceslices"}, "x", errors.New("RBAC"))}
		_, err := newProber(server, "v1.37.2", v1WithTaintRules).Probe(context.Background())
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ResourceSlice drastack-probe-partitionable") {
			t.Fatalf("err = %v, want a forbidden error naming the probe object", err)
		}
	})
}
