package native

import (
	"context"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// ring is node n1 with n devices whose index attribute is their position.
func ring(n int) []*resourceapi.ResourceSlice {
	var devs []resourceapi.Device
	for i := range n {
		d := dev(fmt.Sprintf("d%d", i), "index", i, "row", i/4, "col", i%4)
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("16Gi")}}
		d.Attributes["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr.To("1.2.0")}
		devs = append(devs, d)
	}
	return []*resourceapi.ResourceSlice{nodeSlice("n1", devs...)}
}

func celAnnotation(expr string, requests ...string) string {
	return fmt.Sprintf(`[{"requests": [%s], "expression": %q}]`, quoteAll(requests), expr)
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ",")
}

const (
	contiguous = `size(devices) == 4 && devices.map(d, d.attributes["gpu.example.com"].index).max() - devices.map(d, d.attributes["gpu.example.com"].index).min() == 3`
	grid2x2    = `size(devices) == 4 && devices.all(d, devices.filter(o, d != o && (
		(d.attributes["gpu.example.com"].row == o.attributes["gpu.example.com"].row &&
		 (d.attributes["gpu.example.com"].col == o.attributes["gpu.example.com"].col + 1 || d.attributes["gpu.example.com"].col == o.attributes["gpu.example.com"].col - 1)) ||
		(d.attributes["gpu.example.com"].col == o.attributes["gpu.example.com"].col &&
		 (d.attributes["gpu.example.com"].row == o.attributes["gpu.example.com"].row + 1 || d.attributes["gpu.example.com"].row == o.attributes["gpu.example.com"].row - 1)))).size() >= 2)`
)

func used(devs ...string) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	for _, d := range devs {
		out = append(out, allocatedClaim("old-"+d, false, "n1", d))
	}
	return out
}

func TestCELConstraints(t *testing.T) {
	four := func(annotation string) *resourceapi.ResourceClaim {
		return withCEL(claim("c", req("mla", 4)), annotation)
	}
	var hundred []string
	for i := range 100 {
		hundred = append(hundred, fmt.Sprint(i))
	}
	list := "[" + strings.Join(hundred, ",") + "]"
	expensive := fmt.Sprintf("%s.all(a, %s.all(b, %s.all(c, size(devices) > 0)))", list, list, list)
	field := annotationField + "[0].expression"

	runCases(t, []testCase{
		{name: "4 contiguous: first set in index order", slices: ring(8), claim: four(celAnnotation(contiguous, "mla")),
			want: []string{"mla=n1/d0", "mla=n1/d1", "mla=n1/d2", "mla=n1/d3"}},
		{name: "4 contiguous around a device in use", slices: ring(8), allocated: used("d1"), claim: four(celAnnotation(contiguous)),
			want: []string{"mla=n1/d2", "mla=n1/d3", "mla=n1/d4", "mla=n1/d5"}},
		{name: "4 contiguous impossible", slices: ring(8), allocated: used("d1", "d4", "d7"), claim: four(celAnnotation(contiguous, "mla")),
			wantErr: allocator.ErrUnsatisfiable, wantMsg: "CEL constraints"},
		{name: "2x2 grid of 16", slices: ring(16), claim: four(celAnnotation(grid2x2, "mla")),
			want: []string{"mla=n1/d0", "mla=n1/d1", "mla=n1/d4", "mla=n1/d5"}},
		{name: "2x2 grid around devices in use", slices: ring(16), allocated: used("d1", "d4"), claim: four(celAnnotation(grid2x2, "mla")),
			want: []string{"mla=n1/d2", "mla=n1/d3", "mla=n1/d6", "mla=n1/d7"}},
		{name: "constraint sees only its requests",
			slices: ring(8), claim: withCEL(claim("c", req("one", 1, `device.attributes["gpu.example.com"].index == 7`), req("mla", 4)), celAnnotation(contiguous, "mla")),
			want: []string{"mla=n1/d0", "mla=n1/d1", "mla=n1/d2", "mla=n1/d3", "one=n1/d7"}},
		{name: "constraint across two requests",
			slices: ring(8), claim: withCEL(claim("c", req("a", 1, `device.attributes["gpu.example.com"].index >= 5`), req("b", 1)),
				celAnnotation(`devices[0].attributes["gpu.example.com"].index + devices[1].attributes["gpu.example.com"].index == 6`)),
			want: []string{"a=n1/d5", "b=n1/d1"}},
		{name: "Kubernetes libraries: quantity and semver", slices: ring(4),
			claim: withCEL(claim("c", req("r", 2)), celAnnotation(`devices.all(d, d.capacity["gpu.example.com"].memory.compareTo(quantity("10Gi")) > 0 && d.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.0.0")))`)),
			want:  []string{"r=n1/d0", "r=n1/d1"}},
		{name: "unknown domain is an empty map", slices: ring(4),
			claim: withCEL(claim("c", req("r", 1)), celAnnotation(`devices.all(d, size(d.attributes["other.example.com"]) == 0 && d.driver == "gpu.example.com")`)),
			want:  []string{"r=n1/d0"}},
		{name: "malformed annotation", slices: ring(8), claim: four(`{"expression": "true"}`), wantField: annotationField},
		{name: "unknown field in annotation", slices: ring(8), claim: four(`[{"expr": "true"}]`), wantField: annotationField},
		{name: "empty expression", slices: ring(8), claim: four(`[{"requests": ["mla"]}]`), wantField: field},
		{name: "unknown request name", slices: ring(8), claim: four(celAnnotation("true", "nope")), wantField: annotationField + "[0].requests[0]"},
		{name: "expression does not compile", slices: ring(8), claim: four(celAnnotation("size(devices) ==")), wantField: field, wantMsg: "compilation failed"},
		{name: "expression is not bool", slices: ring(8), claim: four(celAnnotation("size(devices)")), wantField: field, wantMsg: "bool"},
		{name: "runtime error names the expression", slices: ring(8), claim: four(celAnnotation(`devices.all(d, d.attributes["gpu.example.com"].missing == 1)`)),
			wantField: field, wantMsg: "no such key"},
		{name: "cost limit per evaluation", slices: ring(2), claim: withCEL(claim("c", req("r", 1)), celAnnotation(expensive)),
			wantField: field, wantMsg: "cost limit"},
		{name: "search bound", slices: ring(16), claim: four(celAnnotation(contiguous + " && false")), opts: allocator.Options{MaxSteps: 100},
			wantErr: allocator.ErrSearchBound, wantMsg: "100 steps"},
	})
}

// TestCELCombinationsNotPermutations pins the size of the search: choosing 4
// of 8 devices in increasing order places 5+15+35+70 = 125 devices
// (permutations would be 8*7*6*5 = 1680 sets).
func TestCELCombinationsNotPermutations(t *testing.T) {
	never := withCEL(claim("c", req("mla", 4)), celAnnotation("size(devices) == 5"))
	for _, tc := range []struct {
		steps   int64
		wantErr error
	}{
		{steps: 125, wantErr: allocator.ErrUnsatisfiable},
		{steps: 124, wantErr: allocator.ErrSearchBound},
	} {
		s := newTestSession(t, allocator.Inputs{Slices: ring(8)})
		_, err := s.Allocate(context.Background(), []*resourceapi.ResourceClaim{never}, allocator.Options{MaxSteps: tc.steps})
		checkError(t, err, tc.wantErr, "", "")
	}
}

func TestEngineDefaultMaxSteps(t *testing.T) {
	e := New(WithMaxSteps(10))
	s, err := e.NewSession(context.Background(), allocator.Inputs{Slices: ring(8), Classes: []*resourceapi.DeviceClass{class("gpu")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Allocate(context.Background(), []*resourceapi.ResourceClaim{withCEL(claim("c", req("mla", 4)), celAnnotation("false"))}, allocator.Options{})
	checkError(t, err, allocator.ErrSearchBound, "", "10 steps")
}

// TestCELCostTracking: expressions whose worst case fits the limit run
// without per-step cost tracking; the others are tracked.
func TestCELCostTracking(t *testing.T) {
	c := newConstraintCompiler()
	for expr, tracked := range map[string]bool{
		contiguous: false,
		grid2x2:    false,
		`devices.all(a, devices.all(b, devices.all(c, devices.all(d, a.attributes["x"].y == d.attributes["x"].y))))`: true,
	} {
		if _, err := c.compile(expr, resourceapi.AllocationResultsMaxSize); err != nil {
			t.Fatalf("compile %s: %v", expr, err)
		}
		if got := c.progs[expr].tracked; got != tracked {
			t.Errorf("tracked = %v for %s", got, expr)
		}
	}
	// Four nested loops over 32 devices may exceed the limit, over two
	// they cannot: a claim for two devices gets an untracked program.
	quad := `devices.all(a, devices.all(b, devices.all(c, devices.all(d, a.attributes["x"].y == d.attributes["x"].y))))`
	p := c.compiled(quad)
	if c.forSize(p, 2) == p.prog {
		t.Error("program for 2 devices is the tracked one")
	}
	if c.forSize(p, 32) != p.prog {
		t.Error("program for 32 devices is not the tracked one")
	}
}
