// Package afxdp owns the AF_XDP data path on a kernel netdev: an XDP
// program that redirects every RX queue to the socket registered for it in
// an XSKMAP, and one AF_XDP socket (XSK) per queue with its UMEM and its
// fill, completion, RX and TX rings. It is how vmbusd drives an
// accelerated-networking VF (mlx5, MANA) from Go, without cgo and without
// a compiler: the program is assembled in place with cilium/ebpf's asm
// package, and the socket layer is written here over golang.org/x/sys/unix.
//
// It knows nothing of VMBus, NVSP or the synthetic NIC: the NIC layer pairs
// a VF with its synthetic NIC and decides when traffic uses it.
//
// Shape:
//
//	Port   = Program (XDP, XSKMAP, BPF link on the netdev) + []*Socket
//	Socket = fd + UMEM part + 4 mmap'd rings; Recv/Send copy frames
//	         between caller buffers and UMEM frames, in batches
//
// Modes. The program is attached natively (in the driver) when the driver
// allows it, else generically (after the skb is built); sockets bind
// zero-copy when the driver offers it, else in copy mode. Both are probed
// and reported (Port.AttachMode, Socket.Mode). XDP_USE_NEED_WAKEUP is on by
// default, so the kernel is kicked only when it asks; busy polling and a
// UMEM shared by all queues are options (Config).
//
// The kernel is a peer whose ring entries are checked like a host's: every
// producer and consumer index it writes, and every descriptor address and
// length, is validated against the socket's own frames and the frames'
// ownership before use. A violation is a *CorruptError that kills that
// socket (counted, sticky), never a panic.
//
// A removed netdev (hot-unplugged VF, deleted veth) is reported as
// ErrDeviceGone: from the netlink RTM_DELLINK that Wait listens for, and
// from the ENXIO the kernel returns to the wake-up calls of an unbound
// socket (poll on such a socket reports nothing).
//
// The hot path (Recv, Send, Wait with frames ready) makes no allocation
// and at most one system call per batch; see README.md for the measured
// rates and the comparison with DPDK's net_af_xdp.
package afxdp
