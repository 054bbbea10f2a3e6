package clusterprobe

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
	// Namespace holds the dry-run claim; it must exist. Defaults to "default".
	Namespace string
}

// Probe returns what the cluster supports. A feature whose probe is refused
// by validation counts as unsupported (the server rejected a field it does
// not know or dropped); any other failure (no permission, no connection) is
// returned, because guessing would report a healthy cluster as broken.
func (p *Prober) Probe(ctx context.Context) (*v1alpha1.ClusterStatus, error) {
	logger := klog.FromContext(ctx)
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
	status.Features.DeviceTaintRules = servesResource(lists, "devicetaintrules")

	slices := p.Client.ResourceV1().ResourceSlices()
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "drastack-probe"}
	probeSliceFeature := func(name string, s *resourceapi.ResourceSlice, kept func(*resourceapi.ResourceSlice) bool) (bool, error) {
		got, err := slices.Create(ctx, s, dry)
		if err != nil {
			if apierrors.IsInvalid(err) {
				logger.V(4).Info("Feature probe refused", "feature", name, "err", err)
				return false, nil
			}
			return false, fmt.Errorf("probe %s with a dry-run ResourceSlice: %w", name, err)
		}
		return kept(got), nil
	}
	var errs []error
	var e error
	status.Features.PartitionableDevices, e = probeSliceFeature("partitionableDevices", partitionableSlice(), keptPartitionable)
	errs = append(errs, e)
	status.Features.ListTypeAttributes, e = probeSliceFeature("listTypeAttributes", listAttributeSlice(), keptListAttribute)
	errs = append(errs, e)
	status.Features.DeviceTaints, e = probeSliceFeature("deviceTaints", taintSlice(), keptTaint)
	errs = append(errs, e)

	got, err := p.Client.ResourceV1().ResourceClaims(ns).Create(ctx, prioritizedListClaim(ns), dry)
	switch {
	case err == nil:
		status.Features.PrioritizedList = keptFirstAvailable(got)
	case apierrors.IsInvalid(err):
		status.Features.PrioritizedList = false
	default:
		errs = append(errs, fmt.Errorf("probe prioritizedList with a dry-run ResourceClaim in namespace %s: %w", ns, err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	now := metav1.Now()
	status.LastProbeTime = &now
	return status, nil
}
