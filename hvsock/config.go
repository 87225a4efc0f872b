package hvsock

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Transport selects how hv_sock connections are carried.
type Transport int

const (
	// TransportAuto picks TransportVMBus when the root has the hv_sock
	// connect node R/dev/vmbus-tl (the simulated host, or an environment
	// that hands hv_sock channels to user space), else TransportKernel.
	TransportAuto Transport = iota
	// TransportVMBus runs the hv_sock protocol in this process over VMBus
	// channels opened through uio (package vmbus).
	TransportVMBus
	// TransportKernel uses the kernel's AF_VSOCK sockets, which Linux's
	// hv_sock module carries over VMBus: what every stock kernel offers.
	TransportKernel
)

func (t Transport) String() string {
	switch t {
	case TransportAuto:
		return "auto"
	case TransportVMBus:
		return "vmbus"
	case TransportKernel:
		return "kernel"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// Ring sizes, each including the 4 KiB ring header page
// (docs/protocol/hvsock.md §1.4).
//
// The opener sizes the rings from its socket buffer sizes, rounded up to a
// page and clamped to MinRingSize..MaxRingSize (hyperv_transport.c since
// the SO_SNDBUF/SO_RCVBUF patch, seed 002 (b) in docs/seeds.md §3). A
// Config's ring sizes play the part of those buffer sizes, and a Config
// that leaves them 0 gets what the rule gives a socket whose buffers were
// never set: Linux's default socket buffer, DefaultSocketBuffer, so
// DefaultRingSize. Linux's own hv_sock pins an untouched socket at
// MinRingSize instead, a kernel's choice for physically contiguous ring
// memory, which user space does not need; the seed measured 64 KiB writes
// 2.5 to 4 times faster with the larger rings, and the memory (two rings
// per connection) is a few hundred KiB. Set MinRingSize for a host older
// than VMBus 5.0, which takes no other size.
const (
	// MinRingSize is RINGBUFFER_HVS_SND_SIZE and RINGBUFFER_HVS_RCV_SIZE:
	// six pages, a 20 KiB data area.
	MinRingSize = 6 * 4096
	// MaxRingSize is RINGBUFFER_HVS_MAX_SIZE, the most the transport
	// opens: 64 pages.
	MaxRingSize = 64 * 4096
	// DefaultSocketBuffer is Linux's default socket buffer size, the
	// net.core.wmem_default and rmem_default a socket starts with
	// (SK_WMEM_MAX, 212992 bytes on 64-bit kernels).
	DefaultSocketBuffer = 212992
	// DefaultRingSize is the ring DefaultSocketBuffer gives: 52 pages,
	// a 204 KiB data area.
	DefaultRingSize = (DefaultSocketBuffer + 4095) &^ 4095
)

// DefaultLinger is HVS_CLOSE_TIMEOUT: how long Close waits for the host to
// finish the connection after our FIN.
const DefaultLinger = 8 * time.Second

// DefaultConnectTimeout is VSOCK_DEFAULT_CONNECT_TIMEOUT, the time a
// connect waits for the host's offer.
const DefaultConnectTimeout = 2 * time.Second

// DefaultBacklog bounds the connections a Listener holds that Accept has
// not taken yet; offers beyond it are ignored, as Linux does when the
// accept queue is full.
const DefaultBacklog = 64

// Config configures connections and listeners. The zero value is the
// default: automatic transport, root from VMBUSD_ROOT or "/", 208 KiB rings,
// chunks sized to the send ring (ChunkSize), an 8 s linger. A Config is read, never
// modified, by the functions it is passed to.
type Config struct {
	Transport Transport
	// Root is the directory standing for "/" where the VMBus transport
	// finds sysfs and the device nodes; "" means $VMBUSD_ROOT, else "/".
	Root string
	// SendRingSize and RecvRingSize are the guest-to-host and host-to-guest
	// ring sizes in bytes, header page included, chosen before the
	// connection exists (the rings cannot be resized). They are rounded
	// up to 4 KiB and clamped to [MinRingSize, MaxRingSize]; 0 means
	// DefaultRingSize. A listener's values apply to the connections it
	// accepts. On the kernel transport they become SO_SNDBUF and SO_RCVBUF
	// (halved, as Linux doubles them), and 0 leaves the kernel's choice.
	SendRingSize, RecvRingSize int
	// ChunkSize is the most payload one packet carries: 1..wire.MTU. 0
	// sizes it to the send ring: an eighth of its data area, at least
	// wire.DefaultChunk (Linux's 4088, what a 24 KiB ring gets) and at
	// most wire.MTU (the 16 KiB the protocol allows, what the default
	// and larger rings get). Bigger chunks mean fewer packets but let the
	// host start on the data later. VMBus transport only.
	ChunkSize int
	// Linger bounds how long Close waits for the host to finish the
	// connection (its FIN and rescind) after ours; then the connection is
	// reset locally. 0 means DefaultLinger; negative means no wait.
	Linger time.Duration
	// Clock times the Linger, a Dialer's RetryWait and its Timeout on the
	// VMBus transport (nil: the real clock), so that a test can end them
	// without waiting. Read and Write deadlines stay wall-clock times, as
	// does everything on the kernel transport but RetryWait.
	Clock clock.Clock
	// Backlog bounds a Listener's unaccepted connections (DefaultBacklog).
	Backlog int
	// Mode is how VMBus channels wait for the host (vmbus.WaitInterrupt).
	Mode vmbus.WaitMode
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
}

// root returns the root directory R.
func (c *Config) root() string {
	if c.Root != "" {
		return c.Root
	}
	if r := os.Getenv("VMBUSD_ROOT"); r != "" {
		return r
	}
	return "/"
}

// transport resolves TransportAuto.
func (c *Config) transport() Transport {
	if c.Transport != TransportAuto {
		return c.Transport
	}
	if st, err := os.Stat(filepath.Join(c.root(), wire.ConnectNode)); err == nil && st.Mode().Type() == os.ModeSocket {
		return TransportVMBus
	}
	return TransportKernel
}

// ResolvedTransport returns the transport c selects in this environment.
func (c *Config) ResolvedTransport() Transport { return c.transport() }

func (c *Config) check() error {
	if c.ChunkSize < 0 || c.ChunkSize > wire.MTU {
		return fmt.Errorf("hvsock: chunk size %d: want 1..%d, or 0 to size it to the send ring", c.ChunkSize, wire.MTU)
	}
	if c.SendRingSize < 0 || c.RecvRingSize < 0 || c.Backlog < 0 {
		return fmt.Errorf("hvsock: negative ring size or backlog")
	}
	switch c.Transport {
	case TransportAuto, TransportVMBus, TransportKernel:
	default:
		return fmt.Errorf("hvsock: unknown transport %d", int(c.Transport))
	}
	return nil
}

// chunk returns the payload per packet on a send ring with a data area
// of ringData bytes. Every packet costs the writer a descriptor, a pipe
// header, a trailer and index arithmetic, and the reader a validation and
// a decode, so 64 KiB writes are cheaper in MTU packets than in Linux's
// 4 KiB ones; an eighth of the ring keeps eight packets in flight, so the
// host can still free space while the guest writes
// (docs/protocol/hvsock.md §1.6: payloads up to 16384 bytes).
func (c *Config) chunk(ringData int) int {
	if c.ChunkSize != 0 {
		return c.ChunkSize
	}
	return AutoChunk(ringData)
}

// AutoChunk is the payload per packet a Config with ChunkSize 0 uses on a
// send ring whose data area (the ring less its header page) is ringData
// bytes: an eighth of it, rounded down to 8, within
// [wire.DefaultChunk, wire.MTU].
func AutoChunk(ringData int) int {
	return min(max(ringData/8&^7, wire.DefaultChunk), wire.MTU)
}

func (c *Config) linger() time.Duration {
	if c.Linger == 0 {
		return DefaultLinger
	}
	return max(c.Linger, 0)
}

func (c *Config) backlog() int {
	if c.Backlog == 0 {
		return DefaultBacklog
	}
	return c.Backlog
}

func (c *Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// ClampRingSize applies hyperv_transport.c's rule to a requested ring size
// (header page included): round up to 4 KiB, clamp to [MinRingSize,
// MaxRingSize]; 0 (or less) gives DefaultRingSize.
func ClampRingSize(n int) int {
	if n <= 0 {
		return DefaultRingSize
	}
	return vmbus.ClampHvSockRing(uint32(min(n, MaxRingSize)))
}

// RingSizes returns the send and receive ring sizes, header page
// included, of the connections c makes and accepts on the VMBus transport.
func (c *Config) RingSizes() (send, recv int) {
	return ClampRingSize(c.SendRingSize), ClampRingSize(c.RecvRingSize)
}
