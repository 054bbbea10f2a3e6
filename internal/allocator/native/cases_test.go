package native

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// testCase is one allocation of one claim against a snapshot, with the
// expected devices or the expected kind of failure.
type testCase struct {
	name      string
	slices    []*resourceapi.ResourceSlice
	classes   []*resourceapi.DeviceClass
	nodes     []*corev1.Node
	allocated []*resourceapi.ResourceClaim
	claim     *resourceapi.ResourceClaim
	opts      allocator.Options

	// want lists "request=pool/device" (sorted); nil with no error expected
	// means any successful allocation.
	want []string
	// wantErr is checked with errors.Is.
	wantErr error
	// wantField is the InvalidClaimError field expected.
	wantField string
	// wantMsg must appear in the error message.
	wantMsg string
	// check inspects a successful result further.
	check func(t *testing.T, r allocator.Result)
}

// errAny expects an error of any kind.
var errAny = errors.New("any error")

func runCases(t *testing.T, cases []testCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSession(t, allocator.Inputs{Slices: tc.slices, Classes: tc.classes, Nodes: tc.nodes, Allocated: tc.allocated})
			got, res, err := allocateOne(t, s, tc.claim, tc.opts)
			expectFailure := tc.wantErr != nil || tc.wantField != ""
			if err != nil {
				if !expectFailure {
					t.Fatalf("unexpected error: %v", err)
				}
				checkError(t, err, tc.wantErr, tc.wantField, tc.wantMsg)
				return
			}
			if expectFailure {
				t.Fatalf("want error (%v, field %q), got allocation %v", tc.wantErr, tc.wantField, got)
			}
			if tc.want != nil && !slices.Equal(got, tc.want) {
				t.Errorf("allocated %v, want %v", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}

func checkError(t *testing.T, err, wantErr error, wantField, wantMsg string) {
	t.Helper()
	if wantErr != nil && wantErr != errAny && !errors.Is(err, wantErr) {
		t.Errorf("error %q is not %v", err, wantErr)
	}
	if wantField != "" {
		var invalid *allocator.InvalidClaimError
		if !errors.As(err, &invalid) {
			t.Errorf("error %q is not an InvalidClaimError", err)
		} else if invalid.Field != wantField {
			t.Errorf("invalid field %q, want %q", invalid.Field, wantField)
		}
	}
	if wantMsg != "" && !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("error %q does not mention %q", err, wantMsg)
	}
}
