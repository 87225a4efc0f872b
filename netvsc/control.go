package netvsc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/vmbus"
)

// The control plane runs on the primary channel, one request in flight
// (docs/protocol/netvsc.md §7 guest 7). NVSP requests are completions-requested inband
// packets answered by a completion; RNDIS requests are copied into the
// reserved control section and sent as SEND_RNDIS_PKT(control), and their
// answers come back in the receive buffer like frames. While a request
// waits, queue 0's inbound ring keeps being drained and acknowledged: by
// the waiter itself when it can take inMu, otherwise by whoever holds it
// (the queue's receive loop), which hands the answer over.

// control is the NIC's control-plane state. Safe for concurrent use.
type control struct {
	s    *session
	mu   sync.Mutex // one request in flight
	held bool       // the caller holds queue 0's locks (teardown)
	seq  uint32
	rid  atomic.Uint32

	rmu        sync.Mutex
	waitCookie uint64
	waitRID    uint32
	waitType   rndis.Type
	resp       []byte
	respN      int
	got        bool
	// late holds the ids of the last RNDIS requests that timed out: the
	// host may still answer them, and such an answer is stale, not a
	// violation, even while another request waits.
	late     [4]uint32
	lateNext int
	sendBusy bool
	ready    chan struct{}
}

func newControl(s *session) *control {
	return &control{s: s, resp: make([]byte, maxControlMessage), ready: make(chan struct{}, 1)}
}

// nextRID returns a fresh non-zero RNDIS request id (DPDK requires
// non-zero, Linux unique).
func (c *control) nextRID() uint32 {
	for {
		if id := c.rid.Add(1); id != 0 {
			return id
		}
	}
}

func (c *control) poke() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// onNVSP takes the completion of an NVSP control request (any goroutine
// draining queue 0).
func (c *control) onNVSP(cookie uint64, payload []byte) {
	c.rmu.Lock()
	if cookie == c.waitCookie && !c.got {
		c.respN = copy(c.resp, payload)
		c.got = true
	}
	c.rmu.Unlock()
	c.poke()
}

// onSendDone takes the completion of the control section's send. A
// failure status is the host's to report, not a violation: counted and
// logged (the answer, if any, still decides the request).
func (c *control) onSendDone(payload []byte) error {
	st, err := sendStatus(payload)
	c.rmu.Lock()
	c.sendBusy = false
	c.rmu.Unlock()
	c.poke()
	if err != nil {
		return err
	}
	if st != nvsp.StatusSuccess {
		c.s.refused("control send", st.String())
	}
	return nil
}

// onRNDIS takes an RNDIS completion. While a request is outstanding the
// answer must carry its id and type; one arriving when none is (a late
// answer to a request that timed out) is counted and dropped, as Linux
// does.
func (c *control) onRNDIS(t rndis.Type, id uint32, msg []byte) error {
	c.rmu.Lock()
	waiting := c.waitRID != 0 && !c.got
	match := waiting && id == c.waitRID && t == c.waitType
	if match {
		c.respN = copy(c.resp, msg)
		c.got = true
	}
	c.rmu.Unlock()
	c.poke()
	if !match && c.tookLate(id) {
		c.s.nic.hostEvent("late " + t.String())
		return nil
	}
	if waiting && !match {
		return protoerr.New(t.String(), protoerr.KindType, "request_id", uint64(id))
	}
	if !match {
		c.s.nic.hostEvent("stray " + t.String())
	}
	return nil
}

// tookLate reports whether id is one of the requests that timed out, and
// forgets it: each is answered at most once.
func (c *control) tookLate(id uint32) bool {
	if id == 0 {
		return false
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for i, l := range c.late {
		if l == id {
			c.late[i] = 0
			return true
		}
	}
	return false
}

// wait drains queue 0 until cond holds (evaluated under rmu), the
// control timeout or ctx expires, or the device dies.
func (c *control) wait(ctx context.Context, cond func() bool) error {
	s := c.s
	ctx, cancel := clock.WithTimeout(ctx, s.cfg.Clock, s.cfg.ControlTimeout)
	defer cancel()
	q0 := s.queues[0]
	check := func() bool {
		c.rmu.Lock()
		defer c.rmu.Unlock()
		return cond()
	}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		if check() {
			return nil
		}
		if err := q0.ch.Err(); err != nil {
			s.fail(err)
			return s.err()
		}
		if !c.held {
			if err := s.err(); err != nil {
				return err
			}
		}
		var werr error
		switch {
		case c.held:
			q0.drainLocked()
			if !check() {
				werr = q0.ch.WaitReadable(ctx)
			}
		case q0.inMu.TryLock():
			if err := s.err(); err != nil {
				q0.inMu.Unlock()
				return err
			}
			q0.drainLocked()
			if !check() {
				werr = q0.ch.WaitReadable(ctx)
			}
			q0.inMu.Unlock()
		default:
			t.Reset(time.Millisecond)
			select {
			case <-c.ready:
			case <-t.C:
			case <-ctx.Done():
			case <-s.dead:
			}
			t.Stop()
		}
		if ctx.Err() != nil && !check() {
			s.nic.ctlTimeouts.Add(1)
			return ErrControlTimeout
		}
		if werr != nil && ctx.Err() == nil {
			if _, bad := vmbus.IsCorrupt(werr); bad || q0.ch.Err() != nil {
				s.fail(werr)
				return s.err()
			}
		}
	}
}

// send writes one packet on queue 0 and publishes it. A channel found
// dead fails the session, as wait does: the device's interrupt loop
// kills the channels when the host goes and tells the session nothing,
// and a NIC whose receive loops are stopped would otherwise run on with
// a dead channel, its requests failing, until its owner gives up on it.
func (c *control) send(fn func(ch *vmbus.Channel) error) error {
	q0 := c.s.queues[0]
	if !c.held {
		q0.outMu.Lock()
		defer q0.outMu.Unlock()
	}
	err := fn(q0.ch)
	if err == nil {
		err = q0.ch.Flush()
	}
	if err != nil {
		if dead := q0.ch.Err(); dead != nil {
			c.s.fail(dead)
		}
	}
	return err
}

// nvsp sends an NVSP request with completion requested and returns a copy
// of the completion's payload.
func (c *control) nvsp(ctx context.Context, msg []byte, _ bool) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	cookie := cookieCtl | uint64(c.seq)
	c.rmu.Lock()
	c.waitCookie, c.got, c.respN = cookie, false, 0
	c.rmu.Unlock()
	err := c.send(func(ch *vmbus.Channel) error {
		_, err := ch.SendRequest(vmbus.PacketInband, cookie, nil, msg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netvsc: send %s: %w", nvspName(msg), err)
	}
	if err := c.wait(ctx, func() bool { return c.got }); err != nil {
		return nil, fmt.Errorf("netvsc: %s: %w", nvspName(msg), err)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.waitCookie = 0
	return append([]byte(nil), c.resp[:c.respN]...), nil
}

// inband sends an NVSP message that has no answer (transaction id 0).
func (c *control) inband(msg []byte) error {
	return c.send(func(ch *vmbus.Channel) error { return ch.SendInband(0, msg) })
}

// rndisSend copies an RNDIS message into the control section and sends
// it, once the previous control send is complete.
func (c *control) rndisSend(ctx context.Context, msg []byte) error {
	s := c.s
	if err := c.wait(ctx, func() bool { return !c.sendBusy }); err != nil {
		return err
	}
	sec := s.send.section(ctlSection)
	if len(msg) > len(sec) {
		return fmt.Errorf("netvsc: control message of %d bytes exceeds a %d-byte section", len(msg), len(sec))
	}
	copy(sec, msg)
	c.rmu.Lock()
	c.sendBusy = true
	c.rmu.Unlock()
	nv := nvsp.RNDISPacket{ChannelType: nvsp.RMCControl, SectionIndex: ctlSection, SectionSize: uint32(len(msg))}.Marshal(nil)
	err := c.send(func(ch *vmbus.Channel) error {
		_, err := ch.SendRequest(vmbus.PacketInband, cookieCtlSend, nil, nv)
		return err
	})
	if err != nil {
		c.rmu.Lock()
		c.sendBusy = false
		c.rmu.Unlock()
	}
	return err
}

// rndis sends an RNDIS request with request id rid and returns a copy of
// the completion of type want.
func (c *control) rndis(ctx context.Context, msg []byte, rid uint32, want rndis.Type) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rmu.Lock()
	c.waitRID, c.waitType, c.got, c.respN = rid, want, false, 0
	c.rmu.Unlock()
	defer func() {
		c.rmu.Lock()
		c.waitRID = 0
		c.rmu.Unlock()
	}()
	if err := c.rndisSend(ctx, msg); err != nil {
		return nil, err
	}
	if err := c.wait(ctx, func() bool { return c.got }); err != nil {
		if errors.Is(err, ErrControlTimeout) {
			c.rmu.Lock()
			c.late[c.lateNext] = rid
			c.lateNext = (c.lateNext + 1) % len(c.late)
			c.rmu.Unlock()
		}
		return nil, fmt.Errorf("netvsc: %s: %w", want, err)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return append([]byte(nil), c.resp[:c.respN]...), nil
}

// rndisNoReply sends an RNDIS message that has no answer (HALT) and waits
// for the host to complete the send.
func (c *control) rndisNoReply(ctx context.Context, msg []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.rndisSend(ctx, msg); err != nil {
		return err
	}
	return c.wait(ctx, func() bool { return !c.sendBusy })
}

// RNDISError is a control request the host answered with a failure status.
type RNDISError struct {
	Request string
	Status  rndis.Status
}

func (e *RNDISError) Error() string {
	return fmt.Sprintf("netvsc: %s: host answered %s", e.Request, e.Status)
}

// NVSPError is an NVSP request the host answered with a failure status
// (docs/protocol/netvsc.md §2.3): a refusal, not a protocol violation. Open returns one
// when the host refuses the receive or send buffer, or every NVSP version;
// Linux gives up on the device then too.
type NVSPError struct {
	Request string
	Status  nvsp.Status
}

func (e *NVSPError) Error() string {
	return fmt.Sprintf("netvsc: %s: host answered %s", e.Request, e.Status)
}

// refused counts and logs a control request or send the host answered
// with a failure status (Stats.ControlFailures).
func (s *session) refused(request, status string) {
	s.nic.ctlFailures.Add(1)
	s.log.Warn("host refused a control request", "request", request, "status", status)
}

// rndisFailed counts a failed RNDIS answer and returns it as an error.
func (s *session) rndisFailed(request string, st rndis.Status) error {
	s.refused(request, st.String())
	return &RNDISError{Request: request, Status: st}
}

// query runs an RNDIS QUERY and returns the information buffer.
func (c *control) query(ctx context.Context, oid rndis.OID, input []byte) ([]byte, error) {
	rid := c.nextRID()
	resp, err := c.rndis(ctx, rndis.Query{RequestID: rid, OID: oid, Info: input}.Marshal(nil), rid, rndis.TypeQueryComplete)
	if err != nil {
		return nil, err
	}
	var m rndis.QueryComplete
	if err := m.Unmarshal(resp); err != nil {
		c.s.fail(err)
		return nil, err
	}
	if m.Status != rndis.StatusSuccess {
		return nil, c.s.rndisFailed("query "+oid.String(), m.Status)
	}
	return m.Info, nil
}

// set runs an RNDIS SET.
func (c *control) set(ctx context.Context, oid rndis.OID, info []byte) error {
	rid := c.nextRID()
	resp, err := c.rndis(ctx, rndis.Set{RequestID: rid, OID: oid, Info: info}.Marshal(nil), rid, rndis.TypeSetComplete)
	if err != nil {
		return err
	}
	var m rndis.SetComplete
	if err := m.Unmarshal(resp); err != nil {
		c.s.fail(err)
		return err
	}
	if m.Status != rndis.StatusSuccess {
		return c.s.rndisFailed("set "+oid.String(), m.Status)
	}
	return nil
}

func (c *control) setUint32(ctx context.Context, oid rndis.OID, v uint32) error {
	return c.set(ctx, oid, rndis.AppendInfoUint32(nil, v))
}

func (c *control) queryUint32(ctx context.Context, oid rndis.OID) (uint32, error) {
	info, err := c.query(ctx, oid, nil)
	if err != nil {
		return 0, err
	}
	v, err := rndis.ParseInfoUint32(info)
	if err != nil {
		c.s.fail(err)
	}
	return v, err
}

func nvspName(msg []byte) string {
	t, err := nvsp.MessageType(msg)
	if err != nil {
		return "NVSP"
	}
	return t.String()
}

// handshake is the bring-up sequence (docs/protocol/netvsc.md §2.5, §7 guest 2-3).
func (s *session) handshake(ctx context.Context) error {
	c := s.ctl
	cfg := &s.cfg
	last := nvsp.StatusNone
	for _, v := range nvsp.Versions() {
		if v < nvsp.Version2 {
			break
		}
		resp, err := c.nvsp(ctx, nvsp.Init{MinVersion: v, MaxVersion: v}.Marshal(nil), true)
		if err != nil {
			return err
		}
		var m nvsp.InitComplete
		if err := m.Unmarshal(resp); err != nil {
			s.fail(err)
			return err
		}
		if m.Status == nvsp.StatusSuccess {
			s.version = v
			break
		}
		// openvmm answers NONE to a version it does not speak; anything
		// else is a refusal worth a line.
		last = m.Status
		if m.Status != nvsp.StatusNone {
			s.refused(fmt.Sprintf("INIT %#x", v), m.Status.String())
		}
	}
	if s.version == 0 {
		return &NVSPError{Request: "INIT 6.1 down to 2", Status: last}
	}
	caps := nvsp.NDISConfigCapIEEE8021Q
	if s.version >= nvsp.Version5 {
		caps |= nvsp.NDISConfigCapSRIOV | nvsp.NDISConfigCapTeaming
	}
	if s.wantRSC() {
		caps |= nvsp.NDISConfigCapRSCOverVMBus
	}
	if err := c.inband(nvsp.NDISConfig{MTU: uint32(s.mtu + EthernetHeaderSize), Capabilities: caps}.Marshal(nil)); err != nil {
		return err
	}
	s.ndis = nvsp.NDISVersionFor(s.version)
	if err := c.inband(nvsp.NewNDISVersion(s.ndis).Marshal(nil)); err != nil {
		return err
	}
	// Receive buffer: the GPADL and size from the uio map, the sections
	// from the host's answer (validated).
	resp, err := c.nvsp(ctx, nvsp.RecvBuf{GPADLHandle: s.recvGPADL, ID: nvsp.RecvBufID}.Marshal(nil), true)
	if err != nil {
		return err
	}
	var rb nvsp.RecvBufComplete
	if err := rb.Unmarshal(resp); err != nil {
		s.fail(err)
		return err
	}
	if rb.Status != nvsp.StatusSuccess {
		s.refused("SEND_RECV_BUF", rb.Status.String())
		return &NVSPError{Request: "SEND_RECV_BUF", Status: rb.Status}
	}
	if err := rb.Validate(len(s.recv)); err != nil {
		s.fail(err)
		return err
	}
	s.subAlloc, s.subAllocs = rb.Section.SubAllocSize, rb.Section.NumSubAllocs
	s.queues[0].initAcks()
	resp, err = c.nvsp(ctx, nvsp.SendBuf{GPADLHandle: s.sendGPADL, ID: nvsp.SendBufIDDPDK}.Marshal(nil), true)
	if err != nil {
		return err
	}
	var sb nvsp.SendBufComplete
	if err := sb.Unmarshal(resp); err != nil {
		s.fail(err)
		return err
	}
	if sb.Status != nvsp.StatusSuccess {
		s.refused("SEND_SEND_BUF", sb.Status.String())
		return &NVSPError{Request: "SEND_SEND_BUF", Status: sb.Status}
	}
	count, err := sb.SectionCount(len(s.send.mem))
	if err != nil {
		s.fail(err)
		return err
	}
	s.send.sectionSize = int(sb.SectionSize)
	s.send.sections = count
	if cfg.SendBufferLimit > 0 {
		s.send.sections = min(count, cfg.SendBufferLimit/s.send.sectionSize)
	}
	if s.send.sections < 2 {
		return fmt.Errorf("netvsc: %d send sections of %d bytes: need a control section and a data one", s.send.sections, s.send.sectionSize)
	}
	// RNDIS.
	rid := c.nextRID()
	resp, err = c.rndis(ctx, rndis.Initialize{RequestID: rid, MajorVersion: rndis.MajorVersion,
		MinorVersion: rndis.MinorVersion, MaxTransferSize: rndis.GuestMaxTransferSize}.Marshal(nil), rid, rndis.TypeInitializeComplete)
	if err != nil {
		return err
	}
	var ic rndis.InitializeComplete
	if err := ic.Unmarshal(resp); err != nil {
		s.fail(err)
		return err
	}
	if ic.Status != rndis.StatusSuccess {
		return s.rndisFailed("initialize", ic.Status)
	}
	s.maxPkts = int(min(max(ic.MaxPacketsPerMessage, 1), 64))
	s.maxXfer = int(min(uint64(ic.MaxTransferSize), 1<<30))
	s.align = ic.PacketAlignment()
	s.aggMax = min(s.send.sectionSize, s.maxXfer)
	if s.aggMax < rndis.PacketHeaderSize+EthernetHeaderSize {
		return fmt.Errorf("netvsc: RNDIS max transfer size %d too small", s.maxXfer)
	}
	// DPDK: the filter may not be 0 after INITIALIZE on some hosts.
	if err := c.setUint32(ctx, rndis.OIDGenCurrentPacketFilter, rndis.NDISPacketTypeNone); err != nil {
		return err
	}
	mfs, err := c.queryUint32(ctx, rndis.OIDGenMaximumFrameSize)
	if err != nil {
		return err
	}
	if int(mfs) < s.mtu {
		if mfs < MinMTU {
			return fmt.Errorf("netvsc: host maximum frame size %d below the minimum MTU", mfs)
		}
		s.log.Info("host lowered the MTU", "asked", s.mtu, "mtu", mfs)
		s.mtu = int(mfs)
	}
	// The largest frame a send section holds, with the per-packet info a
	// frame can carry (hash, VLAN, checksum). Bigger ones go GPA-direct
	// only; without a pool they are dropped (tx_queue_N_drop_oversize).
	if copyMax := s.aggMax - rndis.PacketHeaderSize - 3*rndis.PPIUint32Size; cfg.GPAPool == nil && s.mtu+EthernetHeaderSize > copyMax {
		s.log.Warn("no GPA pool: frames larger than a send section will be dropped", "mtu", s.mtu,
			"send_section", s.send.sectionSize, "largest_frame", copyMax)
	}
	info, err := c.query(ctx, rndis.OID8023PermanentAddress, nil)
	if err != nil {
		return err
	}
	if s.mac, err = rndis.ParseInfoMAC(info); err != nil {
		s.fail(err)
		return err
	}
	if err := s.queryLink(ctx); err != nil {
		return err
	}
	if !cfg.NoOffloads {
		if err := s.setOffloads(ctx); err != nil {
			s.log.Warn("offloads not enabled", "err", err)
			s.off = offloads{}
		}
	}
	// Queues.
	granted := 0
	var subs []*vmbus.Channel
	if cfg.Queues > 1 && s.version >= nvsp.Version5 {
		granted, subs, err = s.openSubchannels(ctx)
		if err != nil {
			return err
		}
	}
	for i, ch := range subs {
		q, err := newQueue(s, i+1, ch)
		if err != nil {
			return err
		}
		s.queues = append(s.queues, q)
	}
	for _, q := range s.queues {
		q.assignSections(len(s.queues))
	}
	if len(s.queues) > 1 {
		if err := s.setRSS(ctx); err != nil {
			s.log.Warn("RSS not set: receive stays on queue 0", "err", err)
		}
	}
	s.running.Store(true)
	filter := rndis.NDISPacketFilterDefault
	if cfg.Promiscuous {
		filter = rndis.NDISPacketTypePromiscuous
	}
	if err := c.setUint32(ctx, rndis.OIDGenCurrentPacketFilter, filter); err != nil {
		return err
	}
	s.log.Info("netvsc up", "nvsp", fmt.Sprintf("%#x", s.version), "ndis", fmt.Sprintf("%#x", s.ndis),
		"mac", net.HardwareAddr(s.mac[:]).String(), "mtu", s.mtu, "queues", len(s.queues), "granted", granted,
		"recv_sections", s.subAllocs, "recv_section_size", s.subAlloc,
		"send_sections", s.send.sections, "send_section_size", s.send.sectionSize,
		"rndis_max_pkts", s.maxPkts, "rndis_align", s.align, "link", s.linkUp.Load())
	return nil
}

// queryLink reads OID_GEN_MEDIA_CONNECT_STATUS and OID_GEN_LINK_SPEED.
func (s *session) queryLink(ctx context.Context) error {
	st, err := s.ctl.queryUint32(ctx, rndis.OIDGenMediaConnectStatus)
	if err != nil {
		return err
	}
	sp, err := s.ctl.queryUint32(ctx, rndis.OIDGenLinkSpeed)
	if err != nil {
		if _, rej := err.(*RNDISError); !rej {
			return err
		}
	}
	s.setLink(st == rndis.NDISMediaStateConnected, rndis.LinkSpeed(sp).Bps())
	return nil
}

func (s *session) setLink(up bool, speed uint64) {
	changed := s.linkUp.Swap(up) != up
	if speed != 0 {
		changed = s.speed.Swap(speed) != speed || changed
	}
	if changed {
		s.log.Info("link", "up", up, "speed", speed)
		s.nic.notifyLink()
	}
}

// wantRSC reports whether the session asks for RSC over VMBus: the
// configuration wants it, offloads are on, and the NVSP version is 6.1
// or later (docs/protocol/netvsc.md §2.5).
func (s *session) wantRSC() bool {
	return s.cfg.RSC && !s.cfg.NoOffloads && s.version >= nvsp.Version61
}

// setOffloads queries the host's offload capabilities and enables the
// checksum and LSOv2 offloads it has (docs/protocol/netvsc.md §3.6).
func (s *session) setOffloads(ctx context.Context) error {
	info, err := s.ctl.query(ctx, rndis.OIDTCPOffloadHardwareCapabilities, rndis.OffloadQueryHeader(s.version).Marshal(nil))
	if err != nil {
		return err
	}
	var o rndis.Offload
	if err := o.Unmarshal(info); err != nil {
		return err
	}
	const full = rndis.NDISChecksumCapTCP | rndis.NDISChecksumCapTCPOptions
	var off offloads
	p := rndis.OffloadParameters{Header: rndis.OffloadParametersHeader(s.version), IPv4Checksum: rndis.NDISOffloadParametersTxRxDisabled,
		TCPIPv4Checksum: rndis.NDISOffloadParametersTxRxDisabled, UDPIPv4Checksum: rndis.NDISOffloadParametersTxRxDisabled,
		TCPIPv6Checksum: rndis.NDISOffloadParametersTxRxDisabled, UDPIPv6Checksum: rndis.NDISOffloadParametersTxRxDisabled,
		LSOv2IPv4: rndis.NDISOffloadParametersDisabled, LSOv2IPv6: rndis.NDISOffloadParametersDisabled}
	if o.Checksum.IPv4TxFlags&full == full {
		p.TCPIPv4Checksum, off.tcp4 = rndis.NDISOffloadParametersTxRxEnabled, true
	}
	if o.Checksum.IPv4TxFlags&rndis.NDISChecksumCapUDP != 0 && s.version > nvsp.Version4 {
		p.UDPIPv4Checksum, off.udp4 = rndis.NDISOffloadParametersTxRxEnabled, true
	}
	if o.Checksum.IPv6TxFlags&full == full {
		p.TCPIPv6Checksum, off.tcp6 = rndis.NDISOffloadParametersTxRxEnabled, true
	}
	if o.Checksum.IPv6TxFlags&rndis.NDISChecksumCapUDP != 0 && s.version > nvsp.Version4 {
		p.UDPIPv6Checksum, off.udp6 = rndis.NDISOffloadParametersTxRxEnabled, true
	}
	if o.LSOv2.IPv4MaxSize > 0 && o.LSOv2.IPv4Encapsulation&rndis.NDISOffloadEncap8023 != 0 {
		p.LSOv2IPv4, off.lso4 = rndis.NDISOffloadParametersEnabled, int(min(o.LSOv2.IPv4MaxSize, 1<<20))
	}
	const v6 = rndis.NDISLSOv2CapIP6Ext | rndis.NDISLSOv2CapTCP6Opt
	if o.LSOv2.IPv6MaxSize > 0 && o.LSOv2.IPv6Options&v6 == v6 && o.LSOv2.IPv6Encapsulation&rndis.NDISOffloadEncap8023 != 0 {
		p.LSOv2IPv6, off.lso6 = rndis.NDISOffloadParametersEnabled, int(min(o.LSOv2.IPv6MaxSize, 1<<20))
	}
	if s.wantRSC() && o.Header.Revision >= rndis.NDISOffloadRevision3 && (o.RSCIPv4 != 0 || o.RSCIPv6 != 0) {
		// RSC over VMBus, for the families the host coalesces
		// (docs/protocol/netvsc.md §3.4, §3.6).
		if o.RSCIPv4 != 0 {
			p.RSCIPv4 = rndis.NDISOffloadParametersEnabled
		}
		if o.RSCIPv6 != 0 {
			p.RSCIPv6 = rndis.NDISOffloadParametersEnabled
		}
		off.rsc = true
	}
	if err := s.ctl.set(ctx, rndis.OIDTCPOffloadParameters, p.Marshal(nil)); err != nil {
		return err
	}
	s.off = off
	return nil
}

// openSubchannels asks for cfg.Queues-1 sub-channels (bounded by the
// host's RSS capabilities), accepts a partial grant, and maps those whose
// rings appear in time (docs/protocol/netvsc.md §2.8).
func (s *session) openSubchannels(ctx context.Context) (int, []*vmbus.Channel, error) {
	c := s.ctl
	want := s.cfg.Queues
	info, err := c.query(ctx, rndis.OIDGenReceiveScaleCapabilities, rndis.RSSCapabilitiesQueryHeader().Marshal(nil))
	if err != nil {
		if _, rej := err.(*RNDISError); rej {
			s.log.Warn("no RSS capabilities: one queue", "err", err)
			return 0, nil, nil
		}
		return 0, nil, err
	}
	var caps rndis.RSSCapabilities
	if err := caps.Unmarshal(info); err != nil {
		s.fail(err)
		return 0, nil, err
	}
	want = min(want, int(caps.NumReceiveQueues), nvsp.MaxSubchannels)
	if want < 2 {
		return 0, nil, nil
	}
	resp, err := c.nvsp(ctx, nvsp.SubchannelRequest{Op: nvsp.SubchannelAllocate, Count: uint32(want - 1)}.Marshal(nil), true)
	if err != nil {
		return 0, nil, err
	}
	var m nvsp.SubchannelComplete
	if err := m.Unmarshal(resp); err != nil {
		s.fail(err)
		return 0, nil, err
	}
	if m.Status != nvsp.StatusSuccess {
		s.refused("SUBCHANNEL", m.Status.String())
		s.log.Warn("no sub-channels: one queue")
		return 0, nil, nil
	}
	granted := int(m.Count)
	if granted > want-1 {
		s.log.Warn("host granted more sub-channels than asked", "asked", want-1, "granted", granted)
		granted = want - 1
	}
	if granted == 0 {
		return 0, nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.SubchannelTimeout)
	subs, err := s.h.OpenSubchannels(wctx, granted)
	cancel()
	if err != nil {
		return granted, nil, err
	}
	if len(subs) < granted {
		s.log.Warn("sub-channels missing: fewer queues", "granted", granted, "opened", len(subs))
	}
	return granted, subs, nil
}

// setRSS disables RSS, then sets the rndis.Toeplitz key and an indirection table
// spreading flows over the queues (the host requires the disable first,
// DPDK b604e80632).
func (s *session) setRSS(ctx context.Context) error {
	off := rndis.RSSParameters{Flags: rndis.NDISRSSParamFlagDisableRSS | rndis.NDISRSSParamFlagBaseCPUUnchanged |
		rndis.NDISRSSParamFlagHashInfoUnchanged | rndis.NDISRSSParamFlagITableUnchanged | rndis.NDISRSSParamFlagHashKeyUnchanged}
	if err := s.ctl.set(ctx, rndis.OIDGenReceiveScaleParameters, off.Marshal(nil)); err != nil {
		return err
	}
	key := s.cfg.RSSKey
	if key == nil {
		k := rndis.MicrosoftRSSKey()
		key = k[:]
	}
	var table [rndis.RSSIndirectionTableEntries]uint32
	for i := range table {
		table[i] = uint32(i % len(s.queues))
	}
	p := rndis.NewRSSParameters(rndis.NDISHashFunctionToeplitz|rndis.NDISHashIPv4|rndis.NDISHashTCPIPv4|rndis.NDISHashIPv6|rndis.NDISHashTCPIPv6, key, table[:])
	return s.ctl.set(ctx, rndis.OIDGenReceiveScaleParameters, p.Marshal(nil))
}

// rndisControl handles an RNDIS control message received on any queue.
func (s *session) rndisControl(q *Queue, msg []byte) error {
	t := rndis.Type(le.Uint32(msg))
	switch t {
	case rndis.TypeIndicateStatus:
		var m rndis.IndicateStatus
		if err := m.Unmarshal(msg); err != nil {
			return err
		}
		s.indicate(&m)
	case rndis.TypeInitializeComplete, rndis.TypeQueryComplete, rndis.TypeSetComplete, rndis.TypeKeepaliveComplete, rndis.TypeSetExComplete:
		_, id, err := rndis.CompletionRequestID(msg)
		if err != nil {
			return err
		}
		return s.ctl.onRNDIS(t, id, msg)
	case rndis.TypeResetComplete, rndis.TypeKeepalive, rndis.TypeReset, rndis.TypeHalt:
		// Known messages no guest acts on (Linux answers a host
		// KEEPALIVE with FAIL; neither guest handles one): counted.
		s.nic.hostEvent("rndis " + t.String())
	default:
		return protoerr.New("RNDIS", protoerr.KindType, "type", uint64(t))
	}
	return nil
}

// indicate applies an INDICATE_STATUS (docs/protocol/netvsc.md §2.11).
func (s *session) indicate(m *rndis.IndicateStatus) {
	s.nic.hostEvent("indicate " + m.Status.String())
	switch m.Status {
	case rndis.StatusMediaConnect:
		s.setLink(true, 0)
	case rndis.StatusMediaDisconnect:
		s.setLink(false, 0)
	case rndis.StatusLinkSpeedChange:
		if v, err := rndis.ParseInfoUint32(m.Buf); err == nil {
			s.setLink(s.linkUp.Load(), rndis.LinkSpeed(v).Bps())
		}
	case rndis.StatusNetworkChange:
		// Linux emulates down then up so that addresses are renewed.
		s.setLink(false, 0)
		s.setLink(true, 0)
	}
}

// inband handles an NVSP message the host sent inband.
func (s *session) inband(q *Queue, p *vmbus.Packet) error {
	b := p.Payload()
	t, err := nvsp.MessageType(b)
	if err != nil {
		return err
	}
	s.nic.hostEvent(t.String())
	switch t {
	case nvsp.TypeSendIndirectionTable:
		var m nvsp.IndirectionTable
		if err := m.UnmarshalVersion(b, s.version); err != nil {
			return err
		}
		for _, e := range m.Table {
			if e >= nvsp.MaxSubchannels {
				return protoerr.New("SEND_INDIRECTION_TABLE", protoerr.KindRSSEntry, "table", uint64(e))
			}
		}
		for i, e := range m.Table {
			s.sendTable[i].Store(e)
		}
		s.hasTable.Store(true)
	case nvsp.TypeSendVFAssociation:
		var m nvsp.VFAssociation
		if err := m.Unmarshal(b); err != nil {
			return err
		}
		var v uint64
		if m.Allocated != 0 {
			v = 1<<32 | uint64(m.Serial)
		}
		s.vf.Store(v)
		s.log.Info("VF association", "allocated", m.Allocated != 0, "serial", m.Serial)
		s.nic.vfAssociation(s, m.Allocated != 0, m.Serial)
	case nvsp.TypeSwitchDataPath:
		var m nvsp.SwitchDataPath
		if err := m.Unmarshal(b); err != nil {
			return err
		}
		s.vfPath.Store(m.ActiveDataPath)
		s.log.Info("host switched the data path", "vf", m.ActiveDataPath == nvsp.DataPathVF)
		s.nic.vfHostSwitch(s, m.ActiveDataPath)
	}
	// Linux ignores completion-requested on host inband packets and
	// openvmm never waits for one (docs/protocol/netvsc.md §2.9): no completion sent.
	return nil
}
