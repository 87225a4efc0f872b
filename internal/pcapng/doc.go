// Package pcapng writes pcapng capture streams with what a user-space NIC's
// capture needs: one interface per NIC, and per packet its direction
// (epb_flags) and queue (epb_queue), which gopacket's pcapgo writer cannot
// express (its enhanced packet blocks carry no options).
//
// Format: the pcapng specification (draft-ietf-opsawg-pcapng); blocks are
// little-endian, 4-byte aligned.
package pcapng
