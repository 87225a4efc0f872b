// Package nvsp encodes and decodes NVSP, the Network VSP protocol: the
// first layer inside a netvsc VMBus packet (docs/protocol/netvsc.md §2).
// It holds the message types and status codes (§2.2, §2.3), the protocol
// and NDIS versions a guest offers (§2.1), every message of the bring-up
// (§2.5: INIT, SEND_NDIS_CONFIG, SEND_NDIS_VER, the receive- and
// send-buffer registrations and their revocation), SEND_RNDIS_PKT and its
// completion that carry RNDIS in both directions (§2.6, §2.7), and the
// NVSP 4/5 messages of multi-queue and accelerated networking: sub-channel
// allocation, the send indirection table (§2.8), VF association and the
// data-path switch (§2.9). What rides inside SEND_RNDIS_PKT is package
// rndis.
//
// Both ends use it: the guest driver (package netvsc) encodes requests and
// decodes responses, the simulated host (package sim) the reverse, so every
// message has both an encoder and a decoder.
//
// Conventions (shared with package rndis):
//
//   - Encoders are append-style, Marshal(dst []byte) []byte, and do not
//     allocate when dst has the capacity.
//   - Decoders are Unmarshal(b []byte) error. They check every length,
//     offset and count against the bytes they were given with arithmetic
//     that cannot overflow, and never panic. The caller copies b out of
//     shared memory before decoding it.
//   - Decoders check structure, not policy. A field whose value the peer
//     might legitimately choose (a status, a channel type, a capability) is
//     returned as read; the checks that need context (buffer sizes, section
//     counts) are separate methods, so the guest and the simulated host each
//     apply the rules that are theirs.
//   - Every structural violation is a *protoerr.Error whose Kind names the
//     check, so callers can count "protocol violations by check".
//
// No type in this package holds state; values are safe to copy.
package nvsp
