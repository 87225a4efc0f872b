// Package sim is vmbusd's simulated Hyper-V host, together with the parts
// of the guest's kernel (uio_hv_generic, the vmbus driver) that user space
// sees. Every test, benchmark and demo runs against it; it follows the real
// host's rules as the references describe them, so that passing against it
// means working on Azure.
//
// It owns:
//
//   - a sysfs tree laid out byte for byte like the real one under a root
//     directory R (sysfs.go), and R/proc/sys/kernel/osrelease for the
//     kernel profile (profile.go: legacy, 6.10, 6.16, 6.18);
//   - the uio contract of docs/uio-contract.md: R/dev/uioN is a SOCK_SEQPACKET socket
//     that hands the guest one memfd per map and carries the 4-byte
//     interrupt counts and irqcontrol writes (devnode.go);
//   - device offers and rescinds, sessions (one per open, with fresh
//     rings), asynchronous sub-channel offers (device.go, session.go);
//   - the host end of every channel, running package vmbus's ring code from
//     the other side: masked while draining, re-checked after unmasking,
//     interrupts only on empty to non-empty with the guest's mask clear,
//     pending_send_sz honoured, the monitor page scanned at the latency the
//     guest sets (host.go, channel.go);
//   - the services behind devices: the test class's echo (echo.go), the
//     NetVSP and vSwitch, hv_sock endpoints;
//   - fault injection for every check a careful guest makes (fault.go).
//
// It knows nothing of the guest's internals: guest packages never import
// it outside tests.
package sim
