// Package nictap attaches a netvsc NIC to a TAP device: one frame.Pump per
// direction and queue (NIC queue i to TAP queue i mod the TAP's queue
// count; each TAP queue through the NIC's send indirection table), TAP
// read buffers sized for the kernel's 64 KiB super-frames and carved from
// the NIC's GPA pool when it has one, and the TAP's carrier following the
// NIC's link. A NIC opened with netvsc.Config.RSC hands over the TCP
// frames the host coalesced (up to 64 KiB, netvsc.MetaRxCoalesced), and
// the TAP writes each as one GSO super-frame instead of re-coalescing MTU
// frames: open the NIC with RSC when it is to be attached to a TAP with
// offloads (the daemon does). It is glue: tap knows nothing of netvsc
// and netvsc nothing of tap.
package nictap
