package clusterprobe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Prober probes one cluster.
type Prober struct {
	// Client writes the dry-run objects.
	Client kubernetes.Interface
	// Discovery lists served APIs; defaults to Client.Discovery().
	Discovery discovery.DiscoveryInterface
	// Namespace holds the dry-run claims; it must exist. Defaults to "default".
	Namespace string
}

// Probe returns what the cluster supports: served versions and APIs from
// discovery, gated fields from server-side dry-run writes (eight: four
// ResourceSlices, three ResourceClaims, one DeviceClass), and
// granularStatusAuthorization from the server version. A feature whose
// probe object is refused by validation counts as unsupported (the server
// dropped a field the rest of the object needed); any other failure (no
// permission, no connection) is returned, because guessing would report a
// healthy cluster as broken.
func (p *Prober) Probe(ctx context.Context) (*v1alpha1.ClusterStatus, error) {
	disc := p.Discovery
	if disc == nil {
		disc = p.Client.Discovery()
	}
	ns := p.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	status := &v1alpha1.ClusterStatus{}
	info, err := disc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("read server version: %w", err)
	}
	status.KubernetesVersion = info.GitVersion
	status.Features.GranularStatusAuthorization = requiresGranularStatusAuthorization(info.GitVersion)
	groups, err := disc.ServerGroups()
	if err != nil {
		return nil, fmt.Errorf("discover API groups: %w", err)
	}
	status.ResourceAPIVersions = resourceVersions(groups)
	if !slices.Contains(status.ResourceAPIVersions, "v1") {
		// Without resource.k8s.io/v1 there is nothing to probe with v1 objects.
		return status, nil
	}
	var lists []*metav1.APIResourceList
	for _, v := range status.ResourceAPIVersions {
		l, err := disc.ServerResourcesForGroupVersion(resourceapi.GroupName + "/" + v)
		if err != nil {
			return nil, fmt.Errorf("discover resources of %s/%s: %w", resourceapi.GroupName, v, err)
		}
		lists = append(lists, l)
	}
	f := &status.Features
	f.DeviceTaintRulesVersion = servingVersion(lists, "devicetaintrules")
	f.DeviceTaintRules = f.DeviceTaintRulesVersion != ""
	f.ResourcePoolStatusRequestsVersion = servingVersion(lists, "resourcepoolstatusrequests")
	f.ResourcePoolStatusRequests = f.ResourcePoolStatusRequestsVersion != ""

	r := &dryRunner{ctx: ctx}
	sliceAPI := p.Client.ResourceV1().ResourceSlices()
	claimAPI := p.Client.ResourceV1().ResourceClaims(ns)

	got, _ := dryRunCreate(r, sliceAPI.Create, partitionableSlice())
	f.PartitionableDevices = keptPartitionable(got)
	got, _ = dryRunCreate(r, sliceAPI.Create, partitionFeaturesSlice())
	f.CompatibilityGroups = keptPartitionable(got) && keptCompatibilityGroups(got)
	f.PartitionType = keptPartitionable(got) && keptPartitionType(got)
	got, _ = dryRunCreate(r, sliceAPI.Create, listAttributeSlice())
	f.ListTypeAttributes = keptListAttribute(got)
	got, _ = dryRunCreate(r, sliceAPI.Create, deviceFeaturesSlice())
	f.DeviceTaints = keptTaint(got)
	f.BindingConditions = keptBindingConditions(got)
	f.OptionalNodeOperations = keptSkipNodeOperations(got)
	multiAllocatable := keptMultiAllocatable(got)

	claim, _ := dryRunCreate(r, claimAPI.Create, prioritizedListClaim(ns))
	f.PrioritizedList = keptFirstAvailable(claim)
	claim, _ = dryRunCreate(r, claimAPI.Create, requestFeaturesClaim(ns))
	f.ConsumableCapacity = multiAllocatable && keptCapacityRequest(claim)
	f.DerivedAttributes = keptDerivedAttributes(claim)
	claim, refusal := dryRunCreate(r, claimAPI.Create, adminAccessClaim(ns))
	f.AdminAccess = keptAdminAccess(claim) || refusedForAdminAccess(refusal)

	class, _ := dryRunCreate(r, p.Client.ResourceV1().DeviceClasses().Create, extendedResourceClass())
	f.ExtendedResources = keptExtendedResourceName(class)

	if err := errors.Join(r.errs...); err != nil {
		return nil, err
	}
	now := metav1.Now()
	status.LastProbeTime = &now
	return status, nil
}

// dryRunner sends the probe's dry-run writes and collects their failures.
type dryRunner struct {
	ctx  context.Context
	errs []error
}

// dryRunCreate creates obj with a server-side dry run and returns what the
// server would have stored. A write refused by validation returns a nil
// object (which every kept function reads as "not kept") and the refusal,
// for the rare probe that learns from it. Any other failure is collected in
// r.errs, because it says nothing about the feature.
func dryRunCreate[T metav1.Object](r *dryRunner, create func(context.Context, T, metav1.CreateOptions) (T, error), obj T) (got T, refusal error) {
	var none T
	got, err := create(r.ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "drastack-probe"})
	switch {
	case err == nil:
		return got, nil
	case apierrors.IsInvalid(err):
		klog.FromContext(r.ctx).V(4).Info("Feature probe refused", "object", obj.GetName(), "err", err)
		return none, err
	default:
		what := obj.GetName()
		if ns := obj.GetNamespace(); ns != "" {
			what = ns + "/" + what
		}
		kind := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1.")
		r.errs = append(r.errs, fmt.Errorf("probe with a dry-run %s %s: %w", kind, what, err))
		return none, nil
	}
}
