package explain

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// gangCluster has nodes with four GPUs each, of types x, x, y, x.
func gangCluster(nodes ...string) allocator.Inputs {
	var in allocator.Inputs
	in.Classes = []*resourceapi.DeviceClass{{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", benchDriver)},
		}}},
	}}
	for _, node := range nodes {
		in.Nodes = append(in.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		s := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
			Spec: resourceapi.ResourceSliceSpec{Driver: benchDriver, NodeName: ptr.To(node),
				Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}},
		}
		for d, typ := range []string{"x", "x", "y", "x"} {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", d),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To(typ)}}})
		}
		in.Slices = append(in.Slices, s)
	}
	return in
}

func gangClaim(name string, count int64, selector string) *resourceapi.ResourceClaim {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	if selector != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID(name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}}}},
	}
}

// TestExplainGang: a gang that fits says where each member goes (the
// placement one pod at a time would miss: kubernetes#138765); a member
// that cannot be placed alone is named with its own verdict; members that
// each fit alone but not together are said to; a member's node filter
// counts.
func TestExplainGang(t *testing.T) {
	typeX := fmt.Sprintf(`device.attributes[%q].type == "x"`, benchDriver)
	for _, tc := range []struct {
		name    string
		in      allocator.Inputs
		members []GangMember
		fits    bool
		verdict []string
		alone   int // members explained alone
	}{
		{
			name: "the #138765 gang fits on one node",
			in:   gangCluster("n0"),
			members: []GangMember{
				{Pod: "team/a", Claims: []*resourceapi.ResourceClaim{gangClaim("a", 1, "")}},
				{Pod: "team/b", Claims: []*resourceapi.ResourceClaim{gangClaim("b", 3, typeX)}},
			},
			fits: true, verdict: []string{"gang team/train fits: team/a on n0, team/b on n0"},
		},
		{
			name: "a member that fits nowhere alone is the obstacle",
			in:   gangCluster("n0", "n1"),
			members: []GangMember{
				{Pod: "team/a", Claims: []*resourceapi.ResourceClaim{gangClaim("a", 1, "")}},
				{Pod: "team/b", Claims: []*resourceapi.ResourceClaim{gangClaim("b", 4, typeX)}},
			},
			verdict: []string{"gang team/train: pod team/b cannot be placed even alone:", "3 after selector 1", "4 needed"}, alone: 2,
		},
		{
			name: "each fits alone, not together",
			in:   gangCluster("n0"),
			members: []GangMember{
				{Pod: "team/a", Claims: []*resourceapi.ResourceClaim{gangClaim("a", 3, "")}},
				{Pod: "team/b", Claims: []*resourceapi.ResourceClaim{gangClaim("b", 3, "")}},
			},
			verdict: []string{"gang team/train: every member fits alone, but not all together", "member"}, alone: 2,
		},
		{
			name: "a member's node filter leaves it no node",
			in:   gangCluster("n0", "n1"),
			members: []GangMember{
				{Pod: "team/a", Claims: []*resourceapi.ResourceClaim{gangClaim("a", 1, "")},
					NodeFilter: map[string]string{"n0": "node(s) were unschedulable", "n1": "node(s) were unschedulable"}},
				{Pod: "team/b", Claims: []*resourceapi.ResourceClaim{gangClaim("b", 1, "")}},
			},
			verdict: []string{"pod team/a cannot be placed even alone: no node passes the pod's node filters: 0/2 nodes are available"}, alone: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := ExplainGang(context.Background(), nil, tc.in, Gang{Name: "team/train", Members: tc.members}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Fits != tc.fits {
				t.Errorf("fits = %v, want %v (%s)", rep.Fits, tc.fits, rep.Verdict)
			}
			for _, v := range tc.verdict {
				if !strings.Contains(rep.Verdict, v) {
					t.Errorf("verdict %q, want %q in it", rep.Verdict, v)
				}
			}
			alone := 0
			for _, m := range rep.Members {
				if m.Alone != nil {
					alone++
				}
				if tc.fits && (m.Node == "" || len(m.Devices) == 0) {
					t.Errorf("member %s: fits without a node or devices: %+v", m.Pod, m)
				}
			}
			if alone != tc.alone {
				t.Errorf("%d members explained alone, want %d", alone, tc.alone)
			}
			if !tc.fits && rep.Reason == "" {
				t.Error("no engine reason for a gang that does not fit")
			}
		})
	}
}
