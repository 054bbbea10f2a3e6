package cli

import (
	"fmt"
	"io"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/pool"
)

// PoolEntry is one pool in the JSON and YAML output of validate, simulate
// and pools. The field names are a stable contract (CLI.md).
type PoolEntry struct {
	// Driver and Pool identify the pool.
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	// Generation is the pool's current generation.
	Generation int64 `json:"generation"`
	// Health is Healthy, Incomplete, Invalid or Degraded.
	Health string `json:"health"`
	// Slices of the current generation.
	Slices int `json:"slices"`
	// Devices of the current generation.
	Devices int `json:"devices"`
	// AllocatedDevices are devices named by an allocation without admin
	// access.
	AllocatedDevices int `json:"allocatedDevices"`
	// Problems, errors first; never null.
	Problems []ProblemEntry `json:"problems"`

	// Only for the table: the node of a node-local pool, the slice count
	// the pool expects, and (live view) the object name, its age, the
	// status reason and how many problems the status left out.
	node           string
	expectedSlices int64
	name           string
	age            string
	reason         string
	moreProblems   int
}

// ProblemEntry is one problem of a pool; every key is always present (empty
// strings when the problem is not in one slice or device), so scripts can
// index them without checking.
type ProblemEntry struct {
	// Reason is a reason code of SEMANTICS.md (MissingCounter, ...).
	Reason string `json:"reason"`
	// Severity is Error or Warning.
	Severity string `json:"severity"`
	// Slice and Device say where the problem is, when it is in one place.
	Slice  string `json:"slice"`
	Device string `json:"device"`
	// Message explains the problem.
	Message string `json:"message"`
}

// offlineTime stands in for "now" when assessing pools read from files:
// files carry no time, so a pool is never "incomplete for a while".
var offlineTime = time.Unix(0, 0).UTC()

// assessPools groups the slices into pools with opts and assesses each with
// the allocations recorded in ledger (nil for none).
//
// Offline there is no grace period: an incomplete pool is Incomplete and
// carries an IncompletePool error right away, because a file is a snapshot
// and waiting would not change it.
func assessPools(slices []*resourceapi.ResourceSlice, ledger *pool.Ledger, opts pool.Options) []PoolEntry {
	pools := pool.GroupWith(slices, opts)
	out := make([]PoolEntry, 0, len(pools))
	for _, p := range pools {
		r := pool.Assess(p, ledger, offlineTime, offlineTime, 0)
		problems := r.Problems
		if !p.Complete() {
			problems = append(problems, offlineIncomplete(p))
			pool.SortProblems(problems)
		}
		out = append(out, PoolEntry{
			Driver:           r.Driver,
			Pool:             r.ID.Pool,
			Generation:       r.Generation,
			Health:           string(r.Health),
			Slices:           r.Slices,
			Devices:          r.Devices.Total,
			AllocatedDevices: r.Devices.Allocated,
			Problems:         problemEntries(problems),
			node:             r.Node,
			expectedSlices:   r.ExpectedSlices,
		})
	}
	return out
}

// offlineIncomplete is the IncompletePool problem of a snapshot, without
// the duration the live controller adds.
func offlineIncomplete(p *pool.Pool) pool.Problem {
	msg := fmt.Sprintf("pool has %d of %d slices of generation %d", len(p.Slices), p.ExpectedSlices, p.Generation)
	if int64(len(p.Slices)) > p.ExpectedSlices {
		msg = fmt.Sprintf("pool has %d slices of generation %d but resourceSliceCount is %d", len(p.Slices), p.Generation, p.ExpectedSlices)
	}
	return pool.Problem{Reason: pool.ReasonIncompletePool, Severity: pool.SeverityError, Message: msg}
}

func problemEntries(problems []pool.Problem) []ProblemEntry {
	out := make([]ProblemEntry, 0, len(problems))
	for _, p := range problems {
		out = append(out, ProblemEntry{
			Reason:   string(p.Reason),
			Severity: string(p.Severity),
			Slice:    p.Slice,
			Device:   p.Device,
			Message:  p.Message,
		})
	}
	return out
}

// ledgerFor records the allocations of the claims that have one.
func ledgerFor(claims []*resourceapi.ResourceClaim) *pool.Ledger {
	l := pool.NewLedger()
	for _, c := range claims {
		if c.Status.Allocation != nil {
			l.AddClaim(c)
		}
	}
	return l
}

// warnUnknownPools warns about allocations that name a pool no slice in the
// input publishes: they cannot show up in any pool entry (there is no pool
// to report them on), so without a warning they would vanish silently.
func warnUnknownPools(w io.Writer, claims []*resourceapi.ResourceClaim, pools []PoolEntry) {
	known := make(map[pool.ID]bool, len(pools))
	for _, p := range pools {
		known[pool.ID{Driver: p.Driver, Pool: p.Pool}] = true
	}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		warned := map[pool.ID]bool{}
		for _, r := range c.Status.Allocation.Devices.Results {
			id := pool.ID{Driver: r.Driver, Pool: r.Pool}
			if known[id] || warned[id] {
				continue
			}
			warned[id] = true
			fmt.Fprintf(w, "warning: ResourceClaim %s/%s is allocated devices of pool %s/%s, which no ResourceSlice in the input publishes\n",
				c.Namespace, c.Name, r.Driver, r.Pool)
		}
	}
}
