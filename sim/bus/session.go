package bus

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Session is one open of a device by a guest: fresh rings, the host end of
// the primary channel and of any sub-channels offered since, and the
// device's Service running on them. It ends when the guest closes the
// device or the host rescinds it.
type Session struct {
	dev      *Device
	conn     *nodeConn
	ringFile *os.File
	ringMem  []byte
	primary  *Channel

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	chans    []*Channel // primary first
	subMons  []int      // monitor ids given to this session's sub-channel offers
	stopped  bool
	stopOnce sync.Once
	done     chan struct{}
}

// newSession opens the primary channel. Its rings live in the channel's
// sysfs ring file, which is also what the guest maps as uio map 0: on a real
// system both are views of the same pages.
func newSession(d *Device, c *nodeConn, outSize, inSize int) (*Session, error) {
	prof := d.host.cfg.Profile
	removeRingFile(d.path, d.relid) // a previous open's, if any
	f, mem, err := createRingFile(d.path, d.relid, outSize+inSize, func(m []byte) error { return initRings(prof, m, outSize) })
	if err != nil {
		return nil, err
	}
	s := &Session{dev: d, conn: c, ringFile: f, ringMem: mem, done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(d.host.ctx)
	ch, err := s.newChannel(d.relid, 0, d.mon, mem, outSize)
	if err != nil {
		removeRingFile(d.path, d.relid)
		unmapMem(mem)
		f.Close()
		return nil, err
	}
	s.primary = ch
	s.chans = []*Channel{ch}
	return s, nil
}

// initRings prepares a channel's rings as the guest kernel's vmbus_open
// does: zeroed headers advertising the pending-send feature
// (hv_ringbuffer_init), and, before 6.18, the inbound ring masked
// (hv_uio_open, hv_uio_new_channel). split is where the guest-to-host ring
// ends.
func initRings(prof Profile, mem []byte, split int) error {
	if err := vmbus.InitRingHeader(mem[:split]); err != nil {
		return err
	}
	if err := vmbus.InitRingHeader(mem[split:]); err != nil {
		return err
	}
	if prof.MasksOnInterrupt() {
		setRingMask(mem[split:], true)
	}
	return nil
}

// newChannel attaches the host end to initialised rings.
func (s *Session) newChannel(relid uint32, sub uint16, mon int, mem []byte, split int) (*Channel, error) {
	c := &Channel{sess: s, relid: relid, sub: sub, mon: mon, mem: mem, split: split, wake: make(chan struct{}, 1)}
	var err error
	c.Channel, err = vmbus.NewChannel(vmbus.ChannelConfig{
		RelID: relid, SubchannelID: sub, Ring: mem, Signaler: c, HostSide: true,
		// The host reads whatever the guest may write; hv_sock's 16 KiB
		// and netvsc's 375-range transfer packets fit easily.
		MaxPacket:   min(split-vmbus.DataOffset()-8, 1<<20),
		Interrupts:  true,
		Mode:        vmbus.WaitInterrupt,
		WakeTimeout: 100 * time.Millisecond,
		Split:       split,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (s *Session) start() {
	if s.primary.mon >= 0 {
		s.dev.host.registerMonitor(s.primary.mon, s.primary)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		log := s.dev.host.log.With("device", s.dev.cfg.Instance.String())
		log.Debug("service started", "pid", s.conn.PeerPID())
		if err := s.dev.cfg.Service.Serve(s.ctx, s); err != nil && s.ctx.Err() == nil {
			log.Warn("service stopped", "err", err)
		}
	}()
}

// stop ends the session: the service's context is cancelled, it is waited
// for, and sub-channels and ring memory go away.
func (s *Session) stop() {
	s.stopOnce.Do(func() {
		s.cancel()
		s.mu.Lock()
		s.stopped = true
		chans := s.chans
		s.mu.Unlock()
		for _, c := range chans {
			c.Kill(vmbus.ErrChannelClosed)
		}
		s.wg.Wait()
		for _, c := range chans {
			if c.mon >= 0 {
				s.dev.host.registerMonitor(c.mon, nil)
			}
			removeRingFile(s.dev.path, c.relid)
			if c.sub != 0 {
				removeChannel(s.dev.path, c.relid)
				if c.file != nil {
					unmapMem(c.mem)
					c.file.Close()
				}
			}
		}
		s.mu.Lock()
		mons := s.subMons
		s.subMons = nil
		s.mu.Unlock()
		for _, id := range mons {
			s.dev.host.freeMonitor(id)
		}
		unmapMem(s.ringMem)
		s.ringFile.Close()
		close(s.done)
	})
}

// Context is cancelled when the session ends.
func (s *Session) Context() context.Context { return s.ctx }

// Done is closed once the session has fully stopped.
func (s *Session) Done() <-chan struct{} { return s.done }

// Device returns the device the session belongs to.
func (s *Session) Device() *Device { return s.dev }

// Primary returns the host end of the primary channel.
func (s *Session) Primary() *Channel { return s.primary }

// Channels returns the primary and every sub-channel offered so far.
func (s *Session) Channels() []*Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Channel(nil), s.chans...)
}

// GuestPID returns the pid of the process that opened the device.
func (s *Session) GuestPID() int { return s.conn.PeerPID() }

// Interrupts returns the cumulative interrupt count raised to the guest.
func (s *Session) Interrupts() uint32 { return s.conn.Count() }

// SubchannelOffer says how one offered sub-channel comes up.
type SubchannelOffer struct {
	// Delay before the kernel has opened it and its ring file appears.
	Delay time.Duration
	// NeverOpens: the channel directory appears but the ring never does
	// (the kernel's vmbus_open failed, e.g. a high-order allocation).
	NeverOpens bool
}

// OfferSubchannels offers sub-channels asynchronously, as Hyper-V does
// after a guest's request: each channel directory appears at once, and its
// ring file after the offer's delay, when the (simulated) kernel has opened
// it. Every sub-channel whose ring appeared is sent on the returned channel,
// which is closed when all offers are settled or the session ends.
//
// accept, when not nil, is the host's side of each open: it is called with
// the channel before its ring file appears, and the file waits for it to
// return. The kernel creates the ring attribute only after vmbus_open has
// completed, which the host answers once its end of the channel is set
// up, so a guest that has mapped a sub-channel's ring can count on the
// host using that channel (docs/uio-contract.md).
func (s *Session) OfferSubchannels(offers []SubchannelOffer, accept func(*Channel)) <-chan *Channel {
	out := make(chan *Channel, len(offers))
	d, h := s.dev, s.dev.host
	type pending struct {
		relid uint32
		mon   int
		sub   uint16
		offer SubchannelOffer
	}
	var ps []pending
	h.mu.Lock()
	s.mu.Lock()
	base := len(s.chans)
	for i, o := range offers {
		p := pending{relid: h.nextRelID, mon: -1, sub: uint16(base + i), offer: o}
		h.nextRelID++
		if !d.cfg.NotMonitored {
			if p.mon = h.allocMonitorLocked(); p.mon >= 0 {
				s.subMons = append(s.subMons, p.mon)
			}
		}
		ps = append(ps, p)
	}
	s.mu.Unlock()
	h.mu.Unlock()
	split := d.faults.Has(FaultSplitSubchannelID)
	for _, p := range ps {
		if err := writeChannel(d.path, chanAttrs{RelID: p.relid, SubchannelID: p.sub, MonitorID: p.mon, IDLater: split}); err != nil {
			h.log.Warn("offer sub-channel", "err", err)
		}
		if split {
			d.faults.count(FaultSplitSubchannelID)
		}
	}
	// The second write of a split subchannel_id, splitIDDelay after the
	// channel's ring appears (or would have).
	later := func(p pending) {
		if !split {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			select {
			case <-time.After(splitIDDelay):
			case <-s.ctx.Done():
				return
			}
			if err := writeSubchannelID(d.path, p.relid, p.sub); err != nil {
				h.log.Warn("offer sub-channel", "err", err)
			}
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		start := time.Now()
		for _, p := range ps {
			if p.offer.NeverOpens {
				later(p)
				continue
			}
			select {
			case <-time.After(time.Until(start.Add(p.offer.Delay))):
			case <-s.ctx.Done():
				return
			}
			c, err := s.openSubchannel(p.relid, p.sub, p.mon, accept)
			if err != nil {
				h.log.Warn("open sub-channel", "relid", p.relid, "err", err)
				continue
			}
			out <- c
			later(p)
		}
	}()
	return out
}

// splitIDDelay is how long a split subchannel_id stays empty after the
// channel's ring appears (FaultSplitSubchannelID): long enough for a guest
// woken by the ring to read it.
const splitIDDelay = 50 * time.Millisecond

// openSubchannel is the kernel's hv_uio_new_channel: open the channel with
// 2 MiB rings (the host's side, accept, included), then make its ring file
// visible.
func (s *Session) openSubchannel(relid uint32, sub uint16, mon int, accept func(*Channel)) (*Channel, error) {
	d := s.dev
	size := 2 * d.cfg.SubchannelRingSize
	prof := d.host.cfg.Profile
	f, mem, err := prepareRingFile(d.path, relid, size, func(m []byte) error { return initRings(prof, m, size/2) })
	if err != nil {
		return nil, err
	}
	c, err := s.newChannel(relid, sub, mon, mem, size/2)
	if err != nil {
		unmapMem(mem)
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	c.file = f
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		unmapMem(mem)
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("session ended")
	}
	s.chans = append(s.chans, c)
	s.mu.Unlock()
	if mon >= 0 {
		d.host.registerMonitor(mon, c)
	}
	if accept != nil {
		accept(c)
	}
	if err := publishRingFile(f, d.path, relid); err != nil {
		// The channel stays the session's (its teardown releases it), but
		// the guest never sees its ring, as when vmbus_open fails.
		os.Remove(f.Name())
		return nil, err
	}
	return c, nil
}

// irqControl applies a guest's write to the uio fd per kernel profile
// (hv_uio_irqcontrol; docs/protocol/vmbus-ring.md §1.4).
func (s *Session) irqControl(enable bool) {
	prof := s.dev.host.cfg.Profile
	var buf [8]*Channel // a guest's channels, mostly; more spill to the heap
	s.mu.Lock()
	targets := append(buf[:0], s.chans...)
	s.mu.Unlock()
	if !prof.ControlAllChannels() {
		targets = targets[:1]
	}
	for _, c := range targets {
		setRingMask(c.mem[c.split:], !enable)
		if enable && c.mon < 0 && prof.ControlSignalsHost() {
			c.guestSignal()
		}
	}
}
