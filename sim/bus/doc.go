// Package bus is the core of the simulated Hyper-V host: the VMBus itself
// and the parts of the guest's kernel (uio_hv_generic, the vmbus driver,
// the driver model) that user space sees. The services behind devices
// (sim/netvsp, sim/hvsockhost) are built on it; package sim assembles them.
//
// It models:
//
//   - the sysfs tree under a root directory R, byte for byte like the real
//     one (sysfs.go; docs/uio-contract.md §2), and R/proc/sys/kernel/osrelease
//     for the kernel profile (profile.go; docs/uio-contract.md §1.2);
//   - the device node R/dev/uioN, a SOCK_SEQPACKET socket that hands the
//     guest one memfd per map and carries the interrupt counts and
//     irqcontrol writes (devnode.go; docs/uio-contract.md §3);
//   - the driver model: bind, unbind, driver_override, new_id, the kernel
//     NIC's netdev and routes (drivers*.go; docs/uio-contract.md §2.4);
//   - device offers and rescinds, sessions (one per open, with fresh
//     rings), asynchronous sub-channel offers and their ring files
//     (device.go, session.go; docs/uio-contract.md §2.6, §5);
//   - the host end of every channel, running package vmbus's ring code from
//     the other side (host.go, channel.go);
//   - guest memory for GPA-direct reads, R/dev/guestmem or the guest
//     process's own (guestmem.go; docs/uio-contract.md §6);
//   - the test class's echo service (echo.go) and fault injection for every
//     check a careful guest makes on a ring (fault.go).
//
// The host rules it enforces (docs/uio-contract.md §4,
// docs/protocol/vmbus-ring.md §2.4): the host masks the guest-to-host ring
// while draining and re-checks after unmasking; it interrupts the guest
// only on empty to non-empty with the guest's mask clear; it honours
// pending_send_sz; it scans the monitor page at the latency the guest
// sets, while a monitored channel's host end waits for a signal
// (Channel.BeginWait); one connection per device node, and a broken rule of the uio
// contract is a counted violation (docs/uio-contract.md §3.6), never a
// crash.
package bus
