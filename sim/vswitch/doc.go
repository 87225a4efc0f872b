// Package vswitch is the simulated host's vSwitch: the port a synthetic
// NIC of package sim/netvsp is connected to, the ports it can be
// connected to, and the frame-level work the Hyper-V switch port does for
// the guest.
//
// Ports (Port; a NIC is the Uplink): a patch cable to another NIC
// (PatchPorts), a kernel TAP or veth pair in a network namespace (TAP,
// so that real tools reach the guest), a traffic generator and sink
// (Generator), a reflector (Reflector), or a test's own. A port that can
// finish checksums and cut TCP super-frames on its wire implements
// OffloadPort and gets the guest's offloads instead of finished frames;
// in the other direction a port that reads TCP super-frames (the TAP)
// hands them whole to a NIC that takes them (OffloadUplink), which
// coalesces them for a guest with RSC or cuts them (CutSuperFrame).
//
// The frame work (vswitch_frame.go, vswitch_offload.go), which the NetVSP
// applies between the guest and the port: 802.1Q tags moved between the
// frame and the VLAN per-packet info, the packet filter, the flow tuple
// the guest's RSS parameters hash (Toeplitz), receive checksum
// verification, transmit checksum offload and LSOv2 segmentation. The
// rules it enforces (docs/protocol/netvsc.md §2.7, §3.4, §7.2): a guest
// frame with an in-frame tag is dropped; a large send's header offsets,
// MSS and size are checked before any port sees it, whether or not the
// port takes the offload; a frame it cannot parse is "not IP", never a
// panic.
package vswitch
