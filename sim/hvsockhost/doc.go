// Package hvsockhost is the simulated host's hv_sock side: Hyper-V sockets
// as the host offers them, one VMBus channel device per connection on the
// bus of package sim/bus.
//
// It models the transport's control path (a guest's connect request on
// R/dev/vmbus-tl, answered with an offer or a refusal,
// docs/uio-contract.md §7.2), host-initiated connects to guest listeners,
// in-process listeners and connections (Conn, a net.Conn), and the Unix
// socket front end through which ordinary programs reach guests and are
// reached (docs/uio-contract.md §7.4). hvsock.go's file comment maps what
// a real offer carries onto sysfs (docs/uio-contract.md §7.1).
//
// The host rules it enforces: every connection is its own channel,
// offered by the host and rescinded once both directions are done
// (docs/protocol/hvsock.md §1.2, §1.10); the guest must open an offer
// within the host's timeout, or the offer is rescinded; connect requests
// in progress are bounded (back-pressure); the host's packets are at most
// its chunk size, and the guest's are checked as the host reads them
// (inband, pipe header, payload size; docs/protocol/hvsock.md §1.6), a
// broken frame resetting the connection and counting a violation. hv_sock
// channels are not monitored, so a legacy kernel profile, whose guests
// cannot signal them, is refused (docs/uio-contract.md §1.2).
package hvsockhost
