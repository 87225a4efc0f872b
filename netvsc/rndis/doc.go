// Package rndis encodes and decodes what rides inside NVSP SEND_RNDIS_PKT
// (docs/protocol/netvsc.md §3): the RNDIS control messages (INITIALIZE,
// QUERY, SET, RESET, KEEPALIVE, HALT, their completions and
// INDICATE_STATUS; §3.1, §3.2), the PACKET message that carries one
// Ethernet frame (§3.3) with its per-packet info (§3.4: checksum, LSO,
// VLAN, RSS hash), the NDIS OIDs a guest queries and sets (§3.5), and the
// NDIS objects some of them carry (§3.6: offload capabilities and
// parameters, RSS capabilities and parameters), plus the Toeplitz hash both
// ends of an RSS link agree on. The NVSP layer around it is package nvsp.
//
// Both ends use it: the guest driver (package netvsc) encodes requests and
// decodes responses, the simulated host (package sim) the reverse.
//
// Conventions (shared with package nvsp):
//
//   - Encoders are append-style, Marshal(dst []byte) []byte, and do not
//     allocate when dst has the capacity. The data-path encoders that write
//     into a fixed buffer (a send-buffer section, a receive-buffer
//     sub-allocation) are Put… functions returning the bytes written, or
//     ErrBufferTooSmall.
//   - Decoders are Unmarshal(b []byte) error or Parse…(b) (T, error). They
//     check every length, offset and count against the bytes they were
//     given with arithmetic that cannot overflow, and never panic. Slices in
//     the results (info buffers, frames, PPI data) alias b: they are valid
//     while b is, and the caller copies b out of shared memory before
//     decoding it.
//   - Decoders check structure, not policy. A field whose value the peer
//     might legitimately choose (a status, a capability, an OID it does not
//     support) is returned as read; the checks that need context (queue
//     counts for an indirection table) are separate methods.
//   - Every structural violation is a *protoerr.Error whose Kind names the
//     check, so callers can count "protocol violations by check".
//
// No type in this package holds state; values are safe to copy.
package rndis
