package simdriver

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// nodeSlicesSelector selects one driver's slices of one node.
func nodeSlicesSelector(driver, node string) string {
	return fields.Set{
		resourceapi.ResourceSliceSelectorDriver:   driver,
		resourceapi.ResourceSliceSelectorNodeName: node,
	}.String()
}

// deleteSlices removes every slice of a driver on a node.
func (s *Sim) deleteSlices(ctx context.Context, driver, node string) error {
	err := s.opts.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: nodeSlicesSelector(driver, node)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete slices of driver %s on node %s: %w", driver, node, err)
	}
	return nil
}

// brokenSliceName is the fixed name of a broken pool's slice i, so that
// writing it again finds the earlier copy. It starts with the index like
// the names the slice controller picks.
func brokenSliceName(driver, pool string, i int) string {
	name := fmt.Sprintf("%05x-%s-%s", i, driver, pool)
	if len(name) > validation.DNS1123SubdomainMaxLength {
		name = strings.TrimRight(name[:validation.DNS1123SubdomainMaxLength], "-.")
	}
	return name
}

// writeBroken publishes broken pools directly: the resourceslice
// controller validates pools before writing and would refuse them. The
// slices are node-local and owned by the Node like the valid ones; slices
// of the driver on the node that are not part of the pools are deleted.
func (s *Sim) writeBroken(ctx context.Context, node *corev1.Node, driver string, pools []Pool) error {
	client := s.opts.Client.ResourceV1().ResourceSlices()
	want := map[string]*resourceapi.ResourceSlice{}
	for _, p := range pools {
		for i, sl := range p.Slices {
			name := brokenSliceName(driver, p.Name, i)
			want[name] = &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name: name,
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr.To(true),
					}},
				},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:         driver,
					Pool:           resourceapi.ResourcePool{Name: p.Name, Generation: 1, ResourceSliceCount: int64(len(p.Slices))},
					NodeName:       ptr.To(node.Name),
					Devices:        sl.Devices,
					SharedCounters: sl.SharedCounters,
				},
			}
		}
	}
	existing, err := client.List(ctx, metav1.ListOptions{FieldSelector: nodeSlicesSelector(driver, node.Name)})
	if err != nil {
		return fmt.Errorf("list slices of driver %s on node %s: %w", driver, node.Name, err)
	}
	for i := range existing.Items {
		old := &existing.Items[i]
		desired, ok := want[old.Name]
		if !ok {
			if err := client.Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete stale slice %s: %w", old.Name, err)
			}
			continue
		}
		delete(want, old.Name)
		if apiequality.Semantic.DeepEqual(old.Spec, desired.Spec) {
			continue
		}
		old.Spec = desired.Spec
		if _, err := client.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update broken slice %s: %w", old.Name, err)
		}
	}
	for _, sl := range want {
		if _, err := client.Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create broken slice %s: %w", sl.Name, err)
		}
	}
	return nil
}

// waitPollInterval is how often WaitPublished lists slices.
const waitPollInterval = 250 * time.Millisecond

// WaitPublished waits until every node the sim currently knows has all its
// pools in the API server: for each pool, as many slices of the newest
// generation as the pool has, each announcing that count. On timeout the
// error lists what is missing and the last publishing errors.
func (s *Sim) WaitPublished(ctx context.Context) error {
	var missing []string
	for {
		var err error
		missing, err = s.missingPools(ctx)
		if err == nil && len(missing) == 0 {
			return nil
		}
		if err != nil {
			missing = []string{err.Error()}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slices not published: %v; last errors: %v", missing, s.Errors())
		case <-time.After(waitPollInterval):
		}
	}
}

// missingPools compares what Render says every cached node should have
// with the slices in the API server.
func (s *Sim) missingPools(ctx context.Context) ([]string, error) {
	nodes, err := s.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list cached nodes: %w", err)
	}
	list, err := s.opts.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list slices: %w", err)
	}
	type poolKey struct{ driver, pool, node string }
	type seen struct {
		gen   int64
		count int64
		n     int
	}
	have := map[poolKey]*seen{}
	for _, sl := range list.Items {
		k := poolKey{sl.Spec.Driver, sl.Spec.Pool.Name, ptr.Deref(sl.Spec.NodeName, "")}
		h := have[k]
		if h == nil || sl.Spec.Pool.Generation > h.gen {
			h = &seen{gen: sl.Spec.Pool.Generation}
			have[k] = h
		}
		if sl.Spec.Pool.Generation == h.gen {
			h.n++
			h.count = sl.Spec.Pool.ResourceSliceCount
		}
	}
	var missing []string
	for _, node := range nodes {
		if node.DeletionTimestamp != nil {
			continue
		}
		pools, err := Render(s.opts.Inventory, node.Name, node.Labels)
		if err != nil {
			return nil, err
		}
		for _, p := range pools {
			h := have[poolKey{p.Driver, p.Name, node.Name}]
			want := len(p.Slices)
			if h == nil || h.n != want || h.count != int64(want) {
				missing = append(missing, fmt.Sprintf("%s/%s on %s", p.Driver, p.Name, node.Name))
			}
		}
	}
	return missing, nil
}
