package driver

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

// TestRolloutMetrics: the collector shows the statuses last reported, one
// series per node state and one status series per driver, and nothing
// once the DRAStack is gone.
func TestRolloutMetrics(t *testing.T) {
	c := &rollout{}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("%d series before any report", n)
	}
	c.report([]driver.Assessment{
		{Status: v1alpha1.DriverStatus{Name: "gpu.example.com", NodesDesired: 4, NodesReady: 4, NodesUpdated: 1, NodesPublishing: 3, Reason: "RollingOut"}},
		{Status: v1alpha1.DriverStatus{Name: "nic.example.com", NodesDesired: 2, NodesReady: 2, NodesUpdated: 2, NodesPublishing: 2, Reason: "Ready"}},
	})
	want := `
# HELP drastack_driver_nodes ` + helpOf(t, "drastack_driver_nodes") + `
# TYPE drastack_driver_nodes gauge
drastack_driver_nodes{driver="gpu.example.com",state="desired"} 4
drastack_driver_nodes{driver="gpu.example.com",state="publishing"} 3
drastack_driver_nodes{driver="gpu.example.com",state="ready"} 4
drastack_driver_nodes{driver="gpu.example.com",state="updated"} 1
drastack_driver_nodes{driver="nic.example.com",state="desired"} 2
drastack_driver_nodes{driver="nic.example.com",state="publishing"} 2
drastack_driver_nodes{driver="nic.example.com",state="ready"} 2
drastack_driver_nodes{driver="nic.example.com",state="updated"} 2
# HELP drastack_driver_status ` + helpOf(t, "drastack_driver_status") + `
# TYPE drastack_driver_status gauge
drastack_driver_status{driver="gpu.example.com",reason="RollingOut"} 1
drastack_driver_status{driver="nic.example.com",reason="Ready"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	c.report(nil)
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("%d series after the DRAStack is gone", n)
	}
}

func helpOf(t *testing.T, name string) string {
	t.Helper()
	for _, d := range []string{descNodes.String(), descStatus.String()} {
		if strings.Contains(d, `"`+name+`"`) {
			_, rest, _ := strings.Cut(d, `help: "`)
			help, _, _ := strings.Cut(rest, `", `)
			return help
		}
	}
	t.Fatalf("no description of %s", name)
	return ""
}
