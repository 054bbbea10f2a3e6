package pool

import (
	"time"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Defaults of DRAStack spec.pools, used when there is no DRAStack or a
// field is unset (the CRD defaults them too; these keep the controller
// right when it runs against an object written before a default existed).
const (
	DefaultResyncPeriod          = 5 * time.Minute
	DefaultIncompleteGracePeriod = 2 * time.Minute
	DefaultMaxProblems           = 20
)

// minResyncPeriod keeps a typo such as "1ms" from turning the periodic
// resync into a busy loop over every pool.
const minResyncPeriod = 10 * time.Second

// config is spec.pools of the DRAStack with defaults applied.
type config struct {
	resync      time.Duration
	grace       time.Duration
	maxProblems int
	// generation of the DRAStack it was read from (0 without one), for
	// the observedGeneration of PoolsHealthy.
	generation int64
}

func defaultConfig() config {
	return config{resync: DefaultResyncPeriod, grace: DefaultIncompleteGracePeriod, maxProblems: DefaultMaxProblems}
}

// configFrom reads spec.pools; st may be nil.
func configFrom(st *v1alpha1.DRAStack) config {
	c := defaultConfig()
	if st == nil {
		return c
	}
	c.generation = st.Generation
	p := st.Spec.Pools
	if p.ResyncPeriod != nil && p.ResyncPeriod.Duration > 0 {
		c.resync = max(p.ResyncPeriod.Duration, minResyncPeriod)
	}
	if p.IncompleteGracePeriod != nil && p.IncompleteGracePeriod.Duration >= 0 {
		c.grace = p.IncompleteGracePeriod.Duration
	}
	if p.MaxProblems > 0 {
		c.maxProblems = int(p.MaxProblems)
	}
	return c
}

// affectsStatus reports whether switching from c to o changes what
// DevicePool status says, so that every pool must be validated again.
func (c config) affectsStatus(o config) bool {
	return c.grace != o.grace || c.maxProblems != o.maxProblems
}
