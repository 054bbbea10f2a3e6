package stack

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// tpuNodes are the hosts of a 2x2 grid in each domain, labelled for
// validMultiHost (domain label d, coordinates c) and selected by
// tpu=true.
func tpuNodes(domains ...string) []corev1.Node {
	var out []corev1.Node
	for _, d := range domains {
		for i := 0; i < 4; i++ {
			out = append(out, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tpu-%s-%d", d, i),
				Labels: map[string]string{"tpu": "true", "d": d, "c": fmt.Sprintf("%d.%d", i/2, i%2)}}})
		}
	}
	return out
}

func selectLabel(k, v string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
}

func TestCheck(t *testing.T) {
	mh := func(name, driver string, mutate ...func(*v1alpha1.MultiHostSpec)) v1alpha1.MultiHostSpec {
		m := validMultiHost()
		m.Name, m.Driver = name, driver
		m.NodeSelector = selectLabel("tpu", "true")
		for _, f := range mutate {
			f(&m)
		}
		return m
	}
	created := &NamespaceFacts{Exists: true, Created: true, Enforce: "privileged", Managers: []string{"drastack-driver"}}
	tests := []struct {
		name  string
		spec  v1alpha1.DRAStackSpec
		facts Facts
		// wantErrs are substrings each error must contain, in order;
		// wantWarnings the same for warnings.
		wantErrs     []string
		wantWarnings []string
	}{
		{name: "the sample's shape is valid", spec: v1alpha1.DRAStackSpec{
			Drivers:   []v1alpha1.DriverSpec{{Name: "gpu.example.com"}},
			MultiHost: []v1alpha1.MultiHostSpec{mh("tpu", "tpu.example.com")},
			Claims: v1alpha1.ClaimsSpec{Central: []v1alpha1.CentralDevices{
				{Driver: "gpu.example.com", Pools: []string{"node-1"}}, {Driver: "tpu.example.com"}}},
		}, facts: Facts{Nodes: tpuNodes("a"), Published: map[string]bool{}, Namespace: created, OperatorNamespace: "drastack-system"}},

		// Issue 22, point 1: two entries over the same driver and hosts.
		{name: "two entries with the same selection, no node yet", spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{
			mh("tpu", "tpu.example.com"), mh("tpu2", "tpu.example.com")}},
			wantErrs: []string{`spec.multiHost[1]: Invalid value: "tpu2": publishes driver tpu.example.com with the same nodeSelector and domainLabel as spec.multiHost[0] (tpu)`}},
		{name: "two entries with the same selection name the shared hosts", spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{
			mh("tpu", "tpu.example.com"), mh("tpu2", "tpu.example.com")}}, facts: Facts{Nodes: tpuNodes("a")},
			wantErrs: []string{"hosts tpu-a-0, tpu-a-1, tpu-a-2, tpu-a-3 as spec.multiHost[0] (tpu)"}},
		{name: "different selectors over the same hosts", spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{
			mh("tpu", "tpu.example.com"), mh("tpu2", "tpu.example.com", func(m *v1alpha1.MultiHostSpec) { m.NodeSelector = nil })}},
			facts:    Facts{Nodes: tpuNodes("a", "b")},
			wantErrs: []string{`spec.multiHost[1]: Invalid value: "tpu2": publishes driver tpu.example.com with hosts tpu-a-0, tpu-a-1, tpu-a-2, tpu-a-3, tpu-b-0 and 3 more as spec.multiHost[0] (tpu)`}},
		{name: "different selectors over disjoint hosts", spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{
			mh("tpu", "tpu.example.com", func(m *v1alpha1.MultiHostSpec) { m.NodeSelector = selectLabel("d", "a") }),
			mh("tpu2", "tpu.example.com", func(m *v1alpha1.MultiHostSpec) { m.NodeSelector = selectLabel("d", "b") })}},
			facts: Facts{Nodes: tpuNodes("a", "b")}},
		{name: "the same hosts under two drivers", spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{
			mh("tpu", "tpu.example.com"), mh("nvl", "nvlink.example.com")}}, facts: Facts{Nodes: tpuNodes("a")}},
		{name: "pool names that collide across entries", spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{
			mh("a", "tpu.example.com", func(m *v1alpha1.MultiHostSpec) { m.NodeSelector = selectLabel("d", "b-c") }),
			mh("a-b", "tpu.example.com", func(m *v1alpha1.MultiHostSpec) { m.NodeSelector = selectLabel("d", "c") })}},
			facts:    Facts{Nodes: append(tpuNodes("b-c"), tpuNodes("c")...)},
			wantErrs: []string{`spec.multiHost[1]: Invalid value: "a-b": publishes driver tpu.example.com with pool name a-b-c as spec.multiHost[0] (a)`}},

		{name: "node-less slices of the multi-host driver that someone else wrote", spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{
			mh("tpu", "tpu.example.com"), mh("tpu2", "tpu.example.com", func(m *v1alpha1.MultiHostSpec) { m.NodeSelector = selectLabel("d", "zz") })}},
			facts:    Facts{ForeignSlices: map[string][]string{"tpu.example.com": {"vendor-slice-0"}, "other.example.com": {"x"}}},
			wantErrs: []string{`spec.multiHost[0].driver: Invalid value: "tpu.example.com": has node-less ResourceSlices that drastack did not write (slice vendor-slice-0)`}},

		// Point 2: namespaces the operator must not use.
		{name: "the operator's own namespace", spec: v1alpha1.DRAStackSpec{Namespace: "drastack-system"},
			facts:    Facts{OperatorNamespace: "drastack-system", Namespace: &NamespaceFacts{Exists: true, Managers: []string{"kubectl"}}},
			wantErrs: []string{`spec.namespace: Invalid value: "drastack-system": is the operator's own namespace`}},
		{name: "kube-system", spec: v1alpha1.DRAStackSpec{Namespace: "kube-system"},
			wantErrs: []string{`spec.namespace: Invalid value: "kube-system": is a namespace of Kubernetes itself`}},
		{name: "a namespace someone else created", spec: v1alpha1.DRAStackSpec{Namespace: "team-a"},
			facts:    Facts{Namespace: &NamespaceFacts{Exists: true, Managers: []string{"kubectl-create", "kubectl-label"}}},
			wantErrs: []string{`spec.namespace: Invalid value: "team-a": exists and was created by someone else (field managers kubectl-create, kubectl-label), not by drastack`}},
		{name: "a namespace of the operator that now enforces restricted", spec: v1alpha1.DRAStackSpec{},
			facts:    Facts{Namespace: &NamespaceFacts{Exists: true, Created: true, Enforce: "restricted"}},
			wantErrs: []string{`spec.namespace: Invalid value: "drastack-drivers": enforces the Pod Security level "restricted" (label pod-security.kubernetes.io/enforce), which refuses driver plugins: they need "privileged"`}},
		{name: "a namespace being deleted", spec: v1alpha1.DRAStackSpec{},
			facts:    Facts{Namespace: &NamespaceFacts{Exists: true, Created: true, Terminating: true}},
			wantErrs: []string{"is being deleted"}},
		{name: "a namespace that does not exist yet", spec: v1alpha1.DRAStackSpec{Namespace: "new"}, facts: Facts{Namespace: &NamespaceFacts{}}},

		// Point 3: a driver named like a multi-host driver, and two
		// drivers publishing under one name.
		{name: "a driver named like a multi-host driver", spec: v1alpha1.DRAStackSpec{
			Drivers:   []v1alpha1.DriverSpec{{Name: "tpu.example.com"}},
			MultiHost: []v1alpha1.MultiHostSpec{mh("tpu", "tpu.example.com")}},
			wantErrs: []string{`spec.drivers[0].name: Invalid value: "tpu.example.com": is the driver of spec.multiHost[0] (tpu): the central publisher owns`}},
		{name: "a profile that also publishes under a multi-host driver's name", spec: v1alpha1.DRAStackSpec{
			Drivers:   []v1alpha1.DriverSpec{{Name: "gpu.nvidia.com", Profile: v1alpha1.DriverProfileNVIDIAGPU}},
			MultiHost: []v1alpha1.MultiHostSpec{mh("cd", "compute-domain.nvidia.com")}},
			facts:    Facts{DriverNames: [][]string{{"gpu.nvidia.com", "compute-domain.nvidia.com"}}},
			wantErrs: []string{`spec.drivers[0].name: Invalid value: "gpu.nvidia.com": has a profile that also publishes under compute-domain.nvidia.com, which is the driver of spec.multiHost[0] (cd):`}},
		{name: "two drivers under one DRA name", spec: v1alpha1.DRAStackSpec{
			Drivers: []v1alpha1.DriverSpec{{Name: "gpu.nvidia.com", Profile: v1alpha1.DriverProfileNVIDIAGPU}, {Name: "compute-domain.nvidia.com", Profile: v1alpha1.DriverProfileCustom, Image: "x:1"}}},
			facts:    Facts{DriverNames: [][]string{{"gpu.nvidia.com", "compute-domain.nvidia.com"}}},
			wantErrs: []string{`spec.drivers[1].name: Invalid value: "compute-domain.nvidia.com": is a driver name of spec.drivers[0] (gpu.nvidia.com) too`}},

		// Point 5: central entries.
		{name: "a central entry of a driver nothing publishes", spec: v1alpha1.DRAStackSpec{
			Drivers: []v1alpha1.DriverSpec{{Name: "gpu.example.com"}},
			Claims:  v1alpha1.ClaimsSpec{Central: []v1alpha1.CentralDevices{{Driver: "gpu.example.com"}, {Driver: "nosuch.example.com"}, {Driver: "vendor.example.com"}}}},
			facts:        Facts{Published: map[string]bool{"vendor.example.com": true}},
			wantWarnings: []string{"spec.claims.central[1].driver: no driver publishes devices under nosuch.example.com"}},
		{name: "without the slices, an unknown driver is not reported", spec: v1alpha1.DRAStackSpec{
			Claims: v1alpha1.ClaimsSpec{Central: []v1alpha1.CentralDevices{{Driver: "vendor.example.com"}}}}},
		{name: "overlapping central entries", spec: v1alpha1.DRAStackSpec{Claims: v1alpha1.ClaimsSpec{Central: []v1alpha1.CentralDevices{
			{Driver: "gpu.example.com", Pools: []string{"n1", "n2"}},
			{Driver: "gpu.example.com", Pools: []string{"n2", "n3"}},
			{Driver: "tpu.example.com"},
			{Driver: "tpu.example.com", Pools: []string{"tpu-a"}},
			{Driver: "nic.example.com", NodeSelector: selectLabel("d", "a")},
			{Driver: "nic.example.com", NodeSelector: selectLabel("tpu", "true")},
			{Driver: "gpu.example.com", Pools: []string{"n4"}},
		}}}, facts: Facts{Nodes: tpuNodes("a", "b")},
			wantWarnings: []string{
				"spec.claims.central[1] overlaps spec.claims.central[0]: both select the devices of pool n2 of driver gpu.example.com",
				"spec.claims.central[3] overlaps spec.claims.central[2]: both select every device of driver tpu.example.com",
				"spec.claims.central[5] overlaps spec.claims.central[4]: both select the node-local pools of nodes tpu-a-0, tpu-a-1, tpu-a-2, tpu-a-3 of driver nic.example.com",
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := Check(&tc.spec, tc.facts)
			msgs := v.Messages()
			if len(msgs) != len(tc.wantErrs) {
				t.Fatalf("errors %q, want %d containing %q", msgs, len(tc.wantErrs), tc.wantErrs)
			}
			for i, want := range tc.wantErrs {
				if !strings.Contains(msgs[i], want) {
					t.Errorf("error %d = %q, want it to contain %q", i, msgs[i], want)
				}
			}
			if v.Valid() != (len(tc.wantErrs) == 0) {
				t.Errorf("Valid() = %v with errors %q", v.Valid(), msgs)
			}
			if len(v.Warnings) != len(tc.wantWarnings) {
				t.Fatalf("warnings %q, want %q", v.Warnings, tc.wantWarnings)
			}
			for i, want := range tc.wantWarnings {
				if !strings.Contains(v.Warnings[i], want) {
					t.Errorf("warning %d = %q, want it to contain %q", i, v.Warnings[i], want)
				}
			}
		})
	}
}

func TestSpecCondition(t *testing.T) {
	tests := []struct {
		name       string
		report     SpecReport
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{name: "valid", wantStatus: metav1.ConditionTrue, wantReason: ReasonSpecValid, wantMsg: "the spec is valid"},
		{name: "warnings keep it valid", report: SpecReport{Warnings: []string{"w1", "w2"}},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonSpecValidWithWarnings, wantMsg: "the spec is valid, with warnings: w1; w2"},
		{name: "errors say that nothing changes", report: SpecReport{Errors: []string{"spec.namespace: bad"}, DriverProblems: []string{"spec.drivers[0].patches[0]: no match"}, Warnings: []string{"w"}},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonInvalidSpec, wantMsg: "spec.namespace: bad; spec.drivers[0].patches[0]: no match; " + Frozen},
		{name: "a driver's render problem alone", report: SpecReport{DriverProblems: []string{"spec.drivers[0].image: bad"}},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonInvalidSpec, wantMsg: "spec.drivers[0].image: bad"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := SpecCondition(tc.report, 3)
			if c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.Message != tc.wantMsg || c.ObservedGeneration != 3 {
				t.Errorf("got %s/%s %q, want %s/%s %q", c.Status, c.Reason, c.Message, tc.wantStatus, tc.wantReason, tc.wantMsg)
			}
		})
	}
	// A message of many long errors keeps every path and stays in bounds.
	var errs []string
	for i := 0; i < 100; i++ {
		errs = append(errs, fmt.Sprintf("spec.drivers[%d].patches[0]: Invalid value: %q: no match", i, strings.Repeat("p", 1000)))
	}
	c := SpecCondition(SpecReport{Errors: errs}, 1)
	if len(c.Message) > maxConditionMessage || !strings.HasSuffix(c.Message, Frozen) {
		t.Errorf("message of %d bytes, ends %q", len(c.Message), c.Message[len(c.Message)-80:])
	}
}

// A long value in an error is shortened so that the reason after it stays.
func TestErrorMessagesKeepTheReason(t *testing.T) {
	spec := v1alpha1.DRAStackSpec{Drivers: []v1alpha1.DriverSpec{{Name: "gpu.example.com", Image: "r.io/" + strings.Repeat("UPPER", 200) + ":v1"}}}
	msgs := Check(&spec, Facts{}).Messages()
	if len(msgs) != 1 || len(msgs[0]) > maxErrorMessage || !strings.HasPrefix(msgs[0], "spec.drivers[0].image: Invalid value:") ||
		!strings.HasSuffix(msgs[0], ": longer than 512 characters") {
		t.Fatalf("messages %q", msgs)
	}
}

// FuzzCheck: any spec that decodes, with any nodes, is checked without a
// panic, and every error names a spec field.
func FuzzCheck(f *testing.F) {
	f.Add(`{"namespace":"kube-system","multiHost":[{"name":"a","driver":"d","domainLabel":"x","coordinatesLabel":"c","hostGrid":[2],"chipsPerHost":[1],"partitions":["1"]},{"name":"b","driver":"d","domainLabel":"x","coordinatesLabel":"c","hostGrid":[2],"chipsPerHost":[1],"partitions":["1"]}]}`,
		`[{"metadata":{"name":"n","labels":{"x":"1"}}}]`)
	f.Add(`{"drivers":[{"name":"d"}],"multiHost":[{"name":"m","driver":"d","nodeSelector":{"matchExpressions":[{"key":"k","operator":"Bogus"}]}}],"claims":{"central":[{"driver":"d"},{"driver":"d","nodeSelector":{}}]}}`, `[]`)
	f.Fuzz(func(t *testing.T, specJSON, nodesJSON string) {
		var spec v1alpha1.DRAStackSpec
		if json.Unmarshal([]byte(specJSON), &spec) != nil {
			return
		}
		var nodes []corev1.Node
		_ = json.Unmarshal([]byte(nodesJSON), &nodes)
		v := Check(&spec, Facts{Nodes: nodes, Published: map[string]bool{}, OperatorNamespace: "op", Namespace: &NamespaceFacts{Exists: true}})
		for _, m := range v.Messages() {
			if !strings.HasPrefix(m, "spec.") {
				t.Fatalf("error without a field path: %q", m)
			}
		}
	})
}
