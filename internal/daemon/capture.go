package daemon

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/internal/pcapfilter"
	"github.com/vmbusd/vmbusd/internal/pcapng"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
)

// A NIC's capture hub. With nobody capturing, the data path pays one atomic
// load per burst; each capture gets its own bounded queue, and frames that
// do not fit are counted as dropped rather than slowing the NIC. A
// capture's queue, direction and filter are applied here, on the data
// path, before a frame is copied: a capture of "udp and port 53" on a busy
// NIC copies (and queues) only DNS.
type captureHub struct {
	active atomic.Pointer[[]*captureSub]
	mu     sync.Mutex
	subs   []*captureSub
}

type capturedFrame struct {
	at    time.Time
	in    bool // to the guest
	queue int
	data  []byte
	orig  int
}

// Direction is which frames a capture takes, as tcpdump's -Q.
type Direction int

const (
	DirInOut Direction = iota // both
	DirIn                     // received from the host (to the guest)
	DirOut                    // sent to the host
)

var directionNames = [...]string{DirInOut: "inout", DirIn: "in", DirOut: "out"}

func (d Direction) String() string { return directionNames[d] }

// ParseDirection reads "in", "out" or "inout" ("" is inout).
func ParseDirection(s string) (Direction, error) {
	switch s {
	case "", "inout":
		return DirInOut, nil
	case "in":
		return DirIn, nil
	case "out":
		return DirOut, nil
	}
	return 0, fmt.Errorf("direction %q: want in, out or inout", s)
}

type captureSub struct {
	queue   int // -1: every queue
	snaplen int
	dir     Direction
	filter  *pcapfilter.Filter // nil: every frame
	frames  chan capturedFrame
	// seen: frames on the capture's queue and direction; accepted: of
	// those, the ones its filter passed; dropped: accepted ones that did
	// not fit its queue.
	seen, accepted, dropped atomic.Uint64
	queued                  atomic.Int64 // bytes of frame data in frames
}

func (s *captureSub) stats() pcapng.Stats {
	return pcapng.Stats{Received: s.seen.Load(), Accepted: s.accepted.Load(), Dropped: s.dropped.Load()}
}

// A capture's queue: at most captureQueueLen frames and captureQueueBytes
// of their data, whichever comes first (a capture of jumbo frames whose
// client reads slowly holds 4 MiB, not 4096 × 9 KiB).
const (
	captureQueueLen   = 1024
	captureQueueBytes = 4 << 20
)

func (h *captureHub) add(s *captureSub) {
	s.frames = make(chan capturedFrame, captureQueueLen)
	h.mu.Lock()
	h.subs = append(h.subs, s)
	subs := append([]*captureSub(nil), h.subs...)
	h.active.Store(&subs)
	h.mu.Unlock()
}

func (h *captureHub) remove(s *captureSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, x := range h.subs {
		if x == s {
			h.subs = append(h.subs[:i], h.subs[i+1:]...)
			break
		}
	}
	if len(h.subs) == 0 {
		h.active.Store(nil)
		return
	}
	subs := append([]*captureSub(nil), h.subs...)
	h.active.Store(&subs)
}

// offer hands one frame to a capture: it is taken if its queue and
// direction match and its filter passes it, and dropped (counted) when
// the capture's queue is full.
func (s *captureSub) offer(now time.Time, in bool, q int, data []byte) {
	if s.queue >= 0 && s.queue != q {
		return
	}
	if (s.dir == DirIn && !in) || (s.dir == DirOut && in) {
		return
	}
	s.seen.Add(1)
	if s.filter != nil && !s.filter.Match(data) {
		return
	}
	s.accepted.Add(1)
	n := len(data)
	if s.snaplen > 0 && n > s.snaplen {
		n = s.snaplen
	}
	if s.queued.Load()+int64(n) > captureQueueBytes {
		s.dropped.Add(1)
		return
	}
	f := capturedFrame{at: now, in: in, queue: q, data: append([]byte(nil), data[:n]...), orig: len(data)}
	select {
	case s.frames <- f:
		s.queued.Add(int64(n))
	default:
		s.dropped.Add(1)
	}
}

// observer returns the data-path hook for one incarnation of the NIC.
func (r *nicRunner) observer(nic *netvsc.NIC) func(toTAP bool, queue int, pkts []*frame.Packet) {
	return func(in bool, queue int, pkts []*frame.Packet) {
		subs := r.cap.active.Load()
		if subs == nil {
			return
		}
		now := time.Now()
		for _, p := range pkts {
			q := queue
			data := p.Data()
			if q < 0 { // from the TAP: the queue the send table picks
				q = nic.TxQueue(frame.FlowHash(data)).Index()
			}
			for _, s := range *subs {
				s.offer(now, in, q, data)
			}
		}
	}
}

// findNIC accepts the configured device name, the instance GUID, the TAP
// name or the index; "" is the first NIC.
func (d *Daemon) findNIC(name string) *nicRunner {
	nics, _ := d.runners()
	if name == "" && len(nics) > 0 {
		return nics[0]
	}
	for i, r := range nics {
		st := r.state()
		if name == r.cfg.Device || name == st.Instance || (r.cfg.TAP != "" && name == r.cfg.TAP) || name == strconv.Itoa(i) {
			return r
		}
	}
	return nil
}

// queueLimit is how many queues a capture of r may name: the queues the
// host granted while the NIC is up, else those configured (or the most a
// NIC can have).
func (r *nicRunner) queueLimit() int {
	if st := r.state(); st.Queues > 0 {
		return st.Queues
	}
	if r.cfg.Queues > 0 {
		return r.cfg.Queues
	}
	return nvsp.MaxSubchannels
}

// CaptureHeaderDevice is the response header naming the NIC a capture
// runs on (the request may leave the device out).
const CaptureHeaderDevice = "Vmbusd-Capture-Device"

// serveCapture streams a pcapng capture of a NIC's frames, with direction
// and queue per packet, until the client goes away or count frames were
// written. Query (docs/control-api.md): device, queue, direction, filter,
// snaplen, count. The stream carries an interface statistics block with
// the frames seen, accepted by the filter and dropped, whenever they
// changed (checked every 100 ms) and at the end.
func (d *Daemon) serveCapture(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	r := d.findNIC(q.Get("device"))
	if r == nil {
		msg := fmt.Sprintf("no NIC %q is configured (give its device, instance GUID, TAP name or index)", q.Get("device"))
		if q.Get("device") == "" {
			msg = "no NIC is configured"
		}
		apiError(w, http.StatusNotFound, msg)
		return
	}
	sub := &captureSub{queue: -1}
	count := 0
	for _, p := range []struct {
		key string
		min int
		v   *int
	}{{"queue", -1, &sub.queue}, {"snaplen", 0, &sub.snaplen}, {"count", 0, &count}} {
		if s := q.Get(p.key); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < p.min {
				apiError(w, http.StatusBadRequest, fmt.Sprintf("%s=%q: want a number, at least %d", p.key, s, p.min))
				return
			}
			*p.v = n
		}
	}
	if limit := r.queueLimit(); sub.queue >= limit {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("queue %d is out of range: %s has %d queues (0 to %d)", sub.queue, r.name(), limit, limit-1))
		return
	}
	var err error
	if sub.dir, err = ParseDirection(q.Get("direction")); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	expr := q.Get("filter")
	if expr != "" {
		if sub.filter, err = pcapfilter.New(expr, pcapfilter.LinkEthernet, sub.snaplen); err != nil {
			apiError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	limit := d.config().Control.MaxCaptures
	if n := d.captures.Add(1); n > int64(limit) {
		d.captures.Add(-1)
		d.capturesRefused.Add(1)
		apiError(w, http.StatusServiceUnavailable,
			fmt.Sprintf("%d captures are running, the most [control] max_captures allows; try again when one ends", limit))
		return
	}
	defer d.captures.Add(-1)
	r.cap.add(sub)
	defer r.cap.remove(sub)
	w.Header().Set("Content-Type", "application/x-pcapng")
	w.Header().Set(CaptureHeaderDevice, r.name())
	// A capture streams for as long as the client reads: the server's
	// write timeout is replaced by one per write, so a client that stops
	// reading ends its capture (and frees its buffers) instead of holding
	// them for ever.
	rc := http.NewResponseController(w)
	timeout := d.config().Control.RequestTimeout
	extend := func() { rc.SetWriteDeadline(time.Now().Add(timeout)) }
	extend()
	flush := func() bool {
		extend()
		return rc.Flush() == nil
	}
	pw, err := pcapng.NewWriter(w, "vmbusd")
	if err != nil {
		return
	}
	st := r.state()
	iface, err := pw.AddInterface(r.name(), fmt.Sprintf("vmbusd netvsc %s mac %s", st.Instance, st.MAC), sub.snaplen)
	if err != nil {
		return
	}
	if !flush() {
		return
	}
	r.log.Info("capture started", "queue", sub.queue, "direction", sub.dir.String(), "filter", expr, "snaplen", sub.snaplen, "count", count)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	written, pending := 0, false
	var last pcapng.Stats
	defer func() {
		r.log.Info("capture ended", "frames", written, "dropped", sub.dropped.Load())
	}()
	for count == 0 || written < count {
		select {
		case <-req.Context().Done():
			return
		case f := <-sub.frames:
			sub.queued.Add(-int64(len(f.data)))
			dir := pcapng.DirOut
			if f.in {
				dir = pcapng.DirIn
			}
			extend()
			if err := pw.WritePacket(iface, f.at, dir, f.queue, f.data, f.orig); err != nil {
				return
			}
			written++
			pending = true
		case <-tick.C:
			// The counters as of now, whenever they changed: a client
			// that stops the capture has them at most a tick old.
			if st := sub.stats(); st != last {
				last = st
				if pw.WriteStats(iface, time.Now(), st) != nil {
					return
				}
				pending = true
			}
			if pending {
				if !flush() {
					return
				}
				pending = false
			}
		}
	}
	// The count is reached: the final statistics end the stream.
	pw.WriteStats(iface, time.Now(), sub.stats())
	flush()
}
