// Package netvsc is the guest driver of the Hyper-V synthetic NIC (nic.go
// and friends: handshake, receive via transfer pages, transmit via
// send-buffer sections or GPA-direct, multi-queue with RSS, offloads, link
// state, VF association, hybrid polling, counters; see README.md), built on
// the NVSP, RNDIS and NDIS wire formats of packages nvsp and rndis.
//
// It knows nothing of TAP devices or Prometheus: cmd/vmbusd attaches the NIC
// to the host network stack and exports its counters. Its only contact with
// the kernel's network stack is the accelerated-networking VF (vf.go): the
// VF's netdev, found under the root and handled with rtnetlink, and its
// AF_XDP data path (package afxdp).
//
// The wire formats live in their own packages, shared with sim/'s NetVSP:
// nvsp (the NVSP messages), rndis (RNDIS messages, per-packet info, NDIS
// OIDs and objects, RSS) and protoerr (the *protoerr.Error every decoder
// and the driver's own checks return, whose Kind names the check, so
// callers can count "protocol violations by check"). Facts and offsets come
// from docs/protocol/netvsc.md, cited as "docs/protocol/netvsc.md §N".
package netvsc
