// Package pool is the pool validation controller: one DevicePool per
// resource pool (driver, pool name), with its slices, devices, counters,
// health and problems, plus Events on health changes, Prometheus metrics,
// and the pool part of the DRAStack status (status.pools,
// status.summary.pools and the PoolsHealthy condition).
//
// The decisions live in internal/pool (grouping, validation, allocation
// accounting, health); this package moves data:
//
//	informer events ──> model (slices by pool, Ledger of claims, nodes)
//	                      │ touched pool IDs
//	                      v
//	             workqueue of pool IDs ──> Reconcile(id): Build, Assess,
//	                                        map to status, write if changed,
//	                                        Event, board entry
//	                                                 │
//	                board ──> DRAStack status writer (debounced)
//	                      └─> metrics collector (at scrape time)
//
// Work is incremental: an event costs work proportional to what it
// changed, and only the pools it touched are validated again. A periodic
// resync (spec.pools.resyncPeriod) queues every pool to catch what events
// missed. Incomplete pools and pools whose slices all went away are
// requeued at the end of spec.pools.incompleteGracePeriod: the first get
// IncompletePool, the second lose their DevicePool.
//
// Files: name.go (DevicePool names), model.go (in-memory state),
// status.go (report to status, conditions), events.go (which Event a
// change deserves), aggregate.go (the DRAStack condition), board.go
// (latest result per pool), metrics.go, reconciler.go, setup.go (watches
// and queue), stackstatus.go (DRAStack writer), apply.go (server-side
// apply of DevicePool status).
package pool
