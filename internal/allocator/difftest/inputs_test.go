package difftest

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
)

// meddler is the native engine with one extra step that modifies an input
// the way engines have slipped before: through a pointer into an object.
type meddler struct {
	allocator.Engine
	// onSession and onAllocate modify the inputs (nil: nothing).
	onSession  func(in allocator.Inputs)
	onAllocate func(claim *resourceapi.ResourceClaim)
}

func (m meddler) NewSession(ctx context.Context, in allocator.Inputs) (allocator.Session, error) {
	s, err := m.Engine.NewSession(ctx, in)
	if m.onSession != nil {
		m.onSession(in)
	}
	return meddlingSession{Session: s, onAllocate: m.onAllocate}, err
}

type meddlingSession struct {
	allocator.Session
	onAllocate func(claim *resourceapi.ResourceClaim)
}

func (m meddlingSession) Allocate(ctx context.Context, claims []*resourceapi.ResourceClaim, opts allocator.Options) ([]allocator.Result, error) {
	res, err := m.Session.Allocate(ctx, claims, opts)
	if m.onAllocate != nil {
		m.onAllocate(claims[0])
	}
	return res, err
}

// TestRunCatchesModifiedInputs: Run reports an engine that changes what it
// was given, down to the internal form of a quantity, and names the field.
func TestRunCatchesModifiedInputs(t *testing.T) {
	// A generated case with counters and capacity requests.
	var c *Case
	for seed := uint64(1); c == nil; seed++ {
		g := Generate(seed)
		for _, s := range g.Inputs.Slices {
			if len(s.Spec.SharedCounters) > 0 && len(g.Inputs.Allocated) > 0 {
				c = g
			}
		}
	}
	tests := []struct {
		name string
		eng  meddler
		want string
	}{
		{name: "a counter's string cached through a pointer",
			eng: meddler{onSession: func(in allocator.Inputs) {
				for _, s := range in.Slices {
					for i := range s.Spec.SharedCounters {
						for name, ctr := range s.Spec.SharedCounters[i].Counters {
							_ = ctr.Value.String()
							s.Spec.SharedCounters[i].Counters[name] = ctr
							return
						}
					}
				}
			}},
			want: `.Spec.SharedCounters[0].Counters[c].Value.s: "", now "`},
		{name: "a node label",
			eng:  meddler{onSession: func(in allocator.Inputs) { in.Nodes[0].Labels = map[string]string{"x": "y"} }},
			want: "NewSession modified its inputs: nodes[0].ObjectMeta.Labels"},
		{name: "an allocated claim's result",
			eng:  meddler{onSession: func(in allocator.Inputs) { in.Allocated[0].Status.Allocation.Devices.Results[0].Device = "other" }},
			want: `allocated claims[0].Status.Allocation.Devices.Results[0].Device: "gpu-0", now "other"`},
		{name: "the claim being allocated",
			eng:  meddler{onAllocate: func(claim *resourceapi.ResourceClaim) { claim.Spec.Devices.Requests[0].Name += "-x" }},
			want: `Allocate modified its inputs: claims[0].Spec.Devices.Requests[0].Name: "r0", now "r0-x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.eng.Engine = native.New()
			cc := *c
			cc.Inputs = copyInputs(c.Inputs, nil).in
			cc.Claims = copyInputs(allocator.Inputs{}, c.Claims).claims
			_, err := Run(t.Context(), tc.eng, &cc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := Run(t.Context(), native.New(), c); err != nil {
		t.Errorf("the native engine: %v", err)
	}
}
