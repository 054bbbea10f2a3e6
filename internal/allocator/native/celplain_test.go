package native

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/cel-go/common/types/ref"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// TestPlainEnvironmentAgrees: the program from the plain environment (no
// cost tracking) and the one from the Kubernetes environment give the same
// result, or both fail, for expressions that use every library a
// constraint may use, on random device sets.
func TestPlainEnvironmentAgrees(t *testing.T) {
	exprs := []string{
		contiguous,
		grid2x2,
		`devices.all(d, d.attributes["gpu.example.com"].model.startsWith("a"))`,
		`devices.exists(d, d.attributes["gpu.example.com"].model.matches("^b+$"))`,
		`devices.map(d, d.capacity["gpu.example.com"].memory).all(q, q.isGreaterThan(quantity("1Gi")))`,
		`devices.all(d, semver("1.0.0").isLessThan(d.attributes["gpu.example.com"].driverVersion))`,
		`devices.all(d, d.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.1.0")))`,
		`sets.intersects(devices.map(d, d.attributes["gpu.example.com"].index), [1, 2])`,
		`devices.map(d, d.attributes["gpu.example.com"].roots).flatten().distinct().size() <= 2`,
		`devices.all(d, d.attributes["gpu.example.com"].roots.includes("x"))`,
		`cel.bind(n, devices.map(d, d.attributes["gpu.example.com"].index), n.sum() % 2 == 0)`,
		`devices.all(i, d, i == 0 || d.attributes["gpu.example.com"].index > devices[i-1].attributes["gpu.example.com"].index)`,
		`devices.exists(d, d.attributes["gpu.example.com"].?missing.orValue(1) == 1)`,
		`devices.all(d, d.attributes["gpu.example.com"].index < 2.5)`,
		`devices.map(d, d.attributes["gpu.example.com"].model).join(",").size() > 3`,
		`devices.all(d, d.attributes["other.example.com"].size() == 0)`,
		`devices.all(d, d.attributes["gpu.example.com"].nosuch == 1)`,
		`devices.map(d, d.attributes["gpu.example.com"].index).sort() == devices.map(d, d.attributes["gpu.example.com"].index)`,
		`devices[0].capacity["gpu.example.com"].memory.compareTo(quantity("2Gi")) >= 0 && devices.size() > 1`,
		`isQuantity("1Gi") && format.named("dns1123Label").value().validate("abc").hasValue() == false`,
	}
	r := rand.New(rand.NewPCG(3, 4))
	c := newConstraintCompiler()
	var pool []ref.Val
	for i := range 12 {
		d := dev(fmt.Sprintf("d%d", i), "index", r.IntN(6), "model", []string{"a", "ab", "bb"}[r.IntN(3)], "roots", [][]string{{"x"}, {"x", "y"}, {"y"}}[r.IntN(3)])
		d.Attributes["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr.To([]string{"1.0.0", "1.2.0", "2.0.0"}[r.IntN(3)])}
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: *resource.NewQuantity(int64(1+r.IntN(3))<<30, resource.BinarySI)}}
		v, err := c.deviceValue(drv, &d)
		if err != nil {
			t.Fatal(err)
		}
		pool = append(pool, v)
	}
	for _, expr := range exprs {
		p := c.compiled(expr)
		if p.err != nil {
			t.Errorf("%s: %v", expr, p.err)
			continue
		}
		if p.fast == nil {
			t.Errorf("%s: no program from the plain environment", expr)
			continue
		}
		for n := 1; n <= 4; n++ {
			for range 20 {
				var devs []ref.Val
				for _, k := range r.Perm(len(pool))[:n] {
					devs = append(devs, pool[k])
				}
				want, wantErr := c.eval(context.Background(), p.prog, devs)
				got, gotErr := c.eval(context.Background(), p.fast, devs)
				if got != want || (gotErr == nil) != (wantErr == nil) {
					t.Fatalf("%s on %d devices: plain %v (%v), Kubernetes %v (%v)", expr, n, got, gotErr, want, wantErr)
				}
			}
		}
	}
}
