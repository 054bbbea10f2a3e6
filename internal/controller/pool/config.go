package pool

import (
	"fmt"
	"maps"
	"strings"
	"time"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/internal/topology"
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
	// withheld are the multi-host pools the central publisher withholds,
	// with its words (DRAStack status.multiHost[].problems).
	withheld map[poolpkg.ID]string
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
	c.withheld = withheldPools(st)
	return c
}

// withheldPrefix starts the publisher's problem line of a withheld pool:
// "PoolWithheld: pool <name> is withheld: 1 of 4 hosts are missing ...".
const withheldPrefix = string(topology.ReasonPoolWithheld) + ": pool "

// withheldPools reads which multi-host pools the central publisher
// withholds, and why, from its status: status.multiHost[] by entry name,
// the entry's driver from the spec.
func withheldPools(st *v1alpha1.DRAStack) map[poolpkg.ID]string {
	drivers := map[string]string{}
	for _, m := range st.Spec.MultiHost {
		drivers[m.Name] = m.Driver
	}
	var out map[poolpkg.ID]string
	for _, ms := range st.Status.MultiHost {
		driver := drivers[ms.Name]
		if driver == "" {
			continue
		}
		for _, line := range ms.Problems {
			rest, ok := strings.CutPrefix(line, withheldPrefix)
			if !ok {
				continue
			}
			pool, _, ok := strings.Cut(rest, " is withheld")
			if !ok || pool == "" {
				continue
			}
			if out == nil {
				out = map[poolpkg.ID]string{}
			}
			out[poolpkg.ID{Driver: driver, Pool: pool}] = fmt.Sprintf("the central publisher withholds the pool (spec.multiHost %s): %s", ms.Name, strings.TrimPrefix(line, string(topology.ReasonPoolWithheld)+": "))
		}
	}
	return out
}

// affectsStatus reports whether switching from c to o changes what
// DevicePool status says, so that every pool must be validated again.
func (c config) affectsStatus(o config) bool {
	return c.grace != o.grace || c.maxProblems != o.maxProblems || !maps.Equal(c.withheld, o.withheld)
}
