package operator

import "testing"

func TestSoftMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		container  int64
		gomemlimit string
		want       int64
		set        bool
	}{
		{"a tenth below the container's limit", 1 << 30, "", 966367641, true},
		{"no container limit", 0, "", 0, false},
		{"GOMEMLIMIT wins", 1 << 30, "700MiB", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, set := softMemoryLimit(tc.container, tc.gomemlimit)
			if got != tc.want || set != tc.set {
				t.Errorf("softMemoryLimit(%d, %q) = %d, %v; want %d, %v", tc.container, tc.gomemlimit, got, set, tc.want, tc.set)
			}
		})
	}
}
