// Package gso cuts TCP and UDP super-frames (the kernel's generic
// segmentation offload, a NIC's large send) into smaller frames, and does
// the header arithmetic that goes with it: IP lengths and ids, TCP
// sequence numbers and flags, UDP lengths, and checksums complete or left
// partial (the pseudo-header sum in the checksum field, for a device that
// finishes them). The guest's transmit path and its TAP attachment use it;
// it works on plain Ethernet frames (no 802.1Q tag) and allocates nothing.
package gso
