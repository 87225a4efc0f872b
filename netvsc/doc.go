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
// The wire formats live beside it, shared with sim/'s NetVSP: package nvsp
// (the NVSP messages), the RNDIS/NDIS messages still in this package
// (rndis*.go, ppi.go, oid.go, rss.go), and package protoerr (the
// *protoerr.Error every decoder and the driver's own checks return, whose
// Kind names the check, so callers can count "protocol violations by
// check"). Facts and offsets come from docs/protocol/netvsc.md, cited as
// "netvsc.md §N". The wire encoders are append-style Marshal(dst) or, for
// the data path, Put… into a fixed buffer; the decoders check every length,
// offset and count and never panic, and check structure, not policy.
//
// No type in this package holds state shared between goroutines; values are
// safe to copy.
package netvsc
