package difftest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/upstream"
)

// TestCompare specifies when two engines agree.
func TestCompare(t *testing.T) {
	good := Outcome{Verdict: Allocated, Result: allocator.Result{Node: "node-0", Allocation: &resourceapi.AllocationResult{
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-0"},
		}}}}},
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "r0", Driver: gpuDriver, Pool: "node-0", Device: "a",
		}}},
	}}}
	bad := good
	bad.Result.Allocation = good.Result.Allocation.DeepCopy()
	bad.Result.Allocation.Devices.Results[0].Device = "missing"
	unsat := Outcome{Verdict: Unsatisfiable, Err: allocator.ErrUnsatisfiable}
	aborted := classify(nil, fmt.Errorf("%w: x (%w)", allocator.ErrUnsatisfiable, upstream.ErrAborted))
	bound := classify(nil, fmt.Errorf("%w: x", allocator.ErrSearchBound))
	notSupported := classify(nil, fmt.Errorf("x: %w", allocator.ErrNotSupported))
	failed := classify(nil, errors.New("boom"))
	invalid := classify(nil, &allocator.InvalidClaimError{Claim: "default/claim", Field: "spec", Err: errors.New("bad")})
	invalidCEL := classify(nil, &allocator.InvalidClaimError{Claim: "default/claim", Field: allocator.CELConstraintsField + "[0].expression", Err: errors.New("bad")})

	tests := []struct {
		name        string
		cel         bool
		a, b        Outcome
		wantProblem string // substring of the problem; "" for none
	}{
		{name: "both allocate", a: good, b: good},
		{name: "both unsatisfiable", a: unsat, b: unsat},
		{name: "both invalid", a: invalid, b: invalid},
		{name: "allocated vs unsatisfiable", a: good, b: unsat, wantProblem: "native says allocated"},
		{name: "unsatisfiable vs allocated", a: unsat, b: good, wantProblem: "upstream says allocated"},
		{name: "a wrong allocation is rejected even when both agree", a: good, b: bad, wantProblem: "verifier rejects"},
		{name: "upstream aborted where native allocates: disagreement", a: good, b: aborted, wantProblem: "upstream says aborted"},
		{name: "upstream aborted where native finds nothing: agreement", a: unsat, b: aborted},
		{name: "a search bound is not compared", a: bound, b: good},
		{name: "an unexpected error is a problem", a: failed, b: unsat, wantProblem: "unexpected error"},
		{name: "not supported without CEL constraints is a problem", a: good, b: notSupported, wantProblem: "not supported"},
		{name: "CEL constraints: only native answers", cel: true, a: good, b: notSupported},
		{name: "CEL constraints: native must answer", cel: true, a: invalidCEL, b: notSupported, wantProblem: "valid CEL constraints"},
		{name: "CEL constraints: a claim invalid for another reason", cel: true, a: invalid, b: notSupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := compareCase(tc.cel)
			problems, _ := Compare(c, engineNames, []Outcome{tc.a}, []Outcome{tc.b})
			var msgs []string
			for _, p := range problems {
				msgs = append(msgs, p.String())
			}
			all := strings.Join(msgs, "\n")
			switch {
			case tc.wantProblem == "" && len(problems) > 0:
				t.Errorf("unexpected problems:\n%s", all)
			case tc.wantProblem != "" && !strings.Contains(all, tc.wantProblem):
				t.Errorf("problems %q do not mention %q", all, tc.wantProblem)
			}
		})
	}
}

func compareCase(cel bool) *Case {
	claim := regClaim([]resourceapi.DeviceRequest{regRequest("r0", 1)})
	if cel {
		claim.Annotations = map[string]string{allocator.CELConstraintsAnnotation: `[{"expression": "true"}]`}
	}
	return &Case{
		Inputs: allocator.Inputs{
			Nodes:   []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}},
			Classes: []*resourceapi.DeviceClass{{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}}},
			Slices:  []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, rootDev("a", "p0"))},
		},
		Claims: []*resourceapi.ResourceClaim{claim},
		Node:   []string{""},
	}
}
