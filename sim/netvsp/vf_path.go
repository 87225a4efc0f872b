package netvsp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/sim/vswitch"
)

// The VF path on the host's side: the vSwitch steering a guest's unicast
// to the VF stand-in's host end, the exception traffic that stays
// synthetic, and the packet socket on the host end that carries both
// directions (docs/accelerated-networking.md §4).

// deliver is the vSwitch's steering for a NIC with a VF: while the guest
// is switched to the VF and it is present, unicast frames for the guest go
// out of the host end; the rest (and everything otherwise) goes to the
// NetVSP. It returns how many frames were queued or sent.
// steering reports whether the host steers the guest's frames to the VF
// now (a super-frame then goes there cut, never coalesced).
func (v *VF) steering(cfg *sessCfg) bool { return v.steer.Load() != nil && cfg.dataPathVF }

func (v *VF) deliver(ss *nicSession, frames [][]byte) int {
	sock := v.steer.Load()
	cfg := ss.cfg.Load()
	if sock == nil || !cfg.dataPathVF {
		return ss.deliver(frames)
	}
	queued, run := 0, -1
	for i, f := range frames {
		if vfException(f, &ss.n.mac, cfg.mtu) {
			if run < 0 {
				run = i
			}
			v.st.exceptions.Add(1)
			continue
		}
		if run >= 0 {
			queued += ss.deliver(frames[run:i])
			run = -1
		}
		if err := sock.write(f); err != nil {
			v.st.rxErrors.Add(1)
			continue
		}
		v.st.rxPackets.Add(1)
		v.st.rxBytes.Add(uint64(len(f)))
		queued++
	}
	if run >= 0 {
		queued += ss.deliver(frames[run:])
	}
	return queued
}

// vfException reports whether a frame stays on the synthetic path even
// while the guest is switched to the VF: broadcast and multicast, frames
// for another MAC (the packet filter decides there), tagged frames (the
// synthetic path strips the tag into its per-packet info), frames above
// the MTU, and a TCP SYN, the first packet of a new flow (Azure's flow
// table sends a packet it has no flow for to the software switch).
func vfException(f []byte, mac *[6]byte, mtu int) bool {
	if len(f) < vswitch.EthHeaderLen || f[0]&1 != 0 || [6]byte(f[0:6]) != *mac || len(f) > mtu {
		return true
	}
	if _, tagged := vswitch.FrameTagged(f); tagged {
		return true
	}
	fl := vswitch.ParseFlow(f)
	return fl.IP && fl.L4 == vswitch.IPProtoTCP && fl.L4Off+14 <= len(f) && f[fl.L4Off+13]&0x02 != 0
}

// vfSocket is an AF_PACKET socket on the host end: it sees what arrives
// from the guest end (not what it sends) and sends frames out of it.
type vfSocket struct {
	f      *os.File
	closed atomic.Bool
	done   chan struct{} // closed when the reader has stopped
}

func openVFSocket(ifindex int, name string) (*vfSocket, error) {
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("sim: vf: packet socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sim: vf: packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sim: vf: bind %s: %w", name, err)
	}
	return &vfSocket{f: os.NewFile(uintptr(fd), "packet:"+name)}, nil
}

// start runs the reader: what the guest sends on the VF goes to the NIC's
// port, until close.
func (s *vfSocket) start(v *VF) {
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		buf := make([]byte, 65536)
		// A VF frame carries no per-packet info: nothing for an
		// OffloadPort to finish.
		batch := txBatch{frames: make([][]byte, 1)}
		for {
			k, err := s.f.Read(buf)
			if err != nil {
				if s.closed.Load() || errors.Is(err, os.ErrClosed) {
					return
				}
				// ENETDOWN: the socket reports (once) that its interface
				// was down when bound or went down since; it keeps
				// working when the interface comes back.
				continue
			}
			if k < vswitch.EthHeaderLen {
				continue
			}
			v.st.txPackets.Add(1)
			v.st.txBytes.Add(uint64(k))
			batch.frames = batch.frames[:1]
			batch.frames[0] = buf[:k]
			v.n.transmitBatch(&batch)
		}
	}()
}

func (s *vfSocket) write(f []byte) error {
	_, err := s.f.Write(f)
	return err
}

// close closes the socket and waits for its reader.
func (s *vfSocket) close() {
	if s.closed.CompareAndSwap(false, true) {
		s.f.Close()
	}
	if s.done != nil {
		<-s.done
	}
}

// htons converts a 16-bit value to network byte order (a socket's protocol).
func htons(v uint16) uint16 {
	var b [2]byte
	be.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
