package publisher

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/central"
)

func TestTaintCentral(t *testing.T) {
	nodes := append(domainNodes("a"), domainNodes("b")...)
	tests := []struct {
		name    string
		entries []v1alpha1.CentralDevices
		want    map[string]bool // pool -> tainted
	}{
		{"no central entry: nothing tainted", nil, map[string]bool{"tpu-a": false, "tpu-b": false}},
		{"the whole driver", []v1alpha1.CentralDevices{{Driver: entry().Driver}}, map[string]bool{"tpu-a": true, "tpu-b": true}},
		{"one pool by name", []v1alpha1.CentralDevices{{Driver: entry().Driver, Pools: []string{"tpu-b"}}}, map[string]bool{"tpu-a": false, "tpu-b": true}},
		{"another driver", []v1alpha1.CentralDevices{{Driver: "gpu.example.com"}}, map[string]bool{"tpu-a": false, "tpu-b": false}},
		{"a node selector selects node-local pools only", []v1alpha1.CentralDevices{{Driver: entry().Driver, NodeSelector: &metav1.LabelSelector{}}},
			map[string]bool{"tpu-a": false, "tpu-b": false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Compute([]v1alpha1.MultiHostSpec{entry()}, nodes)
			TaintCentral(&d, tt.entries)
			pools := d.Drivers[entry().Driver]
			for name, tainted := range tt.want {
				p, ok := pools[name]
				if !ok {
					t.Fatalf("pool %s not published", name)
				}
				devices := 0
				for _, s := range p.Slices {
					for _, dev := range s.Devices {
						devices++
						has := len(dev.Taints) == 1 && dev.Taints[0] == central.Taint()
						if has != tainted {
							t.Errorf("pool %s device %s: taints %v, want tainted=%v", name, dev.Name, dev.Taints, tainted)
						}
					}
				}
				if devices == 0 {
					t.Errorf("pool %s has no devices", name)
				}
			}
		})
	}
}
