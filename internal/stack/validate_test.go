package stack

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

func validMultiHost() v1alpha1.MultiHostSpec {
	return v1alpha1.MultiHostSpec{
		Name: "tpu", Driver: "tpu.example.com", DomainLabel: "d", CoordinatesLabel: "c",
		HostGrid: []int32{4, 4}, ChipsPerHost: []int32{2, 2}, Partitions: []string{"2x2", "4x4", "8x8"},
	}
}

func TestValidate(t *testing.T) {
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	tests := []struct {
		name string
		spec v1alpha1.DRAStackSpec
		// wantFields are the field paths that must be reported, in order.
		wantFields []string
	}{
		{name: "empty spec is valid"},
		{
			name: "full valid spec",
			spec: v1alpha1.DRAStackSpec{
				Drivers:   []v1alpha1.DriverSpec{{Name: "gpu.example.com", Profile: v1alpha1.DriverProfileExample}},
				MultiHost: []v1alpha1.MultiHostSpec{validMultiHost()},
				Claims:    v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, ImmediateClasses: []string{"a", "b"}},
				Pools:     v1alpha1.PoolsSpec{ResyncPeriod: dur(5 * time.Minute), IncompleteGracePeriod: dur(2 * time.Minute), MaxProblems: 20},
			},
		},
		{
			name:       "resync too short",
			spec:       v1alpha1.DRAStackSpec{Pools: v1alpha1.PoolsSpec{ResyncPeriod: dur(time.Second)}},
			wantFields: []string{"spec.pools.resyncPeriod"},
		},
		{
			name:       "negative grace period",
			spec:       v1alpha1.DRAStackSpec{Pools: v1alpha1.PoolsSpec{IncompleteGracePeriod: dur(-time.Second)}},
			wantFields: []string{"spec.pools.incompleteGracePeriod"},
		},
		{
			name:       "unknown engine",
			spec:       v1alpha1.DRAStackSpec{Claims: v1alpha1.ClaimsSpec{Engine: "magic"}},
			wantFields: []string{"spec.claims.engine"},
		},
		{
			name:       "duplicate immediate class",
			spec:       v1alpha1.DRAStackSpec{Claims: v1alpha1.ClaimsSpec{ImmediateClasses: []string{"a", "a"}}},
			wantFields: []string{"spec.claims.immediateClasses[1]"},
		},
		{
			name:       "custom profile without image",
			spec:       v1alpha1.DRAStackSpec{Drivers: []v1alpha1.DriverSpec{{Name: "x.io", Profile: v1alpha1.DriverProfileCustom}}},
			wantFields: []string{"spec.drivers[0].image"},
		},
		{
			name: "an image reference that only looks valid",
			spec: v1alpha1.DRAStackSpec{Drivers: []v1alpha1.DriverSpec{
				{Name: "a.io", Image: "registry.k8s.io/a/b:v1"},
				{Name: "b.io", Image: "Registry.K8s.io/UPPER/Case::v1@sha"},
			}},
			wantFields: []string{"spec.drivers[1].image"},
		},
		{
			name: "duplicate driver and shared device class",
			spec: v1alpha1.DRAStackSpec{Drivers: []v1alpha1.DriverSpec{
				{Name: "a.io", DeviceClasses: []v1alpha1.DeviceClassSpec{{Name: "gpu"}}},
				{Name: "b.io", DeviceClasses: []v1alpha1.DeviceClassSpec{{Name: "gpu"}}},
				{Name: "a.io"},
			}},
			wantFields: []string{"spec.drivers[2]", "spec.drivers[1].deviceClasses[0].name"},
		},
		{
			name: "chipsPerHost dimensions differ",
			spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{func() v1alpha1.MultiHostSpec {
				m := validMultiHost()
				m.ChipsPerHost = []int32{2}
				return m
			}()}},
			wantFields: []string{"spec.multiHost[0].chipsPerHost"},
		},
		{
			name: "bad and oversized shapes",
			spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{func() v1alpha1.MultiHostSpec {
				m := validMultiHost()
				m.Partitions = []string{"2x2", "2xx", "2x2x2", "16x2"}
				return m
			}()}},
			wantFields: []string{"spec.multiHost[0].partitions[1]", "spec.multiHost[0].partitions[2]", "spec.multiHost[0].partitions[3]"},
		},
		{
			name: "grid too large",
			spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{func() v1alpha1.MultiHostSpec {
				m := validMultiHost()
				m.HostGrid, m.ChipsPerHost, m.Partitions = []int32{64, 64}, []int32{1, 1}, []string{"1x1"}
				return m
			}()}},
			wantFields: []string{"spec.multiHost[0].hostGrid"},
		},
		{
			name:       "duplicate multiHost names",
			spec:       v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{validMultiHost(), validMultiHost()}},
			wantFields: []string{"spec.multiHost[1]"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := Validate(&tc.spec)
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
			}
			if strings.Join(got, ",") != strings.Join(tc.wantFields, ",") {
				t.Fatalf("fields = %v, want %v (errors: %v)", got, tc.wantFields, errs)
			}
			for _, e := range errs {
				if e.Error() == "" || !strings.Contains(e.Error(), e.Field) {
					t.Errorf("error %q does not name its field %s", e.Error(), e.Field)
				}
			}
		})
	}
}

func TestParseShape(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "2", want: []int{2}},
		{in: "2x4", want: []int{2, 4}},
		{in: "1x2x3", want: []int{1, 2, 3}},
		{in: "", wantErr: true},
		{in: "0x2", wantErr: true},
		{in: "2x", wantErr: true},
		{in: "+2x2", wantErr: true},
		{in: "1x1x1x1", wantErr: true},
		{in: "ax2", wantErr: true},
	}
	for _, tc := range tests {
		got, err := ParseShape(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseShape(%q) err = %v, wantErr %v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !slices.Equal(got, tc.want) {
			t.Errorf("ParseShape(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func FuzzParseShape(f *testing.F) {
	for _, s := range []string{"2x2", "1", "4x4x4", "", "x", "9999x1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sizes, err := ParseShape(s)
		if err != nil {
			return
		}
		if len(sizes) < 1 || len(sizes) > 3 {
			t.Fatalf("ParseShape(%q) accepted %d dimensions", s, len(sizes))
		}
		for _, n := range sizes {
			if n < 1 {
				t.Fatalf("ParseShape(%q) accepted size %d", s, n)
			}
		}
	})
}

func TestDriverSpecProblems(t *testing.T) {
	const bad = `spec.drivers[0].patches[1]: Invalid value: kustomize: no resource matches the patch`
	stack := func(gen, observed int64, reason, msg string) *v1alpha1.DRAStack {
		st := &v1alpha1.DRAStack{}
		st.Generation = gen
		st.Spec.Drivers = []v1alpha1.DriverSpec{{Name: "a.io"}}
		st.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionDriversReady, Status: metav1.ConditionFalse, ObservedGeneration: observed}}
		st.Status.Drivers = []v1alpha1.DriverStatus{{Name: "a.io", Reason: reason, Message: msg}, {Name: "gone.io", Reason: ReasonInvalidSpec, Message: "spec.drivers[1]: x"}}
		return st
	}
	tests := []struct {
		name  string
		st    *v1alpha1.DRAStack
		known []string
		want  []string
	}{
		{"a render error of this generation", stack(2, 2, ReasonInvalidSpec, bad), nil, []string{bad}},
		{"written for an older generation", stack(3, 2, ReasonInvalidSpec, bad), nil, nil},
		{"another reason", stack(2, 2, "ApplyFailed", bad), nil, nil},
		{"already reported by Validate", stack(2, 2, ReasonInvalidSpec, bad), []string{bad}, nil},
		{"a message without a path", stack(2, 2, ReasonInvalidSpec, "the driver cannot be rendered"), nil, nil},
	}
	for _, tc := range tests {
		if got := DriverSpecProblems(tc.st, tc.known); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
