package verify

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/drastack/drastack/internal/pool"
)

// resolveNode finds the node object for the node the allocation was made
// for. A node missing from the inputs is represented by its name only, as
// the engines do.
func (k *check) resolveNode() {
	if k.node == "" {
		return
	}
	if n := k.nodes[k.node]; n != nil {
		k.nodeObj = n
		return
	}
	k.nodeObj = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.node}}
}

// reachable reports whether node n can use device d.
func reachable(d *pool.Device, n *corev1.Node) bool {
	switch {
	case d.NodeName != "":
		return n != nil && n.Name == d.NodeName
	case d.AllNodes:
		return true
	case d.NodeSelector != nil:
		ok, err := selectorMatches(d.NodeSelector, n)
		return err == nil && ok
	}
	return false
}

// selectorMatches evaluates a node selector (terms ORed, requirements ANDed).
func selectorMatches(sel *corev1.NodeSelector, n *corev1.Node) (bool, error) {
	if n == nil {
		return false, nil
	}
	ns, err := nodeaffinity.NewNodeSelector(sel)
	if err != nil {
		return false, fmt.Errorf("parse node selector: %w", err)
	}
	return ns.Match(n), nil
}

// checkNodeSelector checks the allocation's node selector:
//   - with a node-local device, it must name that node (and only that node
//     among the known nodes), all node-local devices must be on that node,
//     and the allocation must have been made for it;
//   - with only allNodes devices, there must be none;
//   - otherwise it must admit exactly the known nodes that reach every
//     device (the intersection of the devices' own selectors);
//   - the node the allocation was made for must satisfy it.
func (k *check) checkNodeSelector() {
	sel := k.alloc.NodeSelector
	var local string
	allNodes := true
	var devs []*pool.Device
	for _, res := range k.results {
		if res.dev == nil {
			continue
		}
		devs = append(devs, res.dev)
		if !res.dev.AllNodes {
			allNodes = false
		}
		if n := res.dev.NodeName; n != "" {
			if local != "" && local != n {
				k.fail(RuleNode, res.id.String(), "device is local to node %s, another device to node %s", n, local)
			}
			local = n
		}
	}
	if len(devs) == 0 {
		return
	}
	if k.nodeObj != nil && sel != nil {
		if ok, err := selectorMatches(sel, k.nodeObj); err != nil || !ok {
			k.fail(RuleNode, "", "node %s does not satisfy the allocation's node selector (%v)", k.node, errOr(err, "no match"))
		}
	}
	switch {
	case local != "":
		if k.node == "" {
			k.fail(RuleNode, "", "allocation has devices local to node %s but was made without a node", local)
		} else if k.node != local {
			k.fail(RuleNode, "", "allocation was made for node %s but has devices local to node %s", k.node, local)
		}
		if sel == nil {
			k.fail(RuleNodeSelector, "", "allocation has devices local to node %s but no node selector", local)
			return
		}
		home := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: local}}
		if n := k.nodes[local]; n != nil {
			home = n
		}
		if ok, err := selectorMatches(sel, home); err != nil || !ok {
			k.fail(RuleNodeSelector, "", "node selector does not admit node %s, where the devices are (%v)", local, errOr(err, "no match"))
		}
		k.checkAdmitsOnly(sel, func(n *corev1.Node) bool { return n.Name == local })
	case allNodes:
		if sel != nil {
			k.fail(RuleNodeSelector, "", "all devices are reachable from all nodes, but the allocation has node selector %v", sel)
		}
	default:
		if sel == nil {
			k.fail(RuleNodeSelector, "", "devices are reachable from some nodes only, but the allocation has no node selector")
			return
		}
		k.checkAdmitsOnly(sel, func(n *corev1.Node) bool {
			for _, d := range devs {
				if !reachable(d, n) {
					return false
				}
			}
			return true
		})
	}
}

// checkAdmitsOnly checks sel against every known node: it must admit the
// node exactly when want says so.
func (k *check) checkAdmitsOnly(sel *corev1.NodeSelector, want func(*corev1.Node) bool) {
	for _, n := range k.in.Nodes {
		got, err := selectorMatches(sel, n)
		if err != nil {
			k.fail(RuleNodeSelector, "", "node selector is malformed: %v", err)
			return
		}
		if w := want(n); got != w {
			verb := "admits"
			if !got {
				verb = "does not admit"
			}
			k.fail(RuleNodeSelector, "", "node selector %s node %s, which %s the devices", verb, n.Name, map[bool]string{true: "reaches", false: "does not reach"}[w])
		}
	}
}

func errOr(err error, s string) any {
	if err != nil {
		return err
	}
	return s
}
