package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations that mark a node as a kwok fake node.
const (
	// KwokNodeAnnotation is the annotation kwok's own tooling puts on its
	// nodes; kwok manages exactly the nodes where it is
	// KwokNodeAnnotationValue, so that a real node is left to its kubelet.
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// KwokNodeAnnotationValue marks a fake node.
	KwokNodeAnnotationValue = "fake"
	// KwokTypeLabel / KwokTypeValue let workloads and the simulated driver
	// select the fake nodes.
	KwokTypeLabel = "type"
	KwokTypeValue = "kwok"
)

// nodeReadyPoll is how often AddNodes looks at the nodes it waits for.
const nodeReadyPoll = 250 * time.Millisecond

// NodeSpec describes one kwok node to create.
type NodeSpec struct {
	// Name is the node name (required).
	Name string
	// Labels are added to the labels every kwok node gets: type=kwok,
	// kubernetes.io/hostname=<name>, kubernetes.io/os=linux,
	// kubernetes.io/arch=amd64.
	Labels map[string]string
	// Capacity is used as both capacity and allocatable. Default:
	// DefaultNodeCapacity.
	Capacity corev1.ResourceList
}

// NewNode renders the Node object for spec: a fake node that kwok manages,
// without taints, so that ordinary pods schedule onto it.
func NewNode(spec NodeSpec) *corev1.Node {
	labels := map[string]string{
		KwokTypeLabel:          KwokTypeValue,
		corev1.LabelHostname:   spec.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
	}
	maps.Copy(labels, spec.Labels)
	capacity := spec.Capacity
	if len(capacity) == 0 {
		capacity = DefaultNodeCapacity()
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        spec.Name,
			Labels:      labels,
			Annotations: map[string]string{KwokNodeAnnotation: KwokNodeAnnotationValue},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity.DeepCopy(),
			Allocatable: capacity.DeepCopy(),
		},
	}
}

// AddNodes creates kwok nodes and waits until kwok has made every one of
// them Ready. A node that already exists is an error.
func (c *Cluster) AddNodes(ctx context.Context, specs ...NodeSpec) error {
	for _, spec := range specs {
		if spec.Name == "" {
			return errors.New("add node: empty name")
		}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, NewNode(spec), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", spec.Name, err)
		}
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return c.WaitNodesReady(ctx, names...)
}

// WaitNodesReady waits until every named node reports Ready, kwok dies, or
// the start timeout passes.
func (c *Cluster) WaitNodesReady(ctx context.Context, names ...string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.startTimeout())
	defer cancel()
	pending := append([]string(nil), names...)
	for {
		var still []string
		for _, name := range pending {
			node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
				return fmt.Errorf("get node %s: %w", name, err)
			}
			if err != nil || !NodeReady(node) {
				still = append(still, name)
			}
		}
		if len(still) == 0 {
			return nil
		}
		pending = still
		if err := c.Healthy(); err != nil {
			return fmt.Errorf("waiting for nodes %v to become Ready: %w", pending, err)
		}
		select {
		case <-ctx.Done():
			return c.kwokFailure(fmt.Errorf("nodes %v not Ready after %s", pending, c.opts.startTimeout()))
		case <-time.After(nodeReadyPoll):
		}
	}
}

// kwokFailure attaches kwok's log to err: nodes that do not become Ready
// are kwok's business.
func (c *Cluster) kwokFailure(err error) error {
	for _, comp := range c.components {
		if comp.name == "kwok" {
			return comp.failure(err)
		}
	}
	return err
}

// NodeReady reports whether node has the Ready condition set to True.
func NodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// DeleteNode deletes a node; kube-controller-manager's garbage collector
// then removes what it owned (for example its ResourceSlices).
func (c *Cluster) DeleteNode(ctx context.Context, name string) error {
	if err := c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	return nil
}
