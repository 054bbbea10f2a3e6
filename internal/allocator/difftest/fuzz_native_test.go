package difftest

import (
	"testing"

	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/verify"
)

// FuzzNative feeds the native engine clusters and claims built from
// arbitrary bytes, valid and (see GenerateFrom) invalid: it must not panic,
// must classify every failure (unsatisfiable, invalid claim, not supported,
// search bound), and the verifier must accept every allocation.
//
//	go test ./internal/allocator/difftest -run '^$' -fuzz FuzzNative -fuzztime 30s
func FuzzNative(f *testing.F) {
	for _, seed := range []string{"", "a", "drastack", "\x00\x01\x02\x03\x04\x05\x06\x07\x08", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"} {
		f.Add([]byte(seed))
	}
	eng := native.New()
	f.Fuzz(func(t *testing.T, data []byte) {
		c := GenerateFrom(data)
		out, err := Run(t.Context(), eng, c)
		if err != nil {
			// NewSession refuses nothing the generator builds.
			t.Fatalf("native: %v", err)
		}
		checker := verify.New(c.Inputs)
		for i, o := range out {
			switch o.Verdict {
			case Failed:
				t.Errorf("claim %s: unclassified error: %v", c.Claims[i].Name, o.Err)
			case Allocated:
				node := c.Node[i]
				if node == "" {
					node = o.Result.Node
				}
				for _, v := range checker.Check(c.Claims[i], o.Result.Allocation, node) {
					t.Errorf("claim %s (node %q): verifier: %v", c.Claims[i].Name, c.Node[i], v)
				}
			}
		}
	})
}

// TestGenerateFromMangles checks that byte-driven generation is
// deterministic and does produce the invalid inputs FuzzNative is for.
func TestGenerateFromMangles(t *testing.T) {
	eng := native.New()
	verdicts := map[Verdict]int{}
	for i := 0; i < 300; i++ {
		data := []byte{byte(i), byte(i >> 8), 0x5a, byte(i * 7)}
		c := GenerateFrom(data)
		a, errA := Marshal(c)
		b, errB := Marshal(GenerateFrom(data))
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Fatalf("input %x: two generations differ (%v, %v)", data, errA, errB)
		}
		out, err := Run(t.Context(), eng, c)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out {
			verdicts[o.Verdict]++
			if o.Verdict == Failed {
				t.Logf("input %x: %v", data, o.Err)
			}
		}
	}
	for _, v := range []Verdict{Allocated, Unsatisfiable, Invalid} {
		if verdicts[v] == 0 {
			t.Errorf("no claim was %s: %v", v, verdicts)
		}
	}
	if verdicts[Failed] > 0 {
		t.Errorf("%d claims failed with unclassified errors", verdicts[Failed])
	}
	t.Logf("verdicts: %v", verdicts)
}
