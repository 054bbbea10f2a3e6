package specfuzz

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

func load(t *testing.T) *Generator {
	t.Helper()
	crd, err := os.ReadFile("../../config/crd/bases/drastack.io_drastacks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	schema, err := LoadSchema(crd)
	if err != nil {
		t.Fatal(err)
	}
	sample, err := os.ReadFile("../../config/samples/drastack_v1alpha1_drastack.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base, err := LoadSample(sample, map[string]string{"tpu.sim.drastack.io": "tpu.fuzz.io", "demo.drastack.io/tpu": "fuzz.io/tpu"})
	if err != nil {
		t.Fatal(err)
	}
	if mh := base["multiHost"].([]any)[0].(map[string]any); mh["driver"] != "tpu.fuzz.io" || mh["domainLabel"] != "fuzz.io/tpu-domain" {
		t.Fatalf("the sample was not adapted: %v", mh)
	}
	return New(7, schema, base, Vocabulary{
		Drivers: []string{"gpu.example.com", "tpu.fuzz.io"}, Namespaces: []string{"kube-system", "drastack-system"},
		Labels: map[string]string{"fuzz.io/tpu": "true"}, Pools: []string{"tpu-a"}, Images: []string{"r.io/d:v1"},
	})
}

// The generator is deterministic for a seed, never edits its base, and
// reaches every top-level field of the schema and every kind of sample
// mistake within a few thousand edits.
func TestGenerator(t *testing.T) {
	g := load(t)
	base := clone(g.base)
	again := New(7, g.schema, g.base, g.vocab)
	fields, kinds := map[string]bool{}, map[string]bool{}
	changed := 0
	for i := 0; i < 3000; i++ {
		e, f := g.Next(), again.Next()
		if e.What != f.What || !reflect.DeepEqual(e.Spec, f.Spec) {
			t.Fatalf("edit %d differs between two generators of one seed: %q / %q", i, e.What, f.What)
		}
		if _, err := json.Marshal(e.Spec); err != nil {
			t.Fatalf("edit %d (%s) is not JSON: %v", i, e.What, err)
		}
		if !reflect.DeepEqual(e.Spec, base) {
			changed++
		}
		if rest, ok := strings.CutPrefix(e.What, "schema: spec."); ok {
			top, _, _ := strings.Cut(rest, ".")
			top, _, _ = strings.Cut(top, " ")
			top, _, _ = strings.Cut(top, "[")
			fields[top] = true
		}
		if rest, ok := strings.CutPrefix(e.What, "sample: "); ok {
			kinds[strings.Fields(rest)[0]+" "+strings.Fields(rest + " x")[1]] = true
		}
	}
	if !reflect.DeepEqual(g.base, base) {
		t.Fatal("the generator changed its base")
	}
	for name := range g.schema.Properties {
		if !fields[name] {
			t.Errorf("no schema edit reached spec.%s", name)
		}
	}
	if len(kinds) < 10 {
		t.Errorf("only %d kinds of sample edits: %v", len(kinds), kinds)
	}
	if changed < 2700 {
		t.Errorf("only %d of 3000 edits changed the spec", changed)
	}
}
