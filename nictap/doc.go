// Package nictap attaches a netvsc NIC to a TAP device: one frame.Pump per
// direction and queue (NIC queue i to TAP queue i mod the TAP's queue
// count; each TAP queue through the NIC's send indirection table), TAP
// read buffers sized for the kernel's 64 KiB super-frames and carved from
// the NIC's GPA pool when it has one, and the TAP's carrier following the
// NIC's link. It is glue: tap knows nothing of netvsc and netvsc nothing
// of tap.
package nictap
