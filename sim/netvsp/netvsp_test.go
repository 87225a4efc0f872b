package netvsp

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

func TestNetVSPHandshakeInDPDKOrderHasNoViolations(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	// The reference's answers (docs/protocol/netvsc.md §2.5, §7 host 2, 9).
	if g.subSize != DefaultRecvSectionSize || g.subCount != uint32(len(g.recv)/DefaultRecvSectionSize) {
		t.Errorf("receive sections %d x %d", g.subSize, g.subCount)
	}
	if g.secSize != DefaultSendSectionSize {
		t.Errorf("send section %d", g.secSize)
	}
	g.setFilter(0)
	c := g.query(rndis.OIDGenMaximumFrameSize, nil)
	if v, _ := rndis.ParseInfoUint32(c.Info); v != 1500 {
		t.Errorf("MAXIMUM_FRAME_SIZE %d", v)
	}
	c = g.query(rndis.OID8023PermanentAddress, nil)
	if !bytes.Equal(c.Info, g.nic.MAC()) {
		t.Errorf("PERMANENT_ADDRESS %x, want %s", c.Info, g.nic.MAC())
	}
	c = g.query(rndis.OIDGenReceiveScaleCapabilities, rndis.RSSCapabilitiesQueryHeader().Marshal(nil))
	var caps rndis.RSSCapabilities
	if err := caps.Unmarshal(c.Info); err != nil || caps.NumIndirectionEntries != 128 || caps.NumReceiveQueues != DefaultMaxQueues {
		t.Errorf("RSS caps %+v %v", caps, err)
	}
	c = g.query(rndis.OIDTCPOffloadHardwareCapabilities, rndis.OffloadQueryHeader(g.version).Marshal(nil))
	var off rndis.Offload
	if err := off.Unmarshal(c.Info); err != nil || off.LSOv2.IPv4MaxSize != rndis.HostLSOv2MaxSize {
		t.Errorf("offload %+v %v", off, err)
	}
	g.setFilter(rndis.NDISPacketFilterDefault)
	c = g.query(rndis.OIDGenMediaConnectStatus, nil)
	if v, _ := rndis.ParseInfoUint32(c.Info); v != rndis.NDISMediaStateConnected {
		t.Errorf("link %d", v)
	}
	c = g.query(rndis.OIDGenLinkSpeed, nil)
	if v, _ := rndis.ParseInfoUint32(c.Info); rndis.LinkSpeed(v).Mbps() != 10000 {
		t.Errorf("link speed %d", v)
	}
	if c := g.query(0x0badbeef, nil); c.Status != rndis.StatusNotSupported {
		t.Errorf("unknown OID answered %v", c.Status)
	}
	g.noViolations()
	st := g.nic.Stats()
	if st.NVSPVersion != nvsp.Version61 || st.NDISVersion != nvsp.NDISVersion630 || st.MTU != 1514 || st.PacketFilter != 0xd {
		t.Errorf("negotiated state %+v", st)
	}
}

func TestNetVSPInitAcceptsOnlySupportedVersionsAndFallsBack(t *testing.T) {
	g := newTGuest(t, tguestOpts{nic: NICConfig{MaxNVSPVersion: nvsp.Version5}})
	for _, v := range nvsp.Versions() {
		var ic nvsp.InitComplete
		if err := ic.Unmarshal(g.request(nvsp.Init{MinVersion: v, MaxVersion: v}.Marshal(nil))); err != nil {
			t.Fatal(err)
		}
		want := nvsp.StatusNone
		if v == nvsp.Version5 {
			want = nvsp.StatusSuccess
		}
		if ic.Status != want || ic.MaxMDLChainLen != 34 {
			t.Fatalf("INIT %#x: %+v, want status %v", v, ic, want)
		}
		if want == nvsp.StatusSuccess {
			break
		}
	}
	if st := g.nic.Stats(); st.NVSPVersion != nvsp.Version5 {
		t.Errorf("negotiated %#x", st.NVSPVersion)
	}
	g.noViolations()
}

func TestNetVSPEnforcesHandshakeOrder(t *testing.T) {
	type step func(g *tguest)
	init := func(g *tguest) {
		g.request(nvsp.Init{MinVersion: nvsp.Version61, MaxVersion: nvsp.Version61}.Marshal(nil))
	}
	config := func(g *tguest) { g.nvsp(nvsp.NDISConfig{MTU: 1514}.Marshal(nil), false) }
	ver := func(g *tguest) { g.nvsp(nvsp.NewNDISVersion(nvsp.NDISVersion630).Marshal(nil), false) }
	recvStatus := func(g *tguest, gpadl uint32) nvsp.Status {
		var rc nvsp.RecvBufComplete
		rc.Unmarshal(g.request(nvsp.RecvBuf{GPADLHandle: gpadl, ID: nvsp.RecvBufID}.Marshal(nil)))
		return rc.Status
	}
	for _, tc := range []struct {
		name  string
		steps []step
		kind  string
	}{
		{"message before INIT", []step{config}, "before INIT"},
		{"second INIT", []step{init, init}, "second INIT"},
		{"receive buffer before NDIS config", []step{init, ver, func(g *tguest) {
			if st := recvStatus(g, g.recvGPADL); st != nvsp.StatusFail {
				t.Errorf("status %v", st)
			}
		}}, "SEND_RECV_BUF before SEND_NDIS_CONFIG"},
		{"wrong receive GPADL", []step{init, config, ver, func(g *tguest) {
			if st := recvStatus(g, g.recvGPADL+7); st != nvsp.StatusFail {
				t.Errorf("status %v", st)
			}
		}}, "not the receive buffer's"},
		{"NDIS config after the receive buffer", []step{init, config, ver, func(g *tguest) { g.connectBuffers() }, config}, "after SEND_RECV_BUF"},
		{"RNDIS before the receive buffer", []step{init, config, ver, func(g *tguest) {
			g.secSize, g.secCount = DefaultSendSectionSize, 10
			tid := g.sendRNDIS(0, nvsp.RMCControl, rndis.Initialize{RequestID: 1, MajorVersion: 1}.Marshal(nil))
			if st := g.sendStatus(0, tid); st != nvsp.StatusFail {
				t.Errorf("status %v", st)
			}
		}}, "before the receive buffer"},
		{"RNDIS query before INITIALIZE", []step{init, config, ver, func(g *tguest) {
			g.connectBuffers()
			g.query(rndis.OIDGenLinkSpeed, nil)
		}}, "QUERY before INITIALIZE"},
		{"data before INITIALIZE", []step{init, config, ver, func(g *tguest) {
			g.connectBuffers()
			tid := g.sendRNDIS(0, nvsp.RMCData, rndisPacket(make([]byte, 60), nil))
			if st := g.sendStatus(0, tid); st != nvsp.StatusFail {
				t.Errorf("status %v", st)
			}
		}}, "before RNDIS INITIALIZE"},
		{"NVSP type not allowed at version", []step{func(g *tguest) {
			g.request(nvsp.Init{MinVersion: nvsp.Version4, MaxVersion: nvsp.Version4}.Marshal(nil))
			g.request(nvsp.SubchannelRequest{Op: nvsp.SubchannelAllocate, Count: 1}.Marshal(nil))
		}}, "not allowed at the negotiated version"},
		{"request id 0", []step{init, config, ver, func(g *tguest) {
			g.connectBuffers()
			g.rndis(rndis.Initialize{RequestID: 0, MajorVersion: 1}.Marshal(nil))
		}}, "request id 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTGuest(t, tguestOpts{})
			for _, s := range tc.steps {
				s(g)
			}
			// A round trip the host answers after everything before it.
			g.request(nvsp.Init{MinVersion: 1, MaxVersion: 1}.Marshal(nil))
			if g.violations(tc.kind) == 0 {
				t.Errorf("no violation %q counted; have %v", tc.kind, g.h.Violations())
			}
		})
	}
}

func TestNetVSPReceiveSectionSizeFromMTU(t *testing.T) {
	g := newTGuest(t, tguestOpts{nic: NICConfig{RecvSectionSize: RecvSectionFromMTU, MTU: 9000}})
	g.request(nvsp.Init{MinVersion: nvsp.Version61, MaxVersion: nvsp.Version61}.Marshal(nil))
	g.nvsp(nvsp.NDISConfig{MTU: 9014}.Marshal(nil), false)
	g.nvsp(nvsp.NewNDISVersion(nvsp.NDISVersion630).Marshal(nil), false)
	g.connectBuffers()
	if g.subSize != 256+9014+36 {
		t.Errorf("sub-allocation %d, want openvmm's 256+MTU+36", g.subSize)
	}
	// An MTU outside 1514..9216 becomes 1514, as vmswitch does.
	g2 := newTGuest(t, tguestOpts{nic: NICConfig{RecvSectionSize: RecvSectionFromMTU}})
	g2.request(nvsp.Init{MinVersion: nvsp.Version61, MaxVersion: nvsp.Version61}.Marshal(nil))
	g2.nvsp(nvsp.NDISConfig{MTU: 60000}.Marshal(nil), false)
	g2.nvsp(nvsp.NewNDISVersion(nvsp.NDISVersion630).Marshal(nil), false)
	g2.connectBuffers()
	if g2.subSize != 256+1514+36 {
		t.Errorf("sub-allocation %d for an out-of-range MTU", g2.subSize)
	}
}

func TestNetVSPTransferPagesUseSectionIndexAndWaitForCompletions(t *testing.T) {
	g := newTGuest(t, tguestOpts{nic: NICConfig{MaxQueues: 1, RecvBuffer: 1 << 20, SendBuffer: 1 << 20}})
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketFilterDefault)
	var mac [6]byte
	copy(mac[:], g.nic.MAC())
	// More frames than the partition has sub-allocations: without
	// completions the host stops at the partition's end.
	per := g.subCount - rxControlSections
	if per >= DefaultNICQueueLen {
		t.Fatalf("partition of %d sub-allocations: the test needs fewer than a queue", per)
	}
	frames := make([][]byte, DefaultNICQueueLen)
	for i := range frames {
		frames[i] = udpFrame(mac, [6]byte{2, 0, 0, 0, 0, 1}, uint16(1024+i%7), 64+i%200)
		binary.BigEndian.PutUint32(frames[i][len(frames[i])-4:], uint32(i))
	}
	if n := g.nic.Deliver(frames[:DefaultNICQueueLen]); n != DefaultNICQueueLen {
		t.Fatalf("queued %d", n)
	}
	var held []gpkt
	got := 0
	for got < int(per) {
		p := g.data(0)
		fs := g.frames(&p)
		for _, f := range fs {
			if !bytes.Equal(f.frame, frames[got]) {
				t.Fatalf("frame %d differs", got)
			}
			if f.info.Has&rndis.InfoChecksum == 0 || rndis.RxChecksum(f.info.Checksum)&rndis.RxChecksumUDPOK == 0 {
				t.Fatalf("frame %d: checksum info %+v", got, f.info)
			}
			got++
		}
		held = append(held, p)
	}
	if got != int(per) {
		t.Fatalf("host sent %d frames on %d sub-allocations", got, per)
	}
	// Nothing more until a completion.
	if p, ok := g.read(0, 100*time.Millisecond); ok {
		t.Fatalf("host sent %v (tid %d) with every sub-allocation outstanding", p.typ, p.tid)
	}
	if st := g.nic.Stats(); len(st.PerChannel) > 0 && st.PerChannel[0].Unacked == 0 {
		t.Errorf("no unacked packets counted: %+v", st.PerChannel)
	}
	seen := map[uint64]bool{}
	for _, p := range held {
		if seen[p.tid] {
			t.Fatalf("tid %d twice in flight", p.tid)
		}
		seen[p.tid] = true
		g.ack(&p)
	}
	rest := g.recvFrames(0, DefaultNICQueueLen-got)
	for i, f := range rest {
		if !bytes.Equal(f.frame, frames[got+i]) {
			t.Fatalf("frame %d differs after completions", got+i)
		}
	}
	g.noViolations()
}

func TestNetVSPSendBufferAndGPADirectReachThePort(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketFilterDefault)
	src := [6]byte{0x00, 0x15, 0x5d, 1, 2, 3}
	dst := [6]byte{0x02, 0, 0, 0, 0, 9}
	// Eight aggregated packets in one section, each padded to 8 bytes as
	// DPDK does, each with DPDK's hash-value PPI (the queue id).
	var msgs, want [][]byte
	for i := range 8 {
		f := udpFrame(dst, src, uint16(2000+i), 60+i)
		want = append(want, f)
		var info rndis.PacketInfo
		info.SetHashValue(0)
		msgs = append(msgs, rndisPacket(f, &info))
	}
	if st := g.sendStatus(0, g.sendRNDIS(0, nvsp.RMCData, aggregate(msgs))); st != nvsp.StatusSuccess {
		t.Fatalf("section send: %v", st)
	}
	// A 3000-byte frame GPA-direct across pages.
	big := udpFrame(dst, src, 3000, 1514)
	want = append(want, big)
	if st := g.sendStatus(0, g.sendGPA(0, nvsp.RMCData, gpaPage, rndisPacket(big, nil))); st != nvsp.StatusSuccess {
		t.Fatalf("GPA send: %v", st)
	}
	got := g.port.wait(t, len(want))
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d at the port differs", i)
		}
	}
	st := g.nic.Stats()
	if st.TxPackets != uint64(len(want)) || st.TxGPASends != 1 || st.TxErrors != 0 {
		t.Errorf("stats %+v", st)
	}
	g.noViolations()
}

func TestNetVSPGPARangeOutsideGuestMemoryFailsTheSend(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	hdr := vmbus.GPAHeader(nil, 1)
	hdr = vmbus.AppendGPARange(hdr, 100, 0, []uint64{uint64(len(g.mem)/4096) + 5})
	tid := g.newTID()
	g.sendPkt(0, vmbus.PacketGPADirect, vmbus.FlagCompletionRequested, tid, hdr,
		nvsp.RNDISPacket{SectionIndex: nvsp.NoSection}.Marshal(nil))
	if st := g.sendStatus(0, tid); st != nvsp.StatusFail {
		t.Errorf("status %v", st)
	}
	if g.violations("outside guest memory") == 0 {
		t.Errorf("violations %v", g.h.Violations())
	}
}

func TestNetVSPDropsInFrameVLANTagAndInsertsPPITag(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	f := udpFrame([6]byte{2, 0, 0, 0, 0, 9}, [6]byte{2, 0, 0, 0, 0, 8}, 4000, 64)
	tagged := vswitch.InsertVLAN(nil, f, 0x2064)
	// In-frame tag: dropped, the send still completes.
	if st := g.sendStatus(0, g.sendRNDIS(0, nvsp.RMCData, rndisPacket(tagged, nil))); st != nvsp.StatusSuccess {
		t.Errorf("status %v", st)
	}
	if g.violations("in-frame 802.1Q") != 1 || g.nic.Stats().TxDropped != 1 {
		t.Errorf("violations %v stats %+v", g.h.Violations(), g.nic.Stats())
	}
	// The VLAN per-packet info: the host puts the tag into the frame.
	var info rndis.PacketInfo
	info.SetVLAN(rndis.VLANInfoFromTCI(0x2064))
	g.sendStatus(0, g.sendRNDIS(0, nvsp.RMCData, rndisPacket(f, &info)))
	got := g.port.wait(t, 1)[0]
	if !bytes.Equal(got, tagged) {
		t.Errorf("tagged frame %x, want %x", got, tagged)
	}
	// And host to guest: the tag comes off the frame into the PPI.
	g.setFilter(rndis.NDISPacketTypePromiscuous)
	g.nic.Deliver([][]byte{tagged})
	rx := g.recvFrames(0, 1)[0]
	if !bytes.Equal(rx.frame, f) || rx.info.Has&rndis.InfoVLAN == 0 || rx.info.VLAN.TCI() != 0x2064 {
		t.Errorf("received %x info %+v", rx.frame, rx.info)
	}
}

// tcpFrame builds a TCP/IPv4 (or IPv6) frame with payload bytes of data.
func tcpFrame(v6 bool, payload int) []byte {
	var ip []byte
	tcp := make([]byte, 20+payload)
	be.PutUint16(tcp[0:], 40000)
	be.PutUint16(tcp[2:], 80)
	be.PutUint32(tcp[4:], 1000)
	tcp[12] = 5 << 4
	tcp[13] = 0x18 // PSH|ACK
	for i := range payload {
		tcp[20+i] = byte(i)
	}
	eth := []byte{2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 8, 0, 0}
	if v6 {
		be.PutUint16(eth[12:], vswitch.EthTypeIPv6)
		ip = make([]byte, 40)
		ip[0] = 0x60
		ip[6] = vswitch.IPProtoTCP
		ip[7] = 64
		ip[23], ip[39] = 1, 2
		ip[8], ip[24] = 0xfd, 0xfd
		be.PutUint16(ip[4:], uint16(len(tcp)))
	} else {
		be.PutUint16(eth[12:], vswitch.EthTypeIPv4)
		ip = make([]byte, 20)
		ip[0] = 0x45
		be.PutUint16(ip[2:], uint16(20+len(tcp)))
		be.PutUint16(ip[4:], 77)
		ip[8], ip[9] = 64, vswitch.IPProtoTCP
		copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	}
	return slices.Concat(eth, ip, tcp)
}

func TestNetVSPSegmentsLSOAndChecksLSORequests(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	p := rndis.OffloadParameters{Header: rndis.OffloadParametersHeader(g.version), LSOv2IPv4: rndis.NDISOffloadParametersEnabled, LSOv2IPv6: rndis.NDISOffloadParametersEnabled}
	if st := g.set(rndis.OIDTCPOffloadParameters, p.Marshal(nil)); st != rndis.StatusSuccess {
		t.Fatalf("offload parameters: %v", st)
	}
	for _, v6 := range []bool{false, true} {
		f := tcpFrame(v6, 5000)
		l3 := 20
		if v6 {
			l3 = 40
		}
		var info rndis.PacketInfo
		mss := 1500 - l3 - 20
		info.SetLSO(rndis.NewLSOv2(mss, 14+l3, v6))
		nseg := (5000 + mss - 1) / mss
		before := g.port.count()
		if st := g.sendStatus(0, g.sendGPA(0, nvsp.RMCData, gpaPage, rndisPacket(f, &info))); st != nvsp.StatusSuccess {
			t.Fatalf("LSO send: %v", st)
		}
		segs := g.port.wait(t, before+nseg)[before:]
		var payload []byte
		for i, s := range segs {
			fl := vswitch.ParseFlow(s)
			if fl.L4 != vswitch.IPProtoTCP || vswitch.RxChecksum(s)&(rndis.RxChecksumTCPFailed|rndis.RxChecksumIPFailed) != 0 {
				t.Fatalf("segment %d: bad headers or checksums", i)
			}
			if seq := be.Uint32(s[fl.L4Off+4:]); seq != 1000+uint32(len(payload)) {
				t.Fatalf("segment %d: seq %d", i, seq)
			}
			if psh := s[fl.L4Off+13]&0x08 != 0; psh != (i == nseg-1) {
				t.Fatalf("segment %d: PSH %v", i, psh)
			}
			payload = append(payload, s[fl.L4Off+20:fl.L4End]...)
		}
		if !bytes.Equal(payload, f[14+l3+20:]) {
			t.Fatalf("v6=%v: payload not reassembled", v6)
		}
	}
	g.noViolations()
	// Requests the host refuses: dropped and counted.
	for _, tc := range []struct {
		name string
		lso  rndis.LSOInfo
		kind string
	}{
		{"mss 0", rndis.NewLSOv2(0, 34, false), "MSS"},
		{"wrong header offset", rndis.NewLSOv2(1448, 30, false), "offset"},
		{"IPv6 bit on IPv4", rndis.NewLSOv2(1448, 34, true), "IPv6 bit"},
	} {
		var info rndis.PacketInfo
		info.SetLSO(tc.lso)
		g.sendStatus(0, g.sendGPA(0, nvsp.RMCData, gpaPage, rndisPacket(tcpFrame(false, 3000), &info)))
		if g.violations(tc.kind) == 0 {
			t.Errorf("%s: no violation; have %v", tc.name, g.h.Violations())
		}
	}
}

func TestNetVSPLSOWithoutEnablingIsViolation(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	var info rndis.PacketInfo
	info.SetLSO(rndis.NewLSOv2(1000, 34, false))
	g.sendStatus(0, g.sendGPA(0, nvsp.RMCData, gpaPage, rndisPacket(tcpFrame(false, 3000), &info)))
	if g.violations("without LSOv2 enabled") != 1 {
		t.Errorf("violations %v", g.h.Violations())
	}
}

// openSubchannels requests n sub-channels and maps the ones that open.
func (g *tguest) openSubchannels(n uint32) nvsp.SubchannelComplete {
	g.t.Helper()
	var sc nvsp.SubchannelComplete
	if err := sc.Unmarshal(g.request(nvsp.SubchannelRequest{Op: nvsp.SubchannelAllocate, Count: n}.Marshal(nil))); err != nil {
		g.t.Fatal(err)
	}
	if sc.Status != nvsp.StatusSuccess || sc.Count == 0 {
		return sc
	}
	ctx, cancel := contextTimeout(tgWait)
	defer cancel()
	chs, err := g.hd.OpenSubchannels(ctx, int(sc.Count))
	if err != nil {
		g.t.Fatal(err)
	}
	slices.SortFunc(chs, func(a, b *vmbus.Channel) int { return int(a.SubchannelID()) - int(b.SubchannelID()) })
	for _, c := range chs {
		for len(g.chs) <= int(c.SubchannelID()) {
			g.chs = append(g.chs, nil)
		}
		g.chs[c.SubchannelID()] = c
	}
	return sc
}

func TestNetVSPRSSSpreadsFlowsWithHashPPIAndSendsTable(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketFilterDefault)
	if sc := g.openSubchannels(3); sc.Count != 3 || len(g.chs) != 4 {
		t.Fatalf("granted %+v, open %d", sc, len(g.chs))
	}
	// The send indirection table follows once all are open.
	p := g.next(0, func(p *gpkt) bool {
		return p.typ == vmbus.PacketInband && p.nvspType() == nvsp.TypeSendIndirectionTable
	})
	var tab nvsp.IndirectionTable
	if err := tab.Unmarshal(p.payload()); err != nil || tab.Table[5] != 1 || tab.Table[7] != 3 {
		t.Fatalf("table %+v %v", tab, err)
	}
	key := rndis.MicrosoftRSSKey()
	table := make([]uint32, 128)
	for i := range table {
		table[i] = uint32(i % 4)
	}
	hash := rndis.NDISHashFunctionToeplitz | rndis.NDISHashIPv4 | rndis.NDISHashTCPIPv4 | rndis.NDISHashUDPIPv4
	dis := rndis.RSSParameters{Flags: rndis.NDISRSSParamFlagDisableRSS}
	if st := g.set(rndis.OIDGenReceiveScaleParameters, dis.Marshal(nil)); st != rndis.StatusSuccess {
		t.Fatalf("disable: %v", st)
	}
	if st := g.set(rndis.OIDGenReceiveScaleParameters, rndis.NewRSSParameters(hash, key[:], table).Marshal(nil)); st != rndis.StatusSuccess {
		t.Fatalf("enable: %v", st)
	}
	gen := vswitch.NewGenerator(vswitch.GeneratorConfig{Flows: 64, Count: 256})
	mac := g.nic.MAC()
	var frames [][]byte
	for i := range 256 {
		b := make([]byte, 64)
		frames = append(frames, gen.Frame(b, mac, i%64, uint64(i)))
	}
	g.nic.Deliver(frames)
	perCh := map[int]int{}
	got := 0
	for got < 256 {
		for ch := range g.chs {
			if p, ok := g.read(ch, 10*time.Millisecond); ok {
				if p.typ != vmbus.PacketTransferPage {
					continue
				}
				for _, f := range g.frames(&p) {
					if f.info.Has&(rndis.InfoHashValue|rndis.InfoHashInfo) != rndis.InfoHashValue|rndis.InfoHashInfo {
						t.Fatalf("no hash PPIs: %+v", f.info)
					}
					fl := vswitch.ParseFlow(f.frame)
					src, _ := netip.AddrFromSlice(fl.Src)
					dst, _ := netip.AddrFromSlice(fl.Dst)
					want := rndis.RSSHash(key[:], src, dst, be.Uint16(f.frame[fl.L4Off:]), be.Uint16(f.frame[fl.L4Off+2:]), true)
					if f.info.HashValue != want || int(table[want%128]) != ch {
						t.Fatalf("hash %#x on channel %d, want %#x on %d", f.info.HashValue, ch, want, table[want%128])
					}
					if f.info.HashInfo != rndis.NDISHashFunctionToeplitz|rndis.NDISHashUDPIPv4 {
						t.Fatalf("hash info %#x", f.info.HashInfo)
					}
					perCh[ch]++
					got++
				}
				g.ack(&p)
			}
		}
	}
	if len(perCh) < 3 {
		t.Errorf("64 flows landed on %d channels: %v", len(perCh), perCh)
	}
	// Changing RSS without disabling first is the guest's violation.
	g.set(rndis.OIDGenReceiveScaleParameters, rndis.NewRSSParameters(hash, key[:], table).Marshal(nil))
	if g.violations("without disabling") != 1 {
		t.Errorf("violations %v", g.h.Violations())
	}
	// A table naming a channel that was not granted, or UDP-only hashing:
	// 0xC000000D, as an Azure host answered.
	g.set(rndis.OIDGenReceiveScaleParameters, dis.Marshal(nil))
	bad := slices.Clone(table)
	bad[3] = 9
	if st := g.set(rndis.OIDGenReceiveScaleParameters, rndis.NewRSSParameters(hash, key[:], bad).Marshal(nil)); st != rndis.StatusInvalidParameter {
		t.Errorf("entry beyond the channels: %v", st)
	}
	if st := g.set(rndis.OIDGenReceiveScaleParameters, rndis.NewRSSParameters(rndis.NDISHashFunctionToeplitz|rndis.NDISHashUDPIPv4, key[:], table).Marshal(nil)); st != rndis.StatusInvalidParameter {
		t.Errorf("UDP-only hash: %v", st)
	}
}

func TestNetVSPSubchannelGrants(t *testing.T) {
	t.Run("partial", func(t *testing.T) {
		g := newTGuest(t, tguestOpts{nic: NICConfig{MaxQueues: 3}})
		g.handshake(nvsp.Version61)
		if sc := g.openSubchannels(7); sc.Status != nvsp.StatusSuccess || sc.Count != 2 || len(g.chs) != 3 {
			t.Errorf("grant %+v, open %d", sc, len(g.chs))
		}
		// A second request in the session fails.
		var sc nvsp.SubchannelComplete
		sc.Unmarshal(g.request(nvsp.SubchannelRequest{Op: nvsp.SubchannelAllocate, Count: 1}.Marshal(nil)))
		if sc.Status != nvsp.StatusFail || g.violations("second SUBCHANNEL") != 1 {
			t.Errorf("second request %+v; %v", sc, g.h.Violations())
		}
	})
	t.Run("failed", func(t *testing.T) {
		g := newTGuest(t, tguestOpts{nic: NICConfig{FailSubchannels: true}})
		g.handshake(nvsp.Version61)
		if sc := g.openSubchannels(3); sc.Status != nvsp.StatusFail || sc.Count != 0 {
			t.Errorf("grant %+v", sc)
		}
		g.noViolations()
	})
	t.Run("never opens", func(t *testing.T) {
		g := newTGuest(t, tguestOpts{nic: NICConfig{NeverOpen: 1, SubchannelDelay: 5 * time.Millisecond}})
		g.handshake(nvsp.Version61)
		var sc nvsp.SubchannelComplete
		sc.Unmarshal(g.request(nvsp.SubchannelRequest{Op: nvsp.SubchannelAllocate, Count: 2}.Marshal(nil)))
		ctx, cancel := contextTimeout(300 * time.Millisecond)
		defer cancel()
		chs, _ := g.hd.OpenSubchannels(ctx, 2)
		if sc.Count != 2 || len(chs) != 1 {
			t.Errorf("granted %d, opened %d", sc.Count, len(chs))
		}
		ents, _ := os.ReadDir(filepath.Join(g.nic.Device().Path(), "channels"))
		if len(ents) != 3 {
			t.Errorf("%d channel directories, want 3 (one without a ring)", len(ents))
		}
	})
}

func TestNetVSPLinkIndicationsAreSpaced(t *testing.T) {
	const spacing = 60 * time.Millisecond
	g := newTGuest(t, tguestOpts{nic: NICConfig{LinkSpacing: spacing}})
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketFilterDefault)
	var times []time.Time
	var kinds []rndis.Status
	next := func() {
		for {
			var m rndis.IndicateStatus
			if err := m.Unmarshal(g.control()); err == nil {
				kinds = append(kinds, m.Status)
				times = append(times, time.Now())
				return
			}
		}
	}
	g.nic.SetLink(false)
	g.nic.SetLink(true)
	g.nic.SetLink(false)
	next()
	g.nic.SetLink(true)
	next()
	if kinds[0] != rndis.StatusMediaDisconnect || kinds[1] != rndis.StatusMediaConnect {
		t.Errorf("indications %v", kinds)
	}
	if d := times[1].Sub(times[0]); d < spacing-5*time.Millisecond {
		t.Errorf("indications %v apart, want at least %v", d, spacing)
	}
	if c := g.query(rndis.OIDGenMediaConnectStatus, nil); binary.LittleEndian.Uint32(c.Info) != rndis.NDISMediaStateConnected {
		t.Errorf("link state after reconnect")
	}
	g.noViolations()
}

func TestNetVSPSlowControlRepliesArriveAfterTheDelay(t *testing.T) {
	const delay = 80 * time.Millisecond
	g := newTGuest(t, tguestOpts{nic: NICConfig{ControlDelay: delay}})
	g.handshake(nvsp.Version61)
	start := time.Now()
	g.query(rndis.OIDGenLinkSpeed, nil)
	if d := time.Since(start); d < delay {
		t.Errorf("answer after %v, want at least %v", d, delay)
	}
}

func TestNetVSPVFAssociationAndDataPathSwitch(t *testing.T) {
	g := newTGuest(t, tguestOpts{nic: NICConfig{VF: 7, VFDelay: 10 * time.Millisecond}})
	g.handshake(nvsp.Version61)
	isVF := func(p *gpkt) bool {
		return p.typ == vmbus.PacketInband && p.nvspType() == nvsp.TypeSendVFAssociation
	}
	p := g.next(0, isVF)
	var a nvsp.VFAssociation
	if err := a.Unmarshal(p.payload()); err != nil || a.Allocated != 1 || a.Serial != 7 {
		t.Fatalf("VF association %+v %v", a, err)
	}
	// Linux >= 5.12 waits for an empty completion.
	c := g.completion(g.nvsp(nvsp.SwitchDataPath{ActiveDataPath: nvsp.DataPathVF}.Marshal(nil), true))
	if len(c.payload()) != 0 || !g.nic.Stats().DataPathVF {
		t.Errorf("switch completion %d bytes", len(c.payload()))
	}
	g.nic.SetVF(false)
	sw := g.next(0, func(p *gpkt) bool {
		return p.typ == vmbus.PacketInband && p.nvspType() == nvsp.TypeSwitchDataPath
	})
	var m nvsp.SwitchDataPath
	if m.Unmarshal(sw.payload()); m.ActiveDataPath != nvsp.DataPathSynthetic || sw.tid != hostRequestTID|1 {
		t.Errorf("host switch %+v tid %#x", m, sw.tid)
	}
	p = g.next(0, isVF)
	if a.Unmarshal(p.payload()); a.Allocated != 0 {
		t.Errorf("VF removal %+v", a)
	}
	g.noViolations()
}

func TestNetVSPRecoversFromAMissedPendingSendWakeup(t *testing.T) {
	g := newTGuest(t, tguestOpts{nic: NICConfig{RingSize: 8 << 10, SubchannelRingSize: 8 << 10, MaxQueues: 1}})
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketTypePromiscuous)
	mac := [6]byte(g.nic.MAC())
	var frames [][]byte
	for range 600 {
		frames = append(frames, udpFrame(mac, [6]byte{2}, 1111, 64))
	}
	g.nic.Deliver(frames)
	// Read and acknowledge without ever signalling the host: the host
	// blocks on its full ring with pending_send_sz set, misses the
	// wake-up, and must find the space on its timeout.
	c := g.chs[0]
	waitFor(t, "the host to block on its full ring (pending_send_sz set)", func() bool { return c.In().WriterPending() != 0 })
	got := 0
	for got < 600 {
		p, err := c.Recv()
		if err == vmbus.ErrRingEmpty {
			c.In().Commit() // publish the read index; no signal
			waitFor(t, "the host to write the rest of the 600 frames", func() bool { return c.In().Available() > 0 })
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.Type == vmbus.PacketTransferPage {
			got += p.RangeCount()
			c.Out().Write(vmbus.PacketCompletion, 0, p.TransID, nil, nvsp.RNDISComplete{Status: nvsp.StatusSuccess}.Marshal(nil))
			c.Out().Commit() // no signal either; the host finds it on its timeout
		}
	}
	if got != 600 {
		t.Fatalf("guest got %d frames", got)
	}
	// The completions and the freed space were never signalled: the host
	// finds them on its next timeout, and counts that.
	waitFor(t, "a missed wake-up to be counted", func() bool { return g.nic.Stats().MissedWakeups != 0 })
}

func TestNetVSPCountsUnackedReceivesPerChannelAtClose(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketTypePromiscuous)
	g.nic.Deliver([][]byte{udpFrame([6]byte{}, [6]byte{2}, 1, 64)})
	g.data(0) // read, never acked
	g.close()
	st := g.nic.Stats()
	if len(st.PerChannel) == 0 || st.PerChannel[0].UnackedAtClose != 1 {
		t.Errorf("per channel %+v", st.PerChannel)
	}
}

func TestNetVSPReopenStartsAFreshSession(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	g.close()
	g.backlog = nil
	g.open(0)
	g.handshake(nvsp.Version6)
	if st := g.nic.Stats(); st.Opens != 2 || st.NVSPVersion != nvsp.Version6 {
		t.Errorf("stats %+v", st)
	}
	g.noViolations()
}

func TestNetVSPProcMemoryModelReadsTheGuestProcess(t *testing.T) {
	g := newTGuest(t, tguestOpts{nic: NICConfig{Memory: bus.GuestMemProc}})
	g.handshake(nvsp.Version61)
	// The guest is this process: its page frame numbers are its virtual
	// pages.
	f := udpFrame([6]byte{2, 0, 0, 0, 0, 9}, [6]byte{2, 0, 0, 0, 0, 8}, 5000, 900)
	msg := rndisPacket(f, nil)
	buf := make([]byte, 3*4096)
	addr := uintptrOf(buf)
	pfn, off := uint64(addr/4096), uint32(addr%4096)
	copy(buf, msg)
	hdr := vmbus.GPAHeader(nil, 1)
	hdr = vmbus.AppendGPARange(hdr, uint32(len(msg)), off, []uint64{pfn, pfn + 1}[:int((uint64(off)+uint64(len(msg))+4095)/4096)])
	tid := g.newTID()
	g.sendPkt(0, vmbus.PacketGPADirect, vmbus.FlagCompletionRequested, tid, hdr, nvsp.RNDISPacket{SectionIndex: nvsp.NoSection}.Marshal(nil))
	if st := g.sendStatus(0, tid); st != nvsp.StatusSuccess {
		t.Fatalf("status %v", st)
	}
	if got := g.port.wait(t, 1)[0]; !bytes.Equal(got, f) {
		t.Errorf("frame read through /proc/pid/mem differs")
	}
	g.noViolations()
}

func TestNICInstanceFollowsMACAsOnAzure(t *testing.T) {
	c := NICConfig{MAC: net.HardwareAddr{0x00, 0x0d, 0x3a, 0x31, 0xb5, 0x38}}
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	if got := c.Instance.String(); got != "000d3a31-b538-000d-3a31-b538000d3a31" {
		t.Errorf("instance %s", got)
	}
}

func TestNICFaultNamesRoundTrip(t *testing.T) {
	for _, f := range AllNICFaults() {
		g, err := ParseNICFault(f.String())
		if err != nil || g != f || strings.HasPrefix(f.String(), "nicfault(") {
			t.Errorf("%v: %v %v", f, g, err)
		}
	}
	if _, err := ParseNICFault("nope"); err == nil {
		t.Error("unknown name parsed")
	}
}
