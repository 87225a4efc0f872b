package netvsp

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/vswitch"
)

// offloadCapture is a capturePort that takes offloads and records them.
type offloadCapture struct {
	*capturePort
	takes bool
	offs  []vswitch.FrameOffload
}

func (c *offloadCapture) Offloads() bool { return c.takes }

func (c *offloadCapture) TransmitOffload(frames [][]byte, offs []vswitch.FrameOffload) {
	c.mu.Lock()
	c.offs = append(c.offs, offs...)
	c.mu.Unlock()
	c.Transmit(frames)
}

func (c *offloadCapture) offloads() []vswitch.FrameOffload {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.offs)
}

// finish completes a frame's partial checksum as the port's wire would.
func finish(f []byte, o vswitch.FrameOffload) []byte {
	f = bytes.Clone(f)
	if o.CsumStart != 0 {
		at := int(o.CsumStart + o.CsumOffset)
		binary.BigEndian.PutUint16(f[at:], ^csum.Fold(csum.Add(0, f[o.CsumStart:])))
	}
	return f
}

func enableLSO(t testing.TB, g *tguest) {
	t.Helper()
	p := rndis.OffloadParameters{Header: rndis.OffloadParametersHeader(g.version), LSOv2IPv4: rndis.NDISOffloadParametersEnabled, LSOv2IPv6: rndis.NDISOffloadParametersEnabled,
		TCPIPv4Checksum: rndis.NDISOffloadParametersTxRxEnabled, TCPIPv6Checksum: rndis.NDISOffloadParametersTxRxEnabled}
	if st := g.set(rndis.OIDTCPOffloadParameters, p.Marshal(nil)); st != rndis.StatusSuccess {
		t.Fatalf("offload parameters: %v", st)
	}
}

// TestOffloadPortTakesLargeSendsWhole: a port that takes offloads gets a
// guest's large send as one frame (IP length filled in where Linux left
// it 0, IPv4 header checksum done, the TCP checksum left partial) with
// its MSS, and a checksum request as a partial checksum; the host's
// checks still apply, and it counts the segments the wire will carry.
func TestOffloadPortTakesLargeSendsWhole(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	port := &offloadCapture{capturePort: newCapturePort(), takes: true}
	if err := g.nic.Attach(port); err != nil {
		t.Fatal(err)
	}
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketFilterDefault)
	enableLSO(t, g)
	sent := 0
	for _, v6 := range []bool{false, true} {
		f := tcpFrame(v6, 5000)
		l4 := 34
		if v6 {
			l4 = 54
		} else {
			f[16], f[17] = 0, 0 // Linux leaves a large send's IP length 0
		}
		var info rndis.PacketInfo
		info.SetLSO(rndis.NewLSOv2(1400, l4, v6))
		if st := g.sendStatus(0, g.sendGPA(0, nvsp.RMCData, gpaPage, rndisPacket(f, &info))); st != nvsp.StatusSuccess {
			t.Fatalf("LSO send: %v", st)
		}
		sent++
		got := port.wait(t, sent)[sent-1]
		o := port.offloads()[sent-1]
		if o != (vswitch.FrameOffload{CsumStart: uint16(l4), CsumOffset: 16, MSS: 1400, IPv6: v6}) {
			t.Fatalf("v6 %v: offload %+v", v6, o)
		}
		if len(got) != len(f) || vswitch.RxChecksum(finish(got, o))&(rndis.RxChecksumTCPFailed|rndis.RxChecksumIPFailed) != 0 {
			t.Fatalf("v6 %v: super-frame of %d bytes, checksums %#x after the wire's", v6, len(got), vswitch.RxChecksum(finish(got, o)))
		}
		if !bytes.Equal(got[l4+20:], f[l4+20:]) {
			t.Fatalf("v6 %v: payload changed", v6)
		}
		if got := o.Segments(got); got != 4 {
			t.Errorf("v6 %v: %d segments, want 4", v6, got)
		}
	}
	if st := g.nic.Stats(); st.TxPackets != 8 {
		t.Errorf("host counted %d packets, want the 8 segments", st.TxPackets)
	}
	// A checksum request: partial, the IPv4 header checksum done.
	f := tcpFrame(false, 300)
	var info rndis.PacketInfo
	info.SetChecksum(uint32(rndis.NewTxChecksum(rndis.TxChecksumIPv4|rndis.TxChecksumIPHeader|rndis.TxChecksumTCP, 34)))
	g.sendStatus(0, g.sendRNDIS(0, nvsp.RMCData, rndisPacket(f, &info)))
	got := port.wait(t, 3)[2]
	o := port.offloads()[2]
	if o != (vswitch.FrameOffload{CsumStart: 34, CsumOffset: 16}) || vswitch.RxChecksum(finish(got, o)) != rndis.RxChecksumIPOK|rndis.RxChecksumTCPOK {
		t.Errorf("checksum request: offload %+v, checksums %#x", o, vswitch.RxChecksum(finish(got, o)))
	}
	// A batch of frames with nothing to do goes through Transmit.
	g.sendStatus(0, g.sendRNDIS(0, nvsp.RMCData, rndisPacket(udpFrame([6]byte{2, 0, 0, 0, 0, 9}, [6]byte{2, 0, 0, 0, 0, 8}, 2000, 100), nil)))
	port.wait(t, 4)
	if n := len(port.offloads()); n != 3 {
		t.Errorf("%d frames through TransmitOffload, want 3", n)
	}
	g.noViolations()
}

// TestPortWithoutOffloadsGetsSegments: the same large send (IP length 0,
// as Linux sends it) to a port that takes no offloads arrives cut into
// valid segments.
func TestPortWithoutOffloadsGetsSegments(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	port := &offloadCapture{capturePort: newCapturePort(), takes: false}
	g.nic.Attach(port)
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketFilterDefault)
	enableLSO(t, g)
	f := tcpFrame(false, 5000)
	f[16], f[17] = 0, 0
	var info rndis.PacketInfo
	info.SetLSO(rndis.NewLSOv2(1400, 34, false))
	if st := g.sendStatus(0, g.sendGPA(0, nvsp.RMCData, gpaPage, rndisPacket(f, &info))); st != nvsp.StatusSuccess {
		t.Fatalf("LSO send: %v", st)
	}
	var payload []byte
	for i, s := range port.wait(t, 4) {
		if vswitch.RxChecksum(s) != rndis.RxChecksumIPOK|rndis.RxChecksumTCPOK {
			t.Fatalf("segment %d: checksums %#x", i, vswitch.RxChecksum(s))
		}
		payload = append(payload, s[54:]...)
	}
	if !bytes.Equal(payload, f[54:]) || len(port.offloads()) != 0 {
		t.Fatalf("payload not reassembled, or offloads handed over (%d)", len(port.offloads()))
	}
	g.noViolations()
}
