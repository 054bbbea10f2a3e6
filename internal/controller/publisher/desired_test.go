package publisher

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/pool"
)

// TestCompute is the publisher's specification: for a spec and the nodes,
// which pools are published with how many devices, and what status says.
func TestCompute(t *testing.T) {
	publishAvailable := func(e *v1alpha1.MultiHostSpec) { e.MissingHostPolicy = v1alpha1.MissingHostPublishAvailable }
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	twoDomains := append(domainNodes("a"), domainNodes("b")...)

	tests := []struct {
		name    string
		entries []v1alpha1.MultiHostSpec
		nodes   []corev1.Node
		// devices maps driver -> pool -> published devices; a driver with
		// no published pool maps to an empty map.
		devices map[string]map[string]int
		status  []v1alpha1.MultiHostStatus // Problems compared by reason only
	}{
		{
			name:    "two complete domains: two pools of 15 devices in a counter slice and a device slice each",
			entries: []v1alpha1.MultiHostSpec{entry()},
			nodes:   twoDomains,
			devices: map[string]map[string]int{testDriver: {"tpu-a": 15, "tpu-b": 15}},
			status:  []v1alpha1.MultiHostStatus{{Name: "tpu", Pools: 2, Hosts: 16, Devices: 30, Slices: 4}},
		},
		{
			name:    "a missing host withholds the pool by default; the other domain is unaffected",
			entries: []v1alpha1.MultiHostSpec{entry()},
			nodes:   without(twoDomains, "a-0-0"),
			devices: map[string]map[string]int{testDriver: {"tpu-b": 15}},
			status: []v1alpha1.MultiHostStatus{{Name: "tpu", Pools: 1, Hosts: 15, Devices: 15, Slices: 2,
				Problems: []string{"MissingHost", "PoolWithheld"}}},
		},
		{
			name:    "PublishAvailable publishes the devices whose hosts all exist: one host less drops 2x2, 2x4, 4x4 and 4x8 on it",
			entries: []v1alpha1.MultiHostSpec{entry(publishAvailable)},
			nodes:   without(twoDomains, "a-0-0"),
			devices: map[string]map[string]int{testDriver: {"tpu-a": 11, "tpu-b": 15}},
			status: []v1alpha1.MultiHostStatus{{Name: "tpu", Pools: 2, Hosts: 15, Devices: 26, Slices: 4,
				Problems: []string{"MissingHost"}}},
		},
		{
			name:    "a cordoned node is a missing host",
			entries: []v1alpha1.MultiHostSpec{entry(publishAvailable)},
			nodes: func() []corev1.Node {
				n := domainNodes("a")
				cordoned(&n[7]) // a-1-3: one 2x2, one 2x4, one 4x4 and the 4x8 need it
				return n
			}(),
			devices: map[string]map[string]int{testDriver: {"tpu-a": 11}},
			status: []v1alpha1.MultiHostStatus{{Name: "tpu", Pools: 1, Hosts: 7, Devices: 11, Slices: 2,
				Problems: []string{ReasonNodeUnschedulable, "MissingHost"}}},
		},
		{
			name:    "duplicate coordinates leave the position empty",
			entries: []v1alpha1.MultiHostSpec{entry()},
			nodes:   append(domainNodes("a"), node("intruder", "a", "0.0")),
			devices: map[string]map[string]int{testDriver: {}},
			status: []v1alpha1.MultiHostStatus{{Name: "tpu", Hosts: 7,
				Problems: []string{"DuplicateCoordinates", "MissingHost", "PoolWithheld"}}},
		},
		{
			name: "a shape that does not tile the grid rejects the entry: nothing is published, even with complete domains",
			entries: []v1alpha1.MultiHostSpec{entry(func(e *v1alpha1.MultiHostSpec) {
				e.Partitions = []string{"2x2", "3x4"}
			})},
			nodes:   twoDomains,
			devices: map[string]map[string]int{testDriver: {}},
			status:  []v1alpha1.MultiHostStatus{{Name: "tpu", Problems: []string{ReasonInvalidTopology}}},
		},
		{
			name: "a rejected entry is reported without any node",
			entries: []v1alpha1.MultiHostSpec{entry(func(e *v1alpha1.MultiHostSpec) {
				e.Partitions = []string{"3x4"}
			})},
			devices: map[string]map[string]int{testDriver: {}},
			status:  []v1alpha1.MultiHostStatus{{Name: "tpu", Problems: []string{ReasonInvalidTopology, ReasonNoNodes}}},
		},
		{
			name: "an invalid entry does not stop a valid one of the same driver",
			entries: []v1alpha1.MultiHostSpec{
				entry(func(e *v1alpha1.MultiHostSpec) { e.Name = "bad"; e.Partitions = []string{"3x4"} }),
				entry(),
			},
			nodes:   domainNodes("a"),
			devices: map[string]map[string]int{testDriver: {"tpu-a": 15}},
			status: []v1alpha1.MultiHostStatus{
				{Name: "bad", Problems: []string{ReasonInvalidTopology}},
				{Name: "tpu", Pools: 1, Hosts: 8, Devices: 15, Slices: 2},
			},
		},
		{
			name: "entries of two drivers publish under their own driver",
			entries: []v1alpha1.MultiHostSpec{
				entry(),
				entry(func(e *v1alpha1.MultiHostSpec) { e.Name = "nvl"; e.Driver = "nvlink.example.com" }),
			},
			nodes:   domainNodes("a"),
			devices: map[string]map[string]int{testDriver: {"tpu-a": 15}, "nvlink.example.com": {"nvl-a": 15}},
			status: []v1alpha1.MultiHostStatus{
				{Name: "tpu", Pools: 1, Hosts: 8, Devices: 15, Slices: 2},
				{Name: "nvl", Pools: 1, Hosts: 8, Devices: 15, Slices: 2},
			},
		},
		{
			// Issue 22: tpu and tpu2 over the same hosts would publish
			// every chip twice, in pools tpu-a and tpu2-a.
			name: "two entries of one driver over the same hosts: the later publishes nothing",
			entries: []v1alpha1.MultiHostSpec{
				entry(),
				entry(func(e *v1alpha1.MultiHostSpec) { e.Name = "tpu2"; e.NodeSelector = nil }),
			},
			nodes:   domainNodes("a"),
			devices: map[string]map[string]int{testDriver: {"tpu-a": 15}},
			status: []v1alpha1.MultiHostStatus{
				{Name: "tpu", Pools: 1, Hosts: 8, Devices: 15, Slices: 2},
				{Name: "tpu2", Problems: []string{ReasonHostConflict}},
			},
		},
		{
			name: "two entries of one driver whose pool names collide publish neither pool",
			entries: []v1alpha1.MultiHostSpec{
				entry(func(e *v1alpha1.MultiHostSpec) { e.Name = "x" }),
				entry(func(e *v1alpha1.MultiHostSpec) {
					e.Name, e.DomainLabel = "x-a", "other/domain"
					e.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"other": "true"}}
				}),
			},
			nodes: func() []corev1.Node {
				n := domainNodes("a-b") // entry x: pool x-a-b
				for _, m := range domainNodes("b") {
					m.Labels["other/domain"] = "b" // entry x-a: pool x-a-b
					m.Labels["other"] = "true"
					delete(m.Labels, domainLabel)
					delete(m.Labels, poolSelector)
					n = append(n, m)
				}
				return n
			}(),
			devices: map[string]map[string]int{testDriver: {}},
			status: []v1alpha1.MultiHostStatus{
				{Name: "x", Hosts: 0, Problems: []string{ReasonPoolNameConflict}},
				{Name: "x-a", Hosts: 0, Problems: []string{ReasonPoolNameConflict}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Compute(tt.entries, tt.nodes)
			got := map[string]map[string]int{}
			for driver, pools := range d.Drivers {
				got[driver] = map[string]int{}
				for name, p := range pools {
					got[driver][name] = deviceCount(p)
				}
			}
			if !maps.EqualFunc(got, tt.devices, maps.Equal) {
				t.Errorf("published devices = %v, want %v", got, tt.devices)
			}
			if len(d.Status) != len(tt.status) {
				t.Fatalf("status has %d entries, want %d: %+v", len(d.Status), len(tt.status), d.Status)
			}
			for i, want := range tt.status {
				st := d.Status[i]
				if gotReasons := reasons(st.Problems); !slices.Equal(gotReasons, want.Problems) {
					t.Errorf("status[%d] problem reasons = %v, want %v\n%s", i, gotReasons, want.Problems, strings.Join(st.Problems, "\n"))
				}
				if st.Name != want.Name || st.Pools != want.Pools || st.Hosts != want.Hosts || st.Devices != want.Devices || st.Slices != want.Slices {
					t.Errorf("status[%d] = %+v, want %+v", i, st, want)
				}
			}
		})
	}
}

// TestComputePublishesValidPools runs every published pool through the
// pool validator that judges what the cluster holds: no problem of any
// severity, complete, and every device reachable from its hosts.
func TestComputePublishesValidPools(t *testing.T) {
	publishAvailable := func(e *v1alpha1.MultiHostSpec) { e.MissingHostPolicy = v1alpha1.MissingHostPublishAvailable }
	cases := map[string]struct {
		entry v1alpha1.MultiHostSpec
		nodes []corev1.Node
	}{
		"complete":          {entry(), append(domainNodes("a"), domainNodes("b")...)},
		"partial":           {entry(publishAvailable), without(domainNodes("a"), "a-0-1", "a-1-2")},
		"one host left":     {entry(publishAvailable), domainNodes("a")[:1]},
		"everything broken": {entry(publishAvailable), []corev1.Node{node("lone", "a", "9.9")}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			d := Compute([]v1alpha1.MultiHostSpec{c.entry}, c.nodes)
			pools := d.Drivers[testDriver]
			if len(pools) == 0 {
				t.Fatalf("nothing published")
			}
			for poolName, p := range pools {
				for _, g := range pool.Group(publishedSlices(testDriver, poolName, p)) {
					if !g.Complete() {
						t.Errorf("pool %s is incomplete", poolName)
					}
					for _, pr := range g.Problems {
						t.Errorf("pool %s: %s %s: %s", poolName, pr.Severity, pr.Reason, pr.Message)
					}
				}
			}
		})
	}
}

// TestComputeIsDeterministic: the same input gives the same pools in the
// same order, so the library sees no change and writes nothing.
func TestComputeIsDeterministic(t *testing.T) {
	nodes := append(domainNodes("a"), domainNodes("b")...)
	reversed := slices.Clone(nodes)
	slices.Reverse(reversed)
	a := Compute([]v1alpha1.MultiHostSpec{entry()}, nodes)
	b := Compute([]v1alpha1.MultiHostSpec{entry()}, reversed)
	for name, p := range a.Drivers[testDriver] {
		q, ok := b.Drivers[testDriver][name]
		if !ok {
			t.Fatalf("pool %s missing when the nodes come in another order", name)
		}
		for i := range p.Slices {
			if len(p.Slices[i].Devices) != len(q.Slices[i].Devices) {
				t.Fatalf("pool %s slice %d differs", name, i)
			}
			for j := range p.Slices[i].Devices {
				if p.Slices[i].Devices[j].Name != q.Slices[i].Devices[j].Name {
					t.Errorf("pool %s slice %d device %d: %s vs %s", name, i, j, p.Slices[i].Devices[j].Name, q.Slices[i].Devices[j].Name)
				}
			}
		}
	}
	if !slices.EqualFunc(a.Status, b.Status, func(x, y v1alpha1.MultiHostStatus) bool {
		return x.Name == y.Name && x.Pools == y.Pools && x.Devices == y.Devices && slices.Equal(x.Problems, y.Problems)
	}) {
		t.Errorf("status depends on node order: %+v vs %+v", a.Status, b.Status)
	}
}
