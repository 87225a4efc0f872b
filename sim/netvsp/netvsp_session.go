package netvsp

// One guest open of a NIC: the NVSP state, and one host loop per channel.
//
// Every channel (primary and sub-channels) has one goroutine, runChannel,
// which owns both directions of its rings:
//
//	loop:
//	  drain the guest-to-host ring (masked: the guest need not signal while
//	  we drain), keeping room to answer each packet; complete sends, take
//	  receive completions back, answer NVSP and RNDIS (primary only)
//	  primary: due control messages (RNDIS completions, indications),
//	  events (link, VF, sub-channels open -> send indirection table)
//	  deliver queued frames as transfer-page packets (runs of receive
//	  sub-allocations; waits for the guest's completions when out of them)
//	  commit the read index (signal a blocked guest), flush (signal on
//	  empty -> non-empty when the guest has not masked)
//	  nothing done: unmask, re-check, set pending_send_sz if the
//	  host-to-guest ring is full, sleep until the guest signals, a frame
//	  or event arrives, a timer is due, or WakeTimeout (then re-check, and
//	  count a missed wake-up if there was work)
//
// The primary's goroutine is the only writer of the NVSP state (nv) and of
// cfg, which it republishes (copy on write) for the other channels.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

// sessCfg is the negotiated state every channel's loop reads. Immutable
// once published.
type sessCfg struct {
	version, ndisVersion uint32
	mtu                  int // NDIS config MTU with the Ethernet header
	caps                 uint64
	recvReady            bool
	recvID               uint16
	subSize, subCount    uint32
	perQueue             uint32 // data sub-allocations per queue partition
	queues               int    // partitions
	sendReady            bool
	sendSecSize          uint32
	sendSecCount         uint32
	rndisReady           bool // INITIALIZE answered, no HALT yet
	stopped              bool // receive buffer revoked or RNDIS halted: no more receive data
	filter               uint32
	rss                  *rssState
	lso4, lso6           bool
	rsc4, rsc6           bool // rsc_ip4/rsc_ip6 last set on (effective only with rscOn's conditions)
	dataPathVF           bool
	granted              int  // sub-channels granted
	settingUp            bool // sub-channels requested, not all open yet
}

// rscOn reports whether the host coalesces TCP over IPv6 (v6) or IPv4
// for the guest: only at NVSP 6.1 or later, with the RSC capability in
// the guest's NDIS_CONFIG and RSC on in its offload parameters
// (docs/protocol/netvsc.md §3.4).
func (c *sessCfg) rscOn(v6 bool) bool {
	if c.version < nvsp.Version61 || c.caps&nvsp.NDISConfigCapRSCOverVMBus == 0 {
		return false
	}
	if v6 {
		return c.rsc6
	}
	return c.rsc4
}

// partition returns queue q's data sub-allocations [lo, hi).
func (c *sessCfg) partition(q int) (lo, hi uint32) {
	lo = rxControlSections + uint32(q)*c.perQueue
	hi = lo + c.perQueue
	if q == c.queues-1 {
		hi = c.subCount
	}
	return lo, hi
}

// rssState is the guest's RSS configuration.
type rssState struct {
	key   [rndis.RSSHashKeySize]byte
	types rndis.HashInfo
	table []uint32
}

// nvspState is the primary goroutine's handshake bookkeeping.
type nvspState struct {
	haveConfig, haveNDISVer bool
	subRequested            bool
	opened                  int // sub-channels open
	tableSent               bool
	vfOffered               bool // VF_ASSOCIATION{1} sent and not withdrawn
	vfEver                  bool // VF_ASSOCIATION{1} sent in this session
	vfDue                   time.Time
	rndisInit               bool
	halted                  bool
}

// ctlMsg is an RNDIS message for the guest's control pool: a completion
// (due when the control delay has passed) or an indication.
type ctlMsg struct {
	due time.Time
	b   []byte
}

// ctlEvent is posted to the primary by other goroutines.
type ctlEvent struct {
	kind  int
	up    bool
	delay time.Duration
	due   time.Time
	ch    *bus.Channel
	done  chan struct{} // closed once handled (evVF, evSubchannel)
}

const (
	evLink = iota + 1
	evVF
	evSubchannel     // a granted sub-channel opened (ch)
	evSubchannelDone // every offer settled
)

// nicSession is one guest open of a NIC. The primary channel's goroutine
// owns the fields marked so; cfg and chans are published copy-on-write for
// the other goroutines.
type nicSession struct {
	n      *NIC
	s      *bus.Session
	ctx    context.Context // ends with the session, or when the primary's loop fails
	cancel context.CancelFunc
	log    *slog.Logger

	recv, send           []byte
	recvGPADL, sendGPADL uint32
	mem                  bus.GuestMemory
	memErr               error

	cfg   atomic.Pointer[sessCfg]
	chans atomic.Pointer[[]*nicChan] // by sub-channel index; replaced, never mutated
	wg    sync.WaitGroup

	// Primary goroutine only.
	nv         nvspState
	ctl        []ctlMsg
	ctlStalled bool
	nvBuf      []byte
	primary    *nicChan

	evMu   sync.Mutex
	events []ctlEvent
}

func newNICSession(ctx context.Context, n *NIC, s *bus.Session) (*nicSession, error) {
	ss := &nicSession{n: n, s: s, log: n.log.With("pid", s.GuestPID()), nvBuf: make([]byte, 0, 256)}
	ss.ctx, ss.cancel = context.WithCancel(ctx)
	ss.recv, ss.send, ss.recvGPADL, ss.sendGPADL = s.Device().Buffers()
	if ss.recv == nil {
		return nil, fmt.Errorf("sim: nic: device has no receive and send buffers")
	}
	switch n.cfg.Memory {
	case bus.GuestMemFile:
		ss.mem, ss.memErr = bus.OpenFileGuestMemory(n.host.Root())
	case bus.GuestMemProc:
		ss.mem, ss.memErr = bus.OpenProcGuestMemory(s.GuestPID())
	}
	if ss.memErr != nil {
		ss.log.Warn("guest memory unavailable: GPA-direct sends will fail", "err", ss.memErr)
	}
	ss.cfg.Store(&sessCfg{})
	ss.primary = newNICChan(ss, s.Primary(), 0)
	ss.chans.Store(&[]*nicChan{ss.primary})
	return ss, nil
}

func (ss *nicSession) channels() []*nicChan { return *ss.chans.Load() }

func (ss *nicSession) publish(f func(c *sessCfg)) {
	c := *ss.cfg.Load()
	f(&c)
	ss.cfg.Store(&c)
}

// run serves the session until the guest closes the device.
func (ss *nicSession) run() error {
	ss.log.Info("netvsp session started", "memory", ss.n.cfg.Memory.String())
	err := ss.primary.runChannel()
	// The primary's end ends the session: the guest closed or the ring
	// broke; sub-channel loops follow the context.
	ss.cancel()
	ss.wg.Wait()
	ss.finish()
	if errors.Is(err, context.Canceled) || errors.Is(err, vmbus.ErrChannelClosed) {
		err = nil
	}
	return err
}

// finish accounts what the guest left unacknowledged and frees guest
// memory access.
func (ss *nicSession) finish() {
	var unacked []any
	for _, c := range ss.channels() {
		if c == nil {
			continue
		}
		u := uint64(c.outstanding.Load())
		rp, rt, tp := c.rxPackets.Load(), c.rxTransfers.Load(), c.txPackets.Load()
		ss.n.st.chanAdd(c.idx, func(cc *ChannelCounters) {
			cc.UnackedAtClose += u
			cc.RxPackets += rp
			cc.RxTransfers += rt
			cc.TxPackets += tp
		})
		unacked = append(unacked, fmt.Sprintf("ch%d", c.idx), u)
	}
	if ss.mem != nil {
		ss.mem.Close()
	}
	ss.log.Info("netvsp session ended; receive packets the guest left unacknowledged", unacked...)
}

// post hands an event to the primary's loop.
func (ss *nicSession) post(ev ctlEvent) {
	if ev.delay > 0 {
		ev.due = time.Now().Add(ev.delay)
	}
	ss.evMu.Lock()
	ss.events = append(ss.events, ev)
	ss.evMu.Unlock()
	ss.primary.poke()
}

func (ss *nicSession) violation(what string) {
	ss.n.host.Violation(ss.n.cfg.Instance, "netvsp: "+what)
}

// msgSize is the size of NVSP messages the host sends: openvmm's 28 below
// NVSP 6.1 and 40 at 6.1 (docs/protocol/netvsc.md §2.1).
func (ss *nicSession) msgSize() int {
	v := ss.cfg.Load().version
	if v == 0 {
		return nvsp.MessageSize
	}
	return nvsp.MessageSizeFor(v)
}

// nvspMsg pads or truncates an NVSP message to the host's message size.
func (ss *nicSession) nvspMsg(b []byte) []byte {
	size := ss.msgSize()
	for len(b) < size {
		b = append(b, 0)
	}
	return b[:size]
}

// deliver is the vSwitch's side of Uplink.Deliver for this session.
func (ss *nicSession) deliver(frames [][]byte) int {
	cfg := ss.cfg.Load()
	chans := ss.channels()
	queued := 0
	var b pushBatch
	for _, f := range frames {
		if ss.enqueue(cfg, chans, f, 0, &b) {
			queued++
		}
	}
	b.done()
	ss.pokeAll(chans)
	return queued
}

func (ss *nicSession) pokeAll(chans []*nicChan) {
	for _, c := range chans {
		if c != nil && c.rxq.pending() {
			c.poke()
		}
	}
}

// enqueue applies the packet filter, the MTU (unless the frame goes
// coalesced: a super-frame of segs wire frames, 0 for an ordinary frame)
// and RSS to one frame and queues it on its channel, in batch b (nil:
// alone).
func (ss *nicSession) enqueue(cfg *sessCfg, chans []*nicChan, f []byte, segs int, b *pushBatch) bool {
	coalesced := segs > 0
	st := &ss.n.st
	if !vswitch.FilterAccepts(cfg.filter, f, ss.n.mac) {
		st.rxFiltered.Add(1)
		return false
	}
	l := len(f)
	if _, tagged := vswitch.FrameTagged(f); tagged {
		l -= vswitch.VLANTagLen
	}
	if (l > cfg.mtu && !coalesced) || l < vswitch.EthHeaderLen {
		st.rxTooBig.Add(1)
		return false
	}
	q, hash, typ := 0, uint32(0), rndis.HashInfo(0)
	if r := cfg.rss; r != nil {
		f2 := f
		if _, tagged := vswitch.FrameTagged(f); tagged {
			f2 = vswitch.StripVLAN(nil, f)
		}
		if h, t, ok := vswitch.RSSInput(r.key[:], r.types, f2); ok {
			hash, typ = h, t|rndis.NDISHashFunctionToeplitz
			q = int(rndis.IndirectionLookup(r.table, h))
		}
	}
	if q >= len(chans) || chans[q] == nil {
		q = 0 // a channel the guest has not opened: the primary
	}
	if b.push(&chans[q].rxq, f, hash, typ, coalesced, max(segs, 1)) {
		return true
	}
	st.rxDropped.Add(1)
	return false
}

// nicChan is the host loop of one channel. Its goroutine (runChannel)
// owns it; deliver pushes into rxq and pokes kick from any goroutine, and
// Stats reads the atomic counters.
type nicChan struct {
	ss                *nicSession
	c                 *bus.Channel
	idx               int
	kick              chan struct{}
	rxq               frameQueue
	data              sectionRing
	ctl               sectionRing // primary only: the control pool
	ctlInit, dataInit bool

	outstanding atomic.Int64 // transfer-page packets the guest has not completed

	// Host-to-guest ring flow control.
	blockedOut bool
	needOut    int

	// Scratch, reused: a private copy of a guest send's RNDIS bytes, the
	// frames a batch forwards, a transfer-page header.
	rndis   []byte
	tx      txBatch
	xfer    []byte
	xmsg    []byte
	vlanBuf []byte

	// aliases are transaction ids faults put on packets in place of (or
	// besides) their run's id.
	aliases map[uint64][]uint32

	rscID uint16 // the packet id of the next coalesced frame

	rxPackets, rxTransfers, txPackets atomic.Uint64
}

func newNICChan(ss *nicSession, c *bus.Channel, idx int) *nicChan {
	return &nicChan{ss: ss, c: c, idx: idx, kick: make(chan struct{}, 1), rxq: newFrameQueue(ss.n.cfg.QueueLen),
		rndis: make([]byte, 0, 64<<10), xfer: make([]byte, 0, 8+8*nvsp.RSCMax),
		xmsg: make([]byte, 0, 64), tx: newTxBatch()}
}

func (ch *nicChan) poke() {
	select {
	case ch.kick <- struct{}{}:
	default:
	}
}

// Bounds of one pass of the loop.
const (
	drainBatch = 256
	// respReserve is ring space kept for answering one guest packet
	// (a completion of the largest NVSP message, or a send indirection
	// table before it with the table-during-sync fault).
	respReserve = 256
)

func (ch *nicChan) runChannel() error {
	log := ch.ss.log.With("channel", ch.idx)
	log.Debug("netvsp channel loop started")
	defer log.Debug("netvsp channel loop stopped")
	c := ch.c
	ctx := ch.ss.ctx
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		if err := c.Throttle(ctx); err != nil {
			return err
		}
		progress, err := ch.pass()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if progress {
			continue
		}
		if err := ch.wait(t); err != nil {
			return err
		}
	}
}

// pass does one round of work and reports whether anything happened.
func (ch *nicChan) pass() (bool, error) {
	c := ch.c
	progress := false
	ch.blockedOut = false
	for i := 0; i < drainBatch; i++ {
		if c.Out().Free() <= respReserve {
			ch.blockedOut, ch.needOut = true, respReserve
			break
		}
		p, err := c.Recv()
		if err == vmbus.ErrRingEmpty {
			break
		}
		if err != nil {
			if ce, ok := vmbus.IsCorrupt(err); ok {
				ch.ss.violation("corrupt guest ring: " + ce.Kind.String())
			}
			return false, err
		}
		progress = true
		if err := ch.handle(&p); err != nil {
			return false, err
		}
	}
	ch.flushTx()
	if ch.idx == 0 {
		if ch.ss.controlWork(ch) {
			progress = true
		}
	}
	if ch.deliver() {
		progress = true
	}
	if err := c.CommitRecv(); err != nil {
		return false, err
	}
	if err := c.Flush(); err != nil {
		return false, err
	}
	return progress, nil
}

// wait sleeps until there may be work: the guest signals, a frame or
// event arrives, a timer is due, or WakeTimeout passes.
func (ch *nicChan) wait(t *time.Timer) error {
	c := ch.c
	in, out := c.In(), c.Out()
	// Unmask, then re-check: a packet written while we were masked raised
	// no signal (docs/protocol/vmbus-ring.md §2.4, the host's drain contract).
	// BeginWait first and EndWait last: the monitor scanner runs only while
	// a host end waits with its mask clear or its pending_send_sz set.
	c.BeginWait()
	defer c.EndWait()
	in.SetInterruptMask(false)
	defer in.SetInterruptMask(true)
	if in.Available() > 0 {
		return nil
	}
	if ch.blockedOut && out.PendingSendSupported() {
		out.SetPendingSend(ch.needOut + 8)
		defer out.ClearPendingSend()
		if out.Free() > ch.needOut {
			return nil
		}
	}
	d := ch.ss.n.cfg.WakeTimeout
	if ch.idx == 0 {
		if next, ok := ch.ss.nextDue(); ok {
			d = min(d, max(time.Until(next), 0))
		}
	}
	t.Reset(d)
	select {
	case <-ch.c.Wake():
		t.Stop()
	case <-ch.kick:
		t.Stop()
	case <-t.C:
		if in.Available() > 0 || (ch.blockedOut && out.Free() > ch.needOut) {
			ch.ss.n.st.missedWakeups.Add(1)
		}
	case <-ch.ss.ctx.Done():
		t.Stop()
		return ch.ss.ctx.Err()
	case <-c.Dead():
		t.Stop()
		return c.Err()
	}
	return nil
}

// handle dispatches one packet from the guest.
func (ch *nicChan) handle(p *vmbus.Packet) error {
	switch p.Type {
	case vmbus.PacketCompletion:
		ch.handleCompletion(p)
		return nil
	case vmbus.PacketTransferPage:
		ch.ss.violation("guest sent a transfer-page packet")
		return nil
	}
	pl := p.Payload()
	t, err := nvsp.MessageType(pl)
	if err != nil {
		ch.ss.violation("packet without an NVSP message")
		return nil
	}
	if t == nvsp.TypeSendRNDISPkt {
		return ch.handleRNDIS(p)
	}
	if p.Type == vmbus.PacketGPADirect {
		ch.ss.violation("GPA-direct packet carrying " + t.String())
		return nil
	}
	if ch.idx != 0 {
		ch.ss.violation("NVSP control message " + t.String() + " on a sub-channel")
		return nil
	}
	return ch.ss.handleNVSP(ch, p, t)
}

// handleCompletion takes back the receive sub-allocations of a
// transfer-page packet the guest completed (docs/protocol/netvsc.md §2.6).
func (ch *nicChan) handleCompletion(p *vmbus.Packet) {
	var m nvsp.RNDISComplete
	pl := p.Payload()
	tid := p.TransID
	if tid&hostRequestTID != 0 {
		return // a guest completing a host-initiated inband message
	}
	if err := m.Unmarshal(pl); err != nil {
		ch.ss.violation("receive completion that is not SEND_RNDIS_PKT_COMPLETE")
	}
	switch {
	case ch.idx == 0 && ch.ctlInit && tid < rxControlSections && ch.ctl.release(uint32(tid)):
	case ch.dataInit && tid <= 0xffffffff && ch.data.release(uint32(tid)):
		ch.outstanding.Add(-1)
	case len(ch.aliases[tid]) > 0:
		start := ch.aliases[tid][0]
		if ch.aliases[tid] = ch.aliases[tid][1:]; len(ch.aliases[tid]) == 0 {
			delete(ch.aliases, tid)
		}
		if ch.data.release(start) {
			ch.outstanding.Add(-1)
		}
	default:
		ch.ss.violation("completion for an unknown receive transaction")
	}
}

// hostRequestTID marks the transaction ids of host-initiated inband
// messages (openvmm: VF association 0x8000000000000000, data path switch
// 0x8000000000000001).
const hostRequestTID = 1 << 63

// initRings sets up the channel's receive sub-allocations once the
// receive buffer is known.
func (ch *nicChan) initRings(cfg *sessCfg) {
	if ch.dataInit || !cfg.recvReady {
		return
	}
	lo, hi := cfg.partition(ch.idx)
	ch.data.init(lo, hi)
	ch.dataInit = true
	if ch.idx == 0 {
		ch.ctl.init(0, rxControlSections)
		ch.ctlInit = true
	}
}

// nextDue returns the earliest time the primary has work scheduled.
func (ss *nicSession) nextDue() (time.Time, bool) {
	var next time.Time
	ok := false
	take := func(t time.Time) {
		if !t.IsZero() && (!ok || t.Before(next)) {
			next, ok = t, true
		}
	}
	if len(ss.ctl) > 0 && !ss.ctlStalled {
		take(ss.ctl[0].due)
	}
	take(ss.nv.vfDue)
	ss.evMu.Lock()
	for _, ev := range ss.events {
		if ev.due.IsZero() {
			take(time.Now())
		} else {
			take(ev.due)
		}
	}
	ss.evMu.Unlock()
	return next, ok
}

// controlWork runs the primary's scheduled work: events, the VF offer,
// and control messages that are due. It reports progress.
func (ss *nicSession) controlWork(ch *nicChan) bool {
	progress := false
	now := time.Now()
	ss.evMu.Lock()
	var evs []ctlEvent
	rest := ss.events[:0]
	for _, ev := range ss.events {
		if ev.due.IsZero() || !now.Before(ev.due) {
			evs = append(evs, ev)
		} else {
			rest = append(rest, ev)
		}
	}
	ss.events = rest
	ss.evMu.Unlock()
	for _, ev := range evs {
		progress = true
		ss.handleEvent(ch, ev)
	}
	if ss.n.faults.take(NICFaultUnknownCompletion) {
		b := padTo(nvsp.RNDISComplete{Status: nvsp.StatusSuccess}.Marshal(ss.nvBuf[:0]), ss.msgSize())
		ch.c.SendCompletion(0xdeadbeef00, b)
		progress = true
	}
	if !ss.nv.vfDue.IsZero() && !now.Before(ss.nv.vfDue) {
		ss.nv.vfDue = time.Time{}
		ss.offerVF(ch, true)
		progress = true
	}
	ss.ctlStalled = false
	for len(ss.ctl) > 0 && !now.Before(ss.ctl[0].due) {
		if !ch.sendControl(ss.ctl[0].b) {
			// Out of control sub-allocations or ring space: the guest's
			// completion or its pending_send_sz signal wakes us.
			ss.ctlStalled = true
			break
		}
		ss.ctl = ss.ctl[1:]
		progress = true
	}
	return progress
}

// queueControl schedules an RNDIS message for the guest's control pool,
// in due order (stable).
func (ss *nicSession) queueControl(b []byte, delay time.Duration) {
	m := ctlMsg{due: time.Now().Add(delay), b: b}
	i := len(ss.ctl)
	for i > 0 && m.due.Before(ss.ctl[i-1].due) {
		i--
	}
	ss.ctl = slices.Insert(ss.ctl, i, m)
}

func (ss *nicSession) handleEvent(ch *nicChan, ev ctlEvent) {
	cfg := ss.cfg.Load()
	switch ev.kind {
	case evLink:
		if cfg.rndisReady {
			st := rndis.StatusMediaDisconnect
			if ev.up {
				st = rndis.StatusMediaConnect
			}
			ss.indicate(rndis.IndicateStatus{Status: st})
		}
	case evVF:
		ss.offerVF(ch, ev.up)
		if ev.done != nil {
			close(ev.done)
		}
	case evSubchannel:
		c := newNICChan(ss, ev.ch, int(ev.ch.SubchannelID()))
		c.initRings(cfg)
		cs := slices.Clone(ss.channels())
		for len(cs) <= c.idx {
			cs = append(cs, nil)
		}
		cs[c.idx] = c
		ss.chans.Store(&cs)
		ss.nv.opened++
		ss.wg.Add(1)
		go func() {
			defer ss.wg.Done()
			if err := c.runChannel(); err != nil && ss.ctx.Err() == nil {
				ss.log.Warn("netvsp sub-channel stopped", "channel", c.idx, "err", err)
			}
		}()
		if ss.nv.opened == cfg.granted {
			ss.sendTable(ch)
		}
		if ev.done != nil {
			close(ev.done)
		}
	case evSubchannelDone:
		ss.publish(func(c *sessCfg) { c.settingUp = false })
	}
}

// sendTable sends the send indirection table once every granted
// sub-channel is open: entry i = i mod channels (docs/protocol/netvsc.md §2.8).
func (ss *nicSession) sendTable(ch *nicChan) {
	cfg := ss.cfg.Load()
	if ss.nv.tableSent || cfg.version < nvsp.Version5 {
		return
	}
	ss.nv.tableSent = true
	ss.writeTable(ch, 1+cfg.granted)
	ss.publish(func(c *sessCfg) { c.settingUp = false })
}

func (ss *nicSession) writeTable(ch *nicChan, channels int) {
	var t nvsp.IndirectionTable
	for i := range t.Table {
		t.Table[i] = uint32(i % channels)
	}
	// Its own buffer: the table may precede a completion built in nvBuf.
	var buf [128]byte
	b := t.Marshal(buf[:0])
	if ss.n.faults.take(NICFaultBadIndirectionTable) {
		le32put(b[4:], nvsp.VRSSSendTabSize-1)
	}
	if err := ch.c.SendInband(0, b); err != nil {
		ss.log.Warn("send indirection table", "err", err)
	}
}

// offerVF sends VF_ASSOCIATION (and, when withdrawing a VF the guest
// switched to, SWITCH_DATA_PATH{synthetic} first) (docs/protocol/netvsc.md §2.9).
func (ss *nicSession) offerVF(ch *nicChan, present bool) {
	cfg := ss.cfg.Load()
	if !cfg.rndisReady || cfg.version < nvsp.Version4 || cfg.caps&nvsp.NDISConfigCapSRIOV == 0 {
		return
	}
	if present == ss.nv.vfOffered {
		return
	}
	if !present && cfg.dataPathVF {
		b := nvsp.SwitchDataPath{ActiveDataPath: nvsp.DataPathSynthetic}.Marshal(ss.nvBuf[:0])
		ch.c.Send(vmbus.PacketInband, vmbus.FlagCompletionRequested, hostRequestTID|1, nil, ss.nvspMsg(b))
		ss.publish(func(c *sessCfg) { c.dataPathVF = false })
		ss.n.vfNote(VFHostSwitchSent, "")
	}
	var a uint32
	if present {
		a = 1
	}
	b := nvsp.VFAssociation{Allocated: a, Serial: ss.n.cfg.VF}.Marshal(ss.nvBuf[:0])
	if err := ch.c.Send(vmbus.PacketInband, vmbus.FlagCompletionRequested, hostRequestTID, nil, ss.nvspMsg(b)); err != nil {
		ss.log.Warn("VF association", "err", err)
		return
	}
	ss.nv.vfOffered = present
	ss.nv.vfEver = ss.nv.vfEver || present
	ss.log.Info("VF association sent", "allocated", present, "serial", ss.n.cfg.VF)
	if present {
		ss.n.vfNote(VFAssociationSent, fmt.Sprint(ss.n.cfg.VF))
	} else {
		ss.n.vfNote(VFWithdrawalSent, fmt.Sprint(ss.n.cfg.VF))
	}
}

// indicate queues an INDICATE_STATUS for the guest (no delay).
func (ss *nicSession) indicate(m rndis.IndicateStatus) {
	b := m.Marshal(nil)
	if ss.n.faults.take(NICFaultBadIndication) {
		le32put(b[12:], uint32(len(b))) // status buffer length past the message
	}
	ss.n.st.indications.Add(1)
	ss.queueControl(b, 0)
}

func le32put(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
