// Package netvsc owns the Hyper-V synthetic NIC protocols: the NVSP
// messages that ride VMBus packets, the RNDIS messages carried inside them
// (control messages and PACKET messages with their per-packet info), the
// NDIS objects exchanged through OIDs, and the Toeplitz hash both ends of an
// RSS link agree on; and the guest NIC driver built on them (nic.go and
// friends: handshake, receive via transfer pages, transmit via send-buffer
// sections or GPA-direct, multi-queue with RSS, offloads, link state, VF
// association, hybrid polling, counters; see README.md).
//
// It knows nothing of TAP devices or Prometheus: cmd/vmbusd attaches the NIC
// to the host network stack and exports its counters. Its only contact with
// the kernel's network stack is the accelerated-networking VF (vf.go): the
// VF's netdev, found under the root and handled with rtnetlink, and its
// AF_XDP data path (package afxdp).
//
// The wire-format half (nvsp*.go, rndis*.go, ppi.go, oid.go, rss.go) is shared by the
// guest driver and by sim/'s NetVSP, so every message can be both encoded
// and decoded: the guest encodes requests and decodes responses, the host
// the reverse. Facts and offsets come from the project's protocol reference
// (reference/netvsc.md), cited as "netvsc.md §N".
//
// Conventions:
//
//   - Encoders are append-style, Marshal(dst []byte) []byte, and do not
//     allocate when dst has the capacity. The data-path encoders that write
//     into a fixed buffer (a send-buffer section, a receive-buffer
//     sub-allocation) are Put… functions returning the bytes written.
//   - Decoders are Unmarshal(b []byte) error or Parse…(b) (T, error). They
//     check every length, offset and count against the bytes they were given
//     with arithmetic that cannot overflow, and never panic. Slices in the
//     results (info buffers, frames, PPI data) alias b: they are valid while
//     b is, and the caller copies b out of shared memory before decoding it
//     (DESIGN.md: "a packet is copied out before it is parsed").
//   - Decoders check structure, not policy. A field whose value the peer
//     might legitimately choose (a status, a channel type, a capability)
//     is returned as read; the checks that need context (buffer sizes,
//     section counts, queue counts) are separate methods, so the guest and
//     the simulated host each apply the rules that are theirs.
//   - Every structural violation is a *ProtocolError whose Kind names the
//     check, so callers can count "protocol violations by check".
//
// No type in this package holds state shared between goroutines; values are
// safe to copy.
package netvsc
