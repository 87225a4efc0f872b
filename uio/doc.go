// Package uio opens Linux UIO devices the way vmbusd needs them: it finds
// them in sysfs, maps their memory regions, waits on their interrupt counter,
// switches their interrupts on and off, and maps the per-channel ring files
// of VMBus sub-channels.
//
// It owns:
//
//   - discovery: R/sys/class/uio/uioN and a device's uio/uioN directory,
//     with name, version and maps/mapK/{name,addr,size,offset}
//     (docs/protocol/vmbus-ring.md §1.2); the root R is "/" on a real system and a
//     simulator's directory in tests;
//   - the device node R/dev/uioN, which is either the kernel's character
//     device or the simulated host's SOCK_SEQPACKET socket (docs/uio-contract.md
//     §3); the two are told apart with stat;
//   - mmap of every map (MAP_SHARED; the ones Options.Prefault names
//     mapped in full at open), the 4-byte cumulative interrupt count
//     read (docs/protocol/vmbus-ring.md §1.5), the 4-byte irqcontrol write (§1.4), rescind (§1.9);
//   - sub-channel ring files, channels/<relid>/ring (§1.7).
//
// It knows nothing of VMBus: map names, ring layout and signalling rules
// belong to package vmbus. The package is Linux-only apart from discovery.
package uio
