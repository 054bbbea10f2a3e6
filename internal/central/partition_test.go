package central

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drastack/drastack/api/v1alpha1"
)

// cluster is the world most partition tests share: a GPU driver with a
// node-local pool per node, a TPU driver whose multi-host pools the
// operator publishes, and a NIC driver nobody declares central.
var (
	clusterSlices = []*resourcev1.ResourceSlice{
		slice("gpu-node-1", "gpu.example.com", "node-1", "node-1", "gpu-0", "gpu-1"),
		slice("gpu-node-2", "gpu.example.com", "node-2", "node-2", "gpu-0"),
		slice("gpu-node-3", "gpu.example.com", "node-3", "node-3", "gpu-0"),
		slice("tpu-a", "tpu.example.com", "tpu-a", "", "2x2-0"),
		slice("tpu-node-1", "tpu.example.com", "node-1", "node-1", "chip-0"),
		slice("nic-node-1", "nic.example.com", "node-1", "node-1", "eth0"),
	}
	clusterNodes = []*corev1.Node{
		node("node-1", map[string]string{"topology-jobs": "true"}),
		node("node-2", map[string]string{"topology-jobs": "true"}),
		node("node-3", nil),
	}
)

func matchLabels(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func TestPartition(t *testing.T) {
	type device struct{ driver, pool, device string }
	type want struct {
		entries []int
		classes []string
	}
	tests := []struct {
		name           string
		entries        []v1alpha1.CentralDevices
		published      []string
		devices        map[device]want
		centralClasses []string
		pools          []PoolID
	}{
		{
			name:    "no entries: nothing is central",
			devices: map[device]want{{"gpu.example.com", "node-1", "gpu-0"}: {}},
			pools:   nil,
		},
		{
			name:    "a driver without pools or nodeSelector: every device of it, present or future",
			entries: []v1alpha1.CentralDevices{{Driver: "gpu.example.com", Classes: []string{"gpu-topology"}}},
			devices: map[device]want{
				{"gpu.example.com", "node-1", "gpu-0"}:   {[]int{0}, []string{"gpu-topology"}},
				{"gpu.example.com", "node-9", "gpu-0"}:   {[]int{0}, []string{"gpu-topology"}},
				{"nic.example.com", "node-1", "eth0"}:    {},
				{"tpu.example.com", "node-1", "chip-0"}:  {},
				{"gpu.example.com.other", "node-1", "x"}: {},
			},
			centralClasses: []string{"gpu-topology"},
			pools:          []PoolID{{"gpu.example.com", "node-1"}, {"gpu.example.com", "node-2"}, {"gpu.example.com", "node-3"}},
		},
		{
			name:    "listed pools, present or not; other pools of the driver and same-named pools of other drivers are not",
			entries: []v1alpha1.CentralDevices{{Driver: "gpu.example.com", Pools: []string{"node-2", "node-7"}}},
			devices: map[device]want{
				{"gpu.example.com", "node-2", "gpu-0"}: {[]int{0}, nil},
				{"gpu.example.com", "node-7", "gpu-0"}: {[]int{0}, nil},
				{"gpu.example.com", "node-1", "gpu-0"}: {},
				{"nic.example.com", "node-2", "eth0"}:  {},
			},
			pools: []PoolID{{"gpu.example.com", "node-2"}},
		},
		{
			name:    "nodeSelector: the node-local pools of matching nodes only",
			entries: []v1alpha1.CentralDevices{{Driver: "gpu.example.com", NodeSelector: matchLabels("topology-jobs", "true"), Classes: []string{"gpu-topology"}}},
			devices: map[device]want{
				{"gpu.example.com", "node-1", "gpu-1"}: {[]int{0}, []string{"gpu-topology"}},
				{"gpu.example.com", "node-2", "gpu-0"}: {[]int{0}, []string{"gpu-topology"}},
				{"gpu.example.com", "node-3", "gpu-0"}: {},
				// The TPU driver's pool on node-1 is not the GPU driver's.
				{"tpu.example.com", "node-1", "chip-0"}: {},
			},
			centralClasses: []string{"gpu-topology"},
			pools:          []PoolID{{"gpu.example.com", "node-1"}, {"gpu.example.com", "node-2"}},
		},
		{
			name:    "nodeSelector never selects node-less pools",
			entries: []v1alpha1.CentralDevices{{Driver: "tpu.example.com", NodeSelector: &metav1.LabelSelector{}}},
			devices: map[device]want{
				{"tpu.example.com", "tpu-a", "2x2-0"}:   {},
				{"tpu.example.com", "node-1", "chip-0"}: {[]int{0}, nil},
			},
			pools: []PoolID{{"tpu.example.com", "node-1"}},
		},
		{
			name: "a device selected by several entries serves the classes of each",
			entries: []v1alpha1.CentralDevices{
				{Driver: "gpu.example.com", Pools: []string{"node-1"}, Classes: []string{"b-class", "a-class"}},
				{Driver: "nic.example.com", Classes: []string{"nic"}},
				{Driver: "gpu.example.com", Classes: []string{"c-class", "a-class"}},
			},
			devices: map[device]want{
				{"gpu.example.com", "node-1", "gpu-0"}: {[]int{0, 2}, []string{"a-class", "b-class", "c-class"}},
				{"gpu.example.com", "node-2", "gpu-0"}: {[]int{2}, []string{"a-class", "c-class"}},
				{"nic.example.com", "node-1", "eth0"}:  {[]int{1}, []string{"nic"}},
			},
			centralClasses: []string{"a-class", "b-class", "c-class", "nic"},
			pools: []PoolID{
				{"gpu.example.com", "node-1"}, {"gpu.example.com", "node-2"}, {"gpu.example.com", "node-3"},
				{"nic.example.com", "node-1"},
			},
		},
		{
			name:      "published drivers are central like any other",
			entries:   []v1alpha1.CentralDevices{{Driver: "tpu.example.com", Classes: []string{"tpu"}}},
			published: []string{"tpu.example.com"},
			devices: map[device]want{
				{"tpu.example.com", "tpu-a", "2x2-0"}:   {[]int{0}, []string{"tpu"}},
				{"tpu.example.com", "node-1", "chip-0"}: {[]int{0}, []string{"tpu"}},
			},
			centralClasses: []string{"tpu"},
			pools:          []PoolID{{"tpu.example.com", "node-1"}, {"tpu.example.com", "tpu-a"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPartition(Inputs{Entries: tc.entries, Slices: clusterSlices, Nodes: clusterNodes, Published: tc.published})
			if err != nil {
				t.Fatal(err)
			}
			for d, w := range tc.devices {
				if got := p.Entries(d.driver, d.pool, d.device); !reflect.DeepEqual(got, w.entries) && (len(got) > 0 || len(w.entries) > 0) {
					t.Errorf("Entries%v = %v, want %v", d, got, w.entries)
				}
				if got := p.Central(d.driver, d.pool, d.device); got != (len(w.entries) > 0) {
					t.Errorf("Central%v = %v, want %v", d, got, len(w.entries) > 0)
				}
				if got := p.Classes(d.driver, d.pool, d.device); !reflect.DeepEqual(got, w.classes) && (len(got) > 0 || len(w.classes) > 0) {
					t.Errorf("Classes%v = %v, want %v", d, got, w.classes)
				}
			}
			if got := p.CentralClasses(); !reflect.DeepEqual(got, tc.centralClasses) && (len(got) > 0 || len(tc.centralClasses) > 0) {
				t.Errorf("CentralClasses = %v, want %v", got, tc.centralClasses)
			}
			for _, c := range tc.centralClasses {
				if !p.IsCentralClass(c) {
					t.Errorf("IsCentralClass(%q) = false", c)
				}
			}
			if p.IsCentralClass("not-listed") {
				t.Error(`IsCentralClass("not-listed") = true`)
			}
			if got := p.Pools(); !reflect.DeepEqual(got, tc.pools) {
				t.Errorf("Pools = %v, want %v", got, tc.pools)
			}
		})
	}
}

func TestPartitionRefusesAnInvalidNodeSelector(t *testing.T) {
	entries := []v1alpha1.CentralDevices{
		{Driver: "gpu.example.com"},
		{Driver: "gpu.example.com", NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "zone", Operator: metav1.LabelSelectorOpIn}, // In needs values
		}}},
	}
	p, err := NewPartition(Inputs{Entries: entries, Slices: clusterSlices, Nodes: clusterNodes})
	if err == nil || p != nil {
		t.Fatalf("NewPartition = %v, %v; want an error", p, err)
	}
	if !strings.Contains(err.Error(), "spec.claims.central[1].nodeSelector") {
		t.Errorf("error %q does not name the field", err)
	}
}

func TestPartitionDoesNotKeepTheCallersEntries(t *testing.T) {
	entries := []v1alpha1.CentralDevices{{Driver: "gpu.example.com", Classes: []string{"gpu"}}}
	p, err := NewPartition(Inputs{Entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	entries[0].Classes[0] = "changed"
	if got := p.Classes("gpu.example.com", "node-1", "gpu-0"); !reflect.DeepEqual(got, []string{"gpu"}) {
		t.Errorf("Classes after the caller changed its entries = %v", got)
	}
}
