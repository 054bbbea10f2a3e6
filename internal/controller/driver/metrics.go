package driver

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

// Rollout metrics: what status.drivers last reported, at scrape time. Only
// the leader reconciles, so only the leader reports them.
var (
	descNodes = prometheus.NewDesc("drastack_driver_nodes",
		"Nodes of each driver's kubelet plugin by state: desired (targeted), ready (a ready plugin), updated (a ready plugin of the current version), publishing (ResourceSlices of the driver); status.drivers[].nodes*.",
		[]string{"driver", "state"}, nil)
	descStatus = prometheus.NewDesc("drastack_driver_status",
		"1 for each driver of the DRAStack, labelled with the reason of its status (Ready, Installing, RollingOut, RolloutStalled, CrashLoopBackOff, NotPublishing, Removing, ...; status.drivers[].reason).",
		[]string{"driver", "reason"}, nil)
)

// rollout holds the driver statuses last written; the collector reads them
// at scrape time. The reconciler is its only writer.
type rollout struct {
	drivers atomic.Pointer[[]v1alpha1.DriverStatus]
}

var (
	rolloutCollector = &rollout{}
	registerOnce     sync.Once
)

// RegisterMetrics registers the rollout metrics with controller-runtime's
// registry, once per process.
func RegisterMetrics() {
	registerOnce.Do(func() { ctrlmetrics.Registry.MustRegister(rolloutCollector) })
}

// report replaces what the metrics show with the assessments of a
// reconcile whose status was written; nil clears them (no DRAStack).
func (c *rollout) report(as []driver.Assessment) {
	drivers := make([]v1alpha1.DriverStatus, 0, len(as))
	for _, a := range as {
		drivers = append(drivers, a.Status)
	}
	c.drivers.Store(&drivers)
}

func (c *rollout) Describe(ch chan<- *prometheus.Desc) {
	ch <- descNodes
	ch <- descStatus
}

func (c *rollout) Collect(ch chan<- prometheus.Metric) {
	drivers := c.drivers.Load()
	if drivers == nil {
		return
	}
	for _, d := range *drivers {
		for _, s := range []struct {
			state string
			n     int32
		}{
			{"desired", d.NodesDesired},
			{"ready", d.NodesReady},
			{"updated", d.NodesUpdated},
			{"publishing", d.NodesPublishing},
		} {
			ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(s.n), d.Name, s.state)
		}
		ch <- prometheus.MustNewConstMetric(descStatus, prometheus.GaugeValue, 1, d.Name, d.Reason)
	}
}
