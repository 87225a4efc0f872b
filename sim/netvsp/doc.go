// Package netvsp is the simulated host's NetVSP: the host side of a
// Hyper-V synthetic NIC, a network-class device on the bus of package
// sim/bus whose service speaks NVSP and RNDIS to the guest and connects it
// to a vSwitch port of package sim/vswitch, together with the
// accelerated-networking VF stand-in that pairs with it.
//
// It models, per guest open of the NIC: the NVSP bring-up (versions, the
// receive and send buffers, sub-channels, the send indirection table), the
// RNDIS control path (initialise, query and set, offloads, RSS), the
// receive path (sections of the receive buffer partitioned per queue,
// transfer-page packets, per-packet info), the transmit path (send
// sections and GPA-direct ranges read from guest memory), link state and
// status indications, and NIC-level faults (netvsp_fault.go). netvsp.go's
// file comment gives the session's states. The VF (vf*.go) is a PCI
// device and netdev in the tree and a real interface pair, offered and
// withdrawn with the NVSP messages of docs/protocol/netvsc.md §2.9
// (docs/uio-contract.md §8, docs/accelerated-networking.md §4).
//
// The host rules it enforces (docs/protocol/netvsc.md §7.2): the setup is
// answered exactly and in the order the protocol fixes (§2.5); control
// messages only on the primary channel and no data before the packet
// filter is set; a transfer-page id is reused only after the guest
// completed it (§2.6); sub-channel grants as configured (§2.8); receive
// metadata as Windows sends it (checksum, VLAN and hash per-packet info,
// §3.4), and TCP super-frames from a port that reads them (a kernel TAP)
// coalesced into RSC fragments for a guest that enabled RSC over VMBus
// exactly as §3.4 allows (NVSP 6.1, the capability, the offload
// parameter), cut into MTU-sized frames for any other (netvsp_rsc.go);
// guest sends checked as Windows does (an in-frame 802.1Q tag
// dropped, LSO offsets, MSS and size checked, §2.7). Anything out of order,
// on the wrong channel or malformed is a counted violation
// (bus.Host.Violations), never a crash.
package netvsp
