// Package vmbus is the VMBus layer of vmbusd: GUIDs, device discovery from
// sysfs, the ring buffer, packets, channels and sub-channels.
//
// It owns:
//
//   - GUIDs in canonical, braced (sysfs) and mixed-endian wire form;
//   - device discovery (class_id, device_id, id, monitor_id, numa_node,
//     channels/) under a root directory;
//   - the ring buffer exactly as docs/protocol/vmbus-ring.md §2 describes it: header
//     words, packet descriptor, 8-byte padding and trailer, wrap-around
//     without a double mapping, the never-completely-full rule; OutRing and
//     InRing keep private cursors so a batch costs one index store and one
//     "should signal" answer; every index and descriptor the peer wrote is
//     validated and a violation is a *CorruptError, distinct from the flow
//     control answers ErrRingEmpty and *RingFullError;
//   - packets: inband, completion, transfer-page and GPA-direct;
//   - channels: the request-id table, signalling through the monitor page
//     or the uio irqcontrol write, waiting by polling or by interrupt
//     (unmask, re-check, block), sub-channels watched with inotify;
//   - the kernel's uio_hv_generic semantics per release (Kernel).
//
// It knows nothing of NVSP, RNDIS or hv_sock. The ring code is symmetric:
// the simulated host in package sim attaches to the same rings from the
// other end (ChannelConfig.HostSide), and so does package vmbus/vmbustest,
// which connects a guest and a host channel in memory for unit tests.
package vmbus
