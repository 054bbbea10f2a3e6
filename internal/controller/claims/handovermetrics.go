package claims

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the partition hand-over (join.go, taintrules.go), registered
// once per process in controller-runtime's registry.
var (
	rulesRestored = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "drastack_central_rules_restored_total",
		Help: "Central DeviceTaintRules the operator created or reset again after someone else deleted or changed them; their pools join the partition again.",
	})
	centralRules = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drastack_central_rules",
		Help: "The operator's central DeviceTaintRules by join state: joined (the operator allocates their devices) or joining (nobody allocates them until the join barrier passes).",
	}, []string{"state"})
	roundsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "drastack_central_join_canaries_total",
		Help: "Canary pods of the join barrier by what kube-scheduler made of them: refused (it saw the canary rule), bound (it had not; tried again) or lost (bound because another process deleted the round's canary rule; a new round begins).",
	}, []string{"outcome"})
	joinsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "drastack_central_joins_total",
		Help: "Central DeviceTaintRules whose pools joined the partition.",
	})
	joinSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "drastack_central_join_seconds",
		Help:    "Time from the start of a join barrier round to the join of a rule it covers: kube-scheduler refusing the canary, then the pods it may have been binding resolving.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	})
)

var registerJoinOnce sync.Once

func registerJoinMetrics() {
	registerJoinOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(rulesRestored, centralRules, roundsTotal, joinsTotal, joinSeconds)
	})
}
