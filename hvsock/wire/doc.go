// Package wire holds the hv_sock wire formats, shared by the guest
// (package hvsock) and the simulated host (package sim): the pipe-header
// framing of data packets on a channel's rings, the TL connect messages a
// guest-initiated connection starts with, and the addressing that maps
// vsock ports to service GUIDs (docs/protocol/hvsock.md §1.1, §1.2, §1.6).
//
// It is pure encoding and decoding: no I/O, no state, no allocation on the
// data path. Everything it decodes may come from an untrusted peer, so each
// decoder checks every length and type before use and reports a typed error
// (*FrameError for framing), never a panic; the Fuzz targets beside it hold
// it to that.
package wire
