package driver

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

// nodeFacts gives the renders the nodes their profiles' placement depends
// on (driver.NodeResources): those with capacity for one of the extended
// resources a declared driver asks about, from the cached nodes. Nothing
// is listed when no driver asks.
func (r *Reconciler) nodeFacts(ctx context.Context, specs []v1alpha1.DriverSpec) ([]driver.NodeFacts, error) {
	var asked []string
	for i := range specs {
		asked = append(asked, driver.NodeResources(&specs[i])...)
	}
	if len(asked) == 0 {
		return nil, nil
	}
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []driver.NodeFacts
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if res := servedResources(n, asked); len(res) > 0 {
			out = append(out, driver.NodeFacts{Name: n.Name, Labels: n.Labels, Resources: res})
		}
	}
	return out, nil
}

// servedResources are the resources of names a node has capacity above
// zero for: a device plugin serves them there. Capacity, not allocatable:
// a device plugin whose devices are all unhealthy still owns them.
func servedResources(n *corev1.Node, names []string) []string {
	var out []string
	for _, name := range names {
		if q, ok := n.Status.Capacity[corev1.ResourceName(name)]; ok && q.Cmp(resource.Quantity{}) > 0 && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}
