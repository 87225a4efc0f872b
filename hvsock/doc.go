// Package hvsock is Hyper-V sockets (hv_sock) for vmbusd: byte streams
// between a Linux guest and its Hyper-V host, with net.Conn semantics. It
// owns the hv_sock stream protocol (the pipe-header framing, FIN, the close
// handshake and linger, ring sizing, the send loop), Conn, Listener and
// Dialer, and the mapping between ports and service GUIDs. The wire formats
// it speaks (pipe header, TL connect messages, addressing) are in package
// hvsock/wire, which the simulated host shares. It knows nothing of
// netvsc, and nothing of the simulator (only its tests use sim/).
//
// # Two transports behind one API
//
// On stock Linux kernels hv_sock channels belong to the kernel:
// uio_hv_generic cannot claim them (vmbus_match hands every TLNPI offer to
// the hv_sock driver) and a guest's connect is a VMBus control message only
// the kernel can post (docs/protocol/hvsock.md §2.1). So there are two transports:
//
//   - TransportVMBus runs the protocol in this process over VMBus channels
//     that reach user space through uio (package vmbus): one channel per
//     connection. Host-initiated connections arrive as channel offers under
//     R/sys/bus/vmbus/devices; a guest-initiated Dial sends the 40-byte
//     CHANNELMSG_TL_CONNECT_REQUEST on R/dev/vmbus-tl and takes the channel
//     the host offers in answer, or ECONNREFUSED from its
//     CHANNELMSG_TL_CONNECT_RESULT. R/dev/vmbus-tl is the one
//     simulator-only piece (docs/uio-contract.md §7.2): the stand-in for that kernel-only
//     message. This transport is what runs against vmbusd's simulated host
//     (sim/, `vmbusd sim --hvsock`), and in an environment that hands hv_sock
//     channels and the connect request to user space.
//   - TransportKernel uses AF_VSOCK sockets (golang.org/x/sys/unix) with
//     Hyper-V's rules: the guest binds and listens on VMADDR_CID_ANY and
//     connects to VMADDR_CID_HOST; a port stands for the service GUID with
//     that port in Data1. The kernel's hv_sock then does the protocol. This
//     is what works on any Azure or Hyper-V Linux VM today.
//
// Config.Transport chooses; the default, TransportAuto, takes the VMBus
// transport when R/dev/vmbus-tl exists and the kernel's otherwise. R is
// Config.Root, else $VMBUSD_ROOT, else "/". On a stock kernel R=/ has no
// vmbus-tl, so a program written against this package uses AF_VSOCK there
// and the simulator's channels under a simulated root, unchanged.
//
// # The protocol (VMBus transport; docs/protocol/hvsock.md §1.5 to §1.10)
//
// Data travels as inband packets whose payload starts with the 8-byte
// vmpipe header {type 1, size N}; N is at most Config.ChunkSize (by
// default an eighth of the send ring within Linux's 4088 and the MTU of
// 16 KiB: AutoChunk). A zero-size packet is a FIN. A
// writer always leaves Reserve (72) bytes free so that the FIN fits. A
// Write keeps writing chunks until its data is queued or the ring is full,
// publishes them with one commit (a signal only on empty to non-empty with
// the host's mask clear), and when full sets pending_send_sz and sleeps
// until the host frees that much. A Read delivers a packet across as many
// calls as it takes and publishes the read index once no packet is left
// half-read, signalling the host when its pending_send_sz is crossed. The
// opener chooses the ring sizes (Config.SendRingSize, RecvRingSize: 24 KiB
// to 256 KiB, page-aligned, 208 KiB by default, as the socket buffer
// sizing rule gives a socket with Linux's default buffers); they cannot
// change once connected.
//
// Closing follows the hv_sock close handshake: CloseWrite sends the FIN
// and reading continues; CloseRead is local (the protocol cannot tell the
// host); Close sends the FIN and waits for the host to finish its side —
// the host's FIN and the rescind of the channel, which it sends once both
// directions are done — for at most Config.Linger (8 s, HVS_CLOSE_TIMEOUT),
// discarding what the host still sends, then resets locally. Nothing a
// Write reported as written is lost before the FIN. After a rescind, reads
// drain what the host left in the ring and then return io.EOF; writes fail
// with EPIPE.
//
// # Close semantics (both transports, as on a *net.TCPConn)
//
// CloseRead, CloseWrite and Close never wait for a Read or Write in
// progress; they end it:
//
//   - CloseRead: a Read waiting for data returns io.EOF at once, and so
//     does every later Read (what the host still sends is dropped and
//     counted in ConnStats.Discarded). Writing is unaffected.
//   - CloseWrite: a Write in progress — blocked on a full ring, or still
//     moving data — stops at a packet boundary and returns the bytes it
//     queued with an error wrapping net.ErrClosed; the FIN follows those
//     bytes. A Write called after CloseWrite fails with EPIPE. Reading is
//     unaffected.
//   - Close: a blocked Read and Write return net.ErrClosed at once, and so
//     does every later call. The first Close does the linger; a Close
//     called while it lingers returns its result (nil) at once, and a
//     Close after it returned fails with net.ErrClosed.
//
// On the kernel transport close(2) returns at once and the kernel lingers
// in the background; a Write blocked when CloseWrite is called is woken
// by this package (a vsock socket shut for writing never polls writable),
// with the same results as above.
//
// The host's FIN ends only the host's direction, as a TCP peer's does, and
// Read returns io.EOF after it. The first Write after it succeeds: the
// bytes are queued on the ring. A host that only shut its writing side
// (half-close) reads them, and later Writes succeed too. A host that
// closed entirely has no reader for them: it drops them and ends the
// connection with the rescind, hv_sock's reset (a closed TCP peer answers
// data with RST). From
// the rescind on, Writes fail with EPIPE, as a TCP Write after the peer's
// reset does, and a Write blocked on a full ring when it comes returns
// EPIPE with the count queued.
//
// Errors are *net.OpError wrapping net.ErrClosed, os.ErrDeadlineExceeded,
// syscall errnos (ECONNREFUSED, ETIMEDOUT, EPIPE, EADDRINUSE), a
// *wire.FrameError or a *vmbus.CorruptError when the host breaks the protocol;
// Read returns io.EOF itself. Conn passes golang.org/x/net/nettest's
// TestConn against the simulated host.
package hvsock
