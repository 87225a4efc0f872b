// Package tap connects user-space frame ports to the kernel through a
// multi-queue TAP interface created with vishvananda/netlink: the
// everyday way to use vmbusd's netvsc NIC with ordinary tools (ip, ping,
// TCP sockets). It owns the TAP device (creation, MAC, MTU, carrier,
// network namespace, deletion, offloads); each of its queues is a
// frame.Source and a frame.Sink, so frame.Pump joins it to any other port.
// It knows nothing of VMBus or netvsc; package nictap attaches a netvsc NIC
// to it:
//
//	NIC queue i --RxBurst--> frame.Pump --GRO, writev--> TAP queue i  --> kernel
//	kernel --> TAP queue i --read batch--> frame.Pump --TxBurst--> NIC queue
//	          (64 KiB super-frames)                 (send indirection table;
//	                                                 LSO to the host)
//
// Offloads are on by default (Config.NoOffloads turns them off): the TAP
// carries a virtio-net header and TUNSETOFFLOAD lets the kernel hand over
// TCP super-frames of up to 64 KiB (and UDP ones from Linux 6.2) with
// partial checksums, one read per 64 KiB. A TCP super-frame goes to the
// NIC as a large send (frame.MetaTxLSO: the host cuts it, with LSOv2; or
// the NIC in software when the host has no LSO); a partial checksum
// becomes the NIC's checksum offload when the host took it, or is finished
// here; a UDP super-frame is cut here (LSOv2 is TCP only). The other way,
// the in-order TCP segments of a flow in a burst from the NIC are
// coalesced into one super-frame (gro.go), and checksums the host verified
// reach the kernel as verified. A frame the NIC already coalesced (its
// receive segment coalescing: Meta.MSS set with a verified checksum) is
// written as one GSO super-frame with that MSS; a TAP without a
// virtio-net header gets it cut into MSS-sized frames.
package tap
