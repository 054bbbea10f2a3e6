// Package topology turns a multi-host accelerator topology (a grid of hosts,
// each with a grid of chips, and the partition shapes the interconnect
// supports) into the ResourceSlices of one KEP-4815 pool: counter slices
// that hold one counter per host, and device slices with
// perDeviceNodeSelection whose devices are every aligned placement of every
// shape. No kubelet plugin sees a whole multi-host device, so a central
// publisher has to compute these slices; this package is that computation,
// pure and without a client, so that the publisher controller, the bench
// harness and tests share one implementation.
//
// # Grid and coordinates
//
// A pool is a grid of 1 to 3 dimensions. HostGrid gives the hosts per
// dimension and ChipsPerHost the chips each host contributes per dimension,
// so the pool is a chip grid of HostGrid[d]*ChipsPerHost[d] chips along d.
// Host coordinates are written "x", "x.y" or "x.y.z" (the coordinates label
// of a node); the host at host coordinates h holds the chips
// h[d]*ChipsPerHost[d] ... (h[d]+1)*ChipsPerHost[d]-1 along every d.
//
// # Shapes and alignment
//
// A shape ("2x4", "4x4x2") is a partition size in chips, one number per
// dimension of the grid, dimension 0 first. A shape is allowed when, along
// every dimension d, its size z divides the chip grid evenly and either
//
//   - z is a multiple of ChipsPerHost[d] (the shape spans z/ChipsPerHost[d]
//     whole hosts along d), or
//   - z divides ChipsPerHost[d] (the shape stays inside one host along d).
//
// A placement of a shape is aligned: its origin is a multiple of the shape
// along every dimension. So placements of one shape tile the grid without
// overlapping; along a dimension where a shape spans hosts it starts on a
// host boundary that is a multiple of its own host span; and along a
// dimension where it stays inside a host it never straddles two. This is how TPU slices are
// cut: in the KEP-4815 example (4 hosts of 2x2 chips) the 2x4 slices are
// nodes {1,2} and {5,6}, never {2,3}. Every placement is one device.
//
// # Counters
//
// Every host has one counter whose value is its chip count. A device
// consumes, from the counter of every host it touches, the chips it covers
// on that host. A shape is "whole-host" when it is at least ChipsPerHost
// along every dimension (it covers every chip of each of its hosts) and
// "partial" otherwise. At most one partial shape is allowed per pool: with
// one counter per host, two devices that each cover part of a host could
// overlap on a chip while their chip counts still fit, and the scheduler
// would allocate both. With at most one partial shape, two devices can be
// allocated together exactly when they share no chip (placements of one
// shape never overlap; a whole-host device uses all chips of its hosts).
//
// Hosts are grouped into counter sets by aligned blocks of hosts (at most
// 32 hosts, the counters-per-set limit) chosen so that every device consumes
// from at most 2 counter sets, the per-device limit; Generate searches all
// block sizes and rejects a spec for which none works, naming the shape.
// Together with the 32 counters a device may consume per set, this caps a
// device at 64 hosts; the list-valued hosts attribute caps it lower (48
// attribute values per device, 4 of them taken by the scalar attributes),
// unless Spec.OmitHostsAttribute is set.
//
// # Slices
//
// Counter sets go into counter slices (at most 8 sets each, so one counter
// slice serves up to 256 hosts and larger pools get several), devices into
// device slices (at most 64 devices each, the limit for devices that
// consume counters), smallest shapes first as KEP-4815 recommends for
// first-fit allocators. Object names derive from grid positions, never from
// node names, so replacing the node at a position changes only the node
// selection of the devices on it. Every slice sets perDeviceNodeSelection: true (the
// API server requires exactly one node selection field on every slice,
// counter slices included). A device on one host names it with nodeName; a
// device on several hosts uses a kubernetes.io/hostname In selector.
package topology
