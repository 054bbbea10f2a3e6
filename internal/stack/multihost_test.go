package stack

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestPoolName(t *testing.T) {
	tests := []struct {
		entry, domain string
		want          string // exact name, or prefix when hashed
		hashed        bool
	}{
		{"tpu", "a", "tpu-a", false},
		{"tpu-v5", "pod-17", "tpu-v5-pod-17", false},
		{"tpu", "Rack_1", "tpu-rack-1-", true},
		{"tpu", "rack.1", "tpu-rack-1-", true},
		{"tpu", "a--b", "tpu-a-b-", true},
		{"tpu", "A", "tpu-a-", true},
		{"tpu", strings.Repeat("x", 63), "tpu-" + strings.Repeat("x", 63), false},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.domain, func(t *testing.T) {
			got := PoolName(tt.entry, tt.domain)
			if tt.hashed {
				if !strings.HasPrefix(got, tt.want) || len(got) != len(tt.want)+8 {
					t.Errorf("PoolName(%q, %q) = %q, want %q followed by an 8-digit hash", tt.entry, tt.domain, got, tt.want)
				}
			} else if got != tt.want {
				t.Errorf("PoolName(%q, %q) = %q, want %q", tt.entry, tt.domain, got, tt.want)
			}
			if msgs := validation.IsDNS1123Subdomain(got); len(msgs) > 0 {
				t.Errorf("PoolName(%q, %q) = %q is not a valid pool name: %v", tt.entry, tt.domain, got, msgs)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("domains %q and %q share pool name %q", other, tt.domain, got)
			}
			seen[got] = tt.domain
		})
	}
}

// TestPoolNameKeepsDomainsApart: domains that differ only in what the
// sanitizing changes still get different pools.
func TestPoolNameKeepsDomainsApart(t *testing.T) {
	domains := []string{"rack-1", "rack_1", "Rack-1", "rack.1", "RACK_1", "rack--1"}
	names := map[string]string{}
	for _, d := range domains {
		n := PoolName("tpu", d)
		if other, dup := names[n]; dup {
			t.Errorf("domains %q and %q both map to %q", other, d, n)
		}
		names[n] = d
	}
}
