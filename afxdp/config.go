package afxdp

import (
	"fmt"
	"math/bits"
	"time"
)

// AttachMode is how the XDP program hooks the netdev's receive path.
type AttachMode uint8

const (
	// AttachAuto tries the driver's native hook and falls back to the
	// generic (skb) hook.
	AttachAuto AttachMode = iota
	// AttachNative runs the program in the driver, before any skb exists.
	AttachNative
	// AttachGeneric runs it after the kernel built an skb: any driver,
	// slower.
	AttachGeneric
)

func (m AttachMode) String() string {
	switch m {
	case AttachAuto:
		return "auto"
	case AttachNative:
		return "native"
	case AttachGeneric:
		return "generic"
	}
	return fmt.Sprintf("attach(%d)", uint8(m))
}

// BindMode is how a socket's frames reach the UMEM.
type BindMode uint8

const (
	// BindAuto asks for zero-copy and falls back to copy mode when the
	// driver refuses it (EOPNOTSUPP).
	BindAuto BindMode = iota
	// BindZeroCopy: the NIC DMAs straight into the UMEM (mlx5, ice, …).
	BindZeroCopy
	// BindCopy: the kernel copies each frame between its buffers and
	// the UMEM (any driver with XDP redirect: MANA, veth, …).
	BindCopy
)

func (m BindMode) String() string {
	switch m {
	case BindAuto:
		return "auto"
	case BindZeroCopy:
		return "zero-copy"
	case BindCopy:
		return "copy"
	}
	return fmt.Sprintf("bind(%d)", uint8(m))
}

// BusyPoll asks the kernel to run the device's NAPI poll from the socket's
// own system calls instead of from interrupts (SO_PREFER_BUSY_POLL,
// SO_BUSY_POLL, SO_BUSY_POLL_BUDGET). The zero value leaves it off.
type BusyPoll struct {
	Timeout time.Duration // SO_BUSY_POLL, in µs granularity; 0 = off
	Budget  int           // SO_BUSY_POLL_BUDGET; 0 = the kernel's default
}

// Config sets up a Port or a Socket. The zero value is ready to use.
type Config struct {
	// Queues lists the RX queue ids to open a socket on. Empty: every RX
	// queue the netdev has (ethtool channels).
	Queues []int
	// FrameSize is the UMEM frame size: 2048 (default) or 4096. A
	// received frame carries at most FrameSize-256-Headroom bytes.
	FrameSize int
	// Headroom is reserved at the start of every frame (UMEM headroom).
	Headroom int
	// RingSize is the number of entries of the RX, TX and completion
	// rings, a power of two (default 2048). Each socket gets RingSize
	// frames to receive into and RingSize to send from, and a fill ring
	// of twice RingSize.
	RingSize int
	// Attach and Bind choose the XDP hook and the copy mode.
	Attach AttachMode
	Bind   BindMode
	// NoNeedWakeup binds without XDP_USE_NEED_WAKEUP: every Send then
	// makes a system call, and the driver polls the fill ring by itself.
	NoNeedWakeup bool
	// BusyPoll: see BusyPoll.
	BusyPoll BusyPoll
	// SharedUMEM puts every socket of a Port on one UMEM registration
	// (XDP_SHARED_UMEM), each with its own part of the frames and its own
	// fill and completion rings. Needs Linux 5.10 or later.
	SharedUMEM bool
}

const (
	defaultFrameSize = 2048
	defaultRingSize  = 2048
	// xdpPacketHeadroom is XDP_PACKET_HEADROOM: the kernel puts received
	// data this far into a frame (after the UMEM headroom).
	xdpPacketHeadroom = 256
)

// Validate reports a setting Open would refuse, without touching any
// netdev: a caller can check a configuration before it needs it.
func (c Config) Validate() error {
	if c.Attach > AttachGeneric {
		return fmt.Errorf("afxdp: unknown attach mode %d", c.Attach)
	}
	if c.Bind > BindCopy {
		return fmt.Errorf("afxdp: unknown bind mode %d", c.Bind)
	}
	for _, q := range c.Queues {
		if q < 0 {
			return fmt.Errorf("afxdp: queue id %d is negative", q)
		}
	}
	_, err := c.withDefaults()
	return err
}

// withDefaults fills in zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.FrameSize == 0 {
		c.FrameSize = defaultFrameSize
	}
	if c.RingSize == 0 {
		c.RingSize = defaultRingSize
	}
	if c.FrameSize != 2048 && c.FrameSize != 4096 {
		return c, fmt.Errorf("afxdp: frame size %d: want 2048 or 4096", c.FrameSize)
	}
	if c.RingSize < 64 || c.RingSize > 1<<15 || bits.OnesCount(uint(c.RingSize)) != 1 {
		return c, fmt.Errorf("afxdp: ring size %d: want a power of two in 64..32768", c.RingSize)
	}
	if c.Headroom < 0 || c.Headroom > c.FrameSize-xdpPacketHeadroom-128 {
		return c, fmt.Errorf("afxdp: headroom %d too large for %d-byte frames", c.Headroom, c.FrameSize)
	}
	if c.BusyPoll.Timeout < 0 || c.BusyPoll.Budget < 0 {
		return c, fmt.Errorf("afxdp: negative busy-poll setting")
	}
	return c, nil
}
