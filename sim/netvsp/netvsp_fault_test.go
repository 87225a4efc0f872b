package netvsp

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/vmbus"
)

// readyGuest is a guest through the handshake with the packet filter set.
func readyGuest(t *testing.T, cfg NICConfig) *tguest {
	g := newTGuest(t, tguestOpts{nic: cfg})
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketTypePromiscuous)
	return g
}

// oneFrame makes the host send one data transfer-page packet and returns
// it raw (any NVSP type).
func (g *tguest) oneFrame() gpkt {
	g.nic.Deliver([][]byte{udpFrame([6]byte(g.nic.MAC()), [6]byte{2}, 1234, 64)})
	return g.next(0, func(p *gpkt) bool { return p.typ == vmbus.PacketTransferPage })
}

// firstMessage returns the bytes of a transfer-page packet's first range
// (clamped to the buffer) and the range.
func (g *tguest) firstMessage(p *gpkt) ([]byte, xferRange) {
	_, rs := p.xfer()
	r := rs[0]
	end := min(uint64(r.offset)+uint64(r.count), uint64(len(g.recv)))
	return slices.Clone(g.recv[min(uint64(r.offset), end):end]), r
}

func wantKind(err error, k protoerr.Kind) error {
	pe, ok := protoerr.As(err)
	if !ok || pe.Kind != k {
		return fmt.Errorf("got %v, want a %v error", err, k)
	}
	return nil
}

func TestNICFaultsTripTheGuestChecks(t *testing.T) {
	tests := map[NICFault]func(t *testing.T) error{
		NICFaultXferPageSet: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultXferPageSet, true)
			p := g.oneFrame()
			if set, _ := p.xfer(); set == nvsp.RecvBufID {
				return fmt.Errorf("set id %#x", set)
			}
			return nil
		},
		NICFaultRangeOutsideBuffer: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultRangeOutsideBuffer, true)
			p := g.oneFrame()
			_, rs := p.xfer()
			if uint64(rs[0].offset)+uint64(rs[0].count) <= uint64(len(g.recv)) {
				return fmt.Errorf("range %+v inside %d", rs[0], len(g.recv))
			}
			return nil
		},
		NICFaultSectionIndex: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultSectionIndex, true)
			p := g.oneFrame()
			if p.tid != uint64(g.subCount) {
				return fmt.Errorf("tid %d, count %d", p.tid, g.subCount)
			}
			g.ack(&p) // the careful guest's completion gives the run back
			g.request(nvsp.Init{MinVersion: 1, MaxVersion: 1}.Marshal(nil))
			if g.violations("unknown receive transaction") != 0 {
				return fmt.Errorf("completion of the faulted tid counted as the guest's violation")
			}
			return nil
		},
		NICFaultDuplicateTID: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultDuplicateTID, true)
			a := g.oneFrame()
			b := g.next(0, func(p *gpkt) bool { return p.typ == vmbus.PacketTransferPage })
			if a.tid != b.tid {
				return fmt.Errorf("tids %d, %d", a.tid, b.tid)
			}
			return nil
		},
		NICFaultNVSPType: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultNVSPType, true)
			p := g.oneFrame()
			var m nvsp.RNDISPacket
			return wantKind(m.Unmarshal(p.payload()), protoerr.KindType)
		},
		NICFaultRNDISLength: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultRNDISLength, true)
			p := g.oneFrame()
			msg, _ := g.firstMessage(&p)
			_, err := rndis.ParsePacket(msg)
			return wantKind(err, protoerr.KindLength)
		},
		NICFaultRNDISOffset: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultRNDISOffset, true)
			p := g.oneFrame()
			msg, _ := g.firstMessage(&p)
			_, err := rndis.ParsePacket(msg)
			return wantKind(err, protoerr.KindRange)
		},
		NICFaultRNDISDataLength: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultRNDISDataLength, true)
			p := g.oneFrame()
			msg, _ := g.firstMessage(&p)
			_, err := rndis.ParsePacket(msg)
			return wantKind(err, protoerr.KindDataLength)
		},
		NICFaultBadPPI: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultBadPPI, true)
			p := g.oneFrame()
			msg, _ := g.firstMessage(&p)
			pkt, err := rndis.ParsePacket(msg)
			if err != nil {
				return err
			}
			_, err = pkt.Info()
			return wantKind(err, protoerr.KindPPISize)
		},
		NICFaultRNDISType: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultRNDISType, true)
			p := g.oneFrame()
			msg, _ := g.firstMessage(&p)
			if typ, _ := rndis.MessageType(msg); typ != 0x7777 {
				return fmt.Errorf("type %v", typ)
			}
			return nil
		},
		NICFaultUnknownCompletion: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultUnknownCompletion, true)
			g.nic.Deliver([][]byte{udpFrame([6]byte{}, [6]byte{2}, 1, 64)}) // wake the host
			g.completion(0xdeadbeef00)
			return nil
		},
		NICFaultTxFail: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultTxFail, true)
			if st := g.sendStatus(0, g.sendRNDIS(0, nvsp.RMCData, rndisPacket(udpFrame([6]byte{}, [6]byte{}, 1, 64), nil))); st != nvsp.StatusFail {
				return fmt.Errorf("status %v", st)
			}
			return nil
		},
		NICFaultNVSPStatus: func(t *testing.T) error {
			g := newTGuest(t, tguestOpts{})
			g.nic.SetFault(NICFaultNVSPStatus, true)
			var ic nvsp.InitComplete
			ic.Unmarshal(g.request(nvsp.Init{MinVersion: nvsp.Version61, MaxVersion: nvsp.Version61}.Marshal(nil)))
			if ic.Status != nvsp.StatusFail {
				return fmt.Errorf("status %v", ic.Status)
			}
			return nil
		},
		NICFaultRecvSections: func(t *testing.T) error { return recvBufFault(t, NICFaultRecvSections, protoerr.KindSectionCount) },
		NICFaultRecvOffset:   func(t *testing.T) error { return recvBufFault(t, NICFaultRecvOffset, protoerr.KindSectionOffset) },
		NICFaultRecvFit:      func(t *testing.T) error { return recvBufFault(t, NICFaultRecvFit, protoerr.KindSectionFit) },
		NICFaultSendSection: func(t *testing.T) error {
			g := newTGuest(t, tguestOpts{})
			g.nic.SetFault(NICFaultSendSection, true)
			preBuffers(g)
			g.request(nvsp.RecvBuf{GPADLHandle: g.recvGPADL, ID: nvsp.RecvBufID}.Marshal(nil))
			var sc nvsp.SendBufComplete
			sc.Unmarshal(g.request(nvsp.SendBuf{GPADLHandle: g.sendGPADL, ID: 1}.Marshal(nil)))
			_, err := sc.SectionCount(len(g.send))
			return wantKind(err, protoerr.KindSectionSize)
		},
		NICFaultSubchannelFail: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultSubchannelFail, true)
			if sc := g.openSubchannels(2); sc.Status != nvsp.StatusFail || sc.Count != 0 {
				return fmt.Errorf("grant %+v", sc)
			}
			return nil
		},
		NICFaultSubchannelOvergrant: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultSubchannelOvergrant, true)
			var sc nvsp.SubchannelComplete
			sc.Unmarshal(g.request(nvsp.SubchannelRequest{Op: nvsp.SubchannelAllocate, Count: 2}.Marshal(nil)))
			if sc.Count != 3 {
				return fmt.Errorf("granted %d for 2", sc.Count)
			}
			return nil
		},
		NICFaultBadIndirectionTable: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultBadIndirectionTable, true)
			g.openSubchannels(1)
			p := g.next(0, func(p *gpkt) bool {
				return p.typ == vmbus.PacketInband && p.nvspType() == nvsp.TypeSendIndirectionTable
			})
			var tab nvsp.IndirectionTable
			return wantKind(tab.Unmarshal(p.payload()), protoerr.KindTableCount)
		},
		NICFaultTableDuringSync: func(t *testing.T) error {
			g := newTGuest(t, tguestOpts{})
			g.nic.SetFault(NICFaultTableDuringSync, true)
			tid := g.nvsp(nvsp.Init{MinVersion: nvsp.Version61, MaxVersion: nvsp.Version61}.Marshal(nil), true)
			p, _ := g.read(0, tgWait)
			if p.typ != vmbus.PacketInband || p.nvspType() != nvsp.TypeSendIndirectionTable {
				return fmt.Errorf("first packet %v %v", p.typ, p.nvspType())
			}
			g.completion(tid)
			return nil
		},
		NICFaultRxDuringSetup: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultRxDuringSetup, true)
			tid := g.nvsp(nvsp.SubchannelRequest{Op: nvsp.SubchannelAllocate, Count: 1}.Marshal(nil), true)
			p, _ := g.read(0, tgWait)
			if p.typ != vmbus.PacketTransferPage {
				return fmt.Errorf("first packet %v, want data before the completion", p.typ)
			}
			g.completion(tid)
			return nil
		},
		NICFaultRNDISRequestID: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultRNDISRequestID, true)
			id := g.newRID()
			b := g.rndis(rndis.Query{RequestID: id, OID: rndis.OIDGenLinkSpeed}.Marshal(nil))
			if _, got, _ := rndis.CompletionRequestID(b); got == id {
				return fmt.Errorf("request id %d unchanged", got)
			}
			return nil
		},
		NICFaultRNDISStatus: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultRNDISStatus, true)
			if c := g.query(rndis.OIDGenLinkSpeed, nil); c.Status != rndis.StatusFailure {
				return fmt.Errorf("status %v", c.Status)
			}
			return nil
		},
		NICFaultRNDISQueryInfo: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultRNDISQueryInfo, true)
			b := g.rndis(rndis.Query{RequestID: g.newRID(), OID: rndis.OIDGenLinkSpeed}.Marshal(nil))
			var c rndis.QueryComplete
			return wantKind(c.Unmarshal(b), protoerr.KindRange)
		},
		NICFaultBadIndication: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{LinkSpacing: time.Millisecond})
			g.nic.SetFault(NICFaultBadIndication, true)
			g.nic.SetLink(false)
			var m rndis.IndicateStatus
			return wantKind(m.Unmarshal(g.control()), protoerr.KindRange)
		},
		NICFaultKeepalive: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{})
			g.nic.SetFault(NICFaultKeepalive, true)
			g.query(rndis.OIDGenLinkSpeed, nil)
			b := g.control()
			if typ, _ := rndis.MessageType(b); typ != rndis.TypeKeepalive {
				return fmt.Errorf("message %v", typ)
			}
			return nil
		},
		NICFaultVFFlap: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{VF: 3, VFDelay: time.Millisecond})
			isVF := func(p *gpkt) bool {
				return p.typ == vmbus.PacketInband && p.nvspType() == nvsp.TypeSendVFAssociation
			}
			g.next(0, isVF)
			g.nic.SetFault(NICFaultVFFlap, true)
			var seen []uint32
			for len(seen) < 2 {
				p := g.next(0, isVF)
				var a nvsp.VFAssociation
				a.Unmarshal(p.payload())
				seen = append(seen, a.Allocated)
			}
			g.nic.SetFault(NICFaultVFFlap, false)
			if seen[0] != 0 || seen[1] != 1 {
				return fmt.Errorf("associations %v", seen)
			}
			return nil
		},
		NICFaultLinkFlap: func(t *testing.T) error {
			g := readyGuest(t, NICConfig{LinkSpacing: 5 * time.Millisecond})
			g.nic.SetFault(NICFaultLinkFlap, true)
			var seen []rndis.Status
			for len(seen) < 4 {
				var m rndis.IndicateStatus
				if m.Unmarshal(g.control()) == nil {
					seen = append(seen, m.Status)
				}
			}
			g.nic.SetFault(NICFaultLinkFlap, false)
			for i, s := range seen {
				want := rndis.StatusMediaDisconnect
				if i%2 == 1 {
					want = rndis.StatusMediaConnect
				}
				if s != want {
					return fmt.Errorf("indications %v", seen)
				}
			}
			return nil
		},
	}
	for _, f := range AllNICFaults() {
		t.Run(f.String(), func(t *testing.T) {
			test, ok := tests[f]
			if !ok {
				t.Fatalf("no test for NIC fault %v", f)
			}
			if err := test(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// preBuffers runs INIT, NDIS config and version.
func preBuffers(g *tguest) {
	g.request(nvsp.Init{MinVersion: nvsp.Version61, MaxVersion: nvsp.Version61}.Marshal(nil))
	g.nvsp(nvsp.NDISConfig{MTU: 1514}.Marshal(nil), false)
	g.nvsp(nvsp.NewNDISVersion(nvsp.NDISVersion630).Marshal(nil), false)
}

func recvBufFault(t *testing.T, f NICFault, k protoerr.Kind) error {
	g := newTGuest(t, tguestOpts{})
	g.nic.SetFault(f, true)
	preBuffers(g)
	var rc nvsp.RecvBufComplete
	if err := rc.Unmarshal(g.request(nvsp.RecvBuf{GPADLHandle: g.recvGPADL, ID: nvsp.RecvBufID}.Marshal(nil))); err != nil {
		return err
	}
	if g.nic.FaultHits(f) != 1 {
		return fmt.Errorf("fault hits %d", g.nic.FaultHits(f))
	}
	return wantKind(rc.Validate(len(g.recv)), k)
}
