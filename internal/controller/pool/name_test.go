package pool

import (
	"math/rand/v2"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	poolpkg "github.com/drastack/drastack/internal/pool"
)

func TestName(t *testing.T) {
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 60)
	tests := []struct {
		name   string
		id     poolpkg.ID
		want   string // exact name, or "" to check only the prefix
		prefix string
		hashed bool
	}{
		{name: "node-local pool keeps the readable form of API.md",
			id: poolpkg.ID{Driver: "gpu.example.com", Pool: "node-1"}, want: "gpu.example.com-node-1"},
		{name: "multi-host pool",
			id: poolpkg.ID{Driver: "tpu.example.com", Pool: "tpu-v5-a"}, want: "tpu.example.com-tpu-v5-a"},
		{name: "slash-separated pool name is sanitised and hashed",
			id: poolpkg.ID{Driver: "gpu.example.com", Pool: "rack-1/node-2"}, prefix: "gpu.example.com-rack-1.node-2-", hashed: true},
		{name: "upper case is lowered and hashed",
			id: poolpkg.ID{Driver: "gpu.example.com", Pool: "Node-1"}, prefix: "gpu.example.com-node-1-", hashed: true},
		{name: "characters outside the alphabet become dashes",
			id: poolpkg.ID{Driver: "gpu.example.com", Pool: "node_1"}, prefix: "gpu.example.com-node-1-", hashed: true},
		{name: "a dot next to a dash is not a valid label boundary",
			id: poolpkg.ID{Driver: "gpu.example.com", Pool: ".node"}, prefix: "gpu.example.com.node-", hashed: true},
		{name: "too long is shortened to fit with the hash",
			id: poolpkg.ID{Driver: "gpu.example.com", Pool: long}, prefix: "gpu.example.com-aaaa", hashed: true},
		{name: "nothing usable left",
			id: poolpkg.ID{Driver: "_", Pool: "_"}, prefix: "pool-", hashed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Name(tt.id)
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Fatalf("Name(%v) = %q is not a valid object name: %v", tt.id, got, errs)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("Name(%v) = %q, want %q", tt.id, got, tt.want)
			}
			if tt.prefix != "" && !strings.HasPrefix(got, tt.prefix) {
				t.Errorf("Name(%v) = %q, want prefix %q", tt.id, got, tt.prefix)
			}
			if tt.hashed != (got == HashedName(tt.id)) {
				t.Errorf("Name(%v) = %q, hashed = %v, want hashed %v", tt.id, got, got == HashedName(tt.id), tt.hashed)
			}
			if Name(tt.id) != got {
				t.Errorf("Name is not deterministic")
			}
		})
	}
}

// Names that sanitise to the same string stay apart through the hash, and
// a hashed name never equals the plain name it replaces.
func TestNameDistinguishesWhatSanitisingMerges(t *testing.T) {
	ids := []poolpkg.ID{
		{Driver: "gpu.example.com", Pool: "node.1"},
		{Driver: "gpu.example.com", Pool: "node/1"},
		{Driver: "gpu.example.com", Pool: "Node.1"},
		{Driver: "gpu.example.com", Pool: "node_1"},
		{Driver: "gpu.example.com", Pool: "node-1"},
	}
	seen := map[string]poolpkg.ID{}
	for _, id := range ids {
		n := Name(id)
		if other, dup := seen[n]; dup {
			t.Errorf("%v and %v both map to %q", id, other, n)
		}
		seen[n] = id
	}
}

// The plain form is not injective, which is why the reconciler falls back
// to HashedName when a name is taken; the hashed forms differ.
func TestHashedNameSeparatesAmbiguousPlainNames(t *testing.T) {
	a := poolpkg.ID{Driver: "a-b", Pool: "c"}
	b := poolpkg.ID{Driver: "a", Pool: "b-c"}
	if Name(a) != Name(b) {
		t.Fatalf("expected the plain names to collide: %q, %q", Name(a), Name(b))
	}
	if HashedName(a) == HashedName(b) {
		t.Errorf("hashed names collide: %q", HashedName(a))
	}
}

// Arbitrary input (any bytes, any length) always yields a valid name.
func TestNameAlwaysValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("abcXYZ019-._/ :é\x00")
	for range 2000 {
		mk := func() string {
			n := rng.IntN(300)
			var b strings.Builder
			for range n {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			return b.String()
		}
		id := poolpkg.ID{Driver: mk(), Pool: mk()}
		for _, n := range []string{Name(id), HashedName(id)} {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				t.Fatalf("%q from %q: %v", n, id, errs)
			}
		}
	}
}

func TestIDOf(t *testing.T) {
	id, ok := idOf(map[string]string{AnnotationDriver: "gpu.example.com", AnnotationPool: "node-1"})
	if !ok || id != (poolpkg.ID{Driver: "gpu.example.com", Pool: "node-1"}) {
		t.Errorf("idOf = %v, %v", id, ok)
	}
	if _, ok := idOf(map[string]string{AnnotationDriver: "gpu.example.com"}); ok {
		t.Errorf("idOf without the pool annotation must fail")
	}
}
