package topology

import "testing"

// benchSpec is a 64-host TPU-like pool: 8x8 hosts of 2x2 chips (16x16
// chips) with every square and 2:1 shape from one host to the whole pod.
// The whole pod spans 64 hosts, so the hosts list must be omitted (see
// the attribute-value limit).
func benchSpec(b *testing.B) Spec {
	hm, err := FullHostMap([]int{8, 8}, func(c string) string { return "tpu-node-" + c })
	if err != nil {
		b.Fatal(err)
	}
	return Spec{
		Driver: "tpu.example.com", Pool: "pod-a", Domain: "pod-a",
		HostGrid: []int{8, 8}, ChipsPerHost: []int{2, 2},
		Partitions:         []string{"2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"},
		Hosts:              hm,
		OmitHostsAttribute: true,
	}
}

func BenchmarkGenerate64Hosts(b *testing.B) {
	spec := benchSpec(b)
	var res *Result
	for b.Loop() {
		var err error
		if res, err = Generate(spec, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(res.Summary.Devices), "devices")
	b.ReportMetric(float64(res.Summary.Slices), "slices")
}
