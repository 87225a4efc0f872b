// Package hoptrace breaks one request/response round trip through vmbusd
// into its hops. Each hop (the guest's TAP read, its signal to the host,
// the host's monitor scan, ...) stores a timestamp into a slot of a small
// shared-memory page that the guest, the simulated host (another process)
// and the benchmark client all map. The client clears the page before each
// request and reads it after the response, so with one request in flight
// the page holds that request's path.
//
// It is a measurement aid, off by default: every hook takes a *Stamps that
// is nil unless a benchmark asked for a trace, and a nil *Stamps costs one
// comparison. A stamp is one wall-clock read (vDSO, comparable across
// processes) and one atomic store; it allocates nothing.
//
// A hop records only its first occurrence in a round, only once the hop
// it follows has been recorded and only while the hop that ends its leg
// has not: a signal the guest raises for its receive completions after
// the response, say, is not taken for the request's.
package hoptrace
