// Package deadline turns net.Conn deadlines into contexts, for connections
// whose blocked operations wait on channels rather than file descriptors:
// hv_sock over VMBus, on both the guest's side (package hvsock) and the
// simulated host's (package sim). It is a leaf below both, importing only
// the standard library, so neither reaches into the daemon's internal/
// packages for it.
package deadline
