package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/vmbusd/vmbusd/internal/forward"
	"github.com/vmbusd/vmbusd/internal/pcapng"
	"github.com/vmbusd/vmbusd/netvsc"
)

// Status is what `vmbusd status` shows.
type Status struct {
	PID     int            `json:"pid"`
	Started time.Time      `json:"started"`
	Root    string         `json:"root"`
	Metrics string         `json:"metrics,omitempty"`
	NICs    []NICStatus    `json:"nics"`
	HvSock  []ForwardState `json:"hvsock"`
}

// ForwardState is one hv_sock forward in Status.
type ForwardState struct {
	Name      string          `json:"name"`
	Listening bool            `json:"listening"`
	Totals    forward.Totals  `json:"totals"`
	Active    []forward.Stats `json:"active"`
	Closed    []forward.Stats `json:"recently_closed,omitempty"`
}

// Stats is what `vmbusd stats` shows: per NIC and queue.
type Stats struct {
	NICs []NICStats `json:"nics"`
}

// NICStats is one NIC's counters.
type NICStats struct {
	Name       string            `json:"name"`
	State      string            `json:"state"`
	Interrupts uint64            `json:"interrupts"`
	Violations map[string]uint64 `json:"protocol_violations,omitempty"`
	// ControlFailures: control requests the host answered with a failure.
	ControlFailures uint64 `json:"control_failures"`
	// Queues are the synthetic path's queues (VMBus channels).
	Queues []netvsc.QueueStats `json:"queues"`
	// VF is the data path's split between synthetic and the VF.
	VF VFStatus `json:"vf"`
	// Ethtool: the counters under Linux hv_netvsc's ethtool -S names,
	// vf_* included.
	Ethtool []netvsc.Named `json:"ethtool"`
}

// Status reports the daemon, its NICs and forwards.
func (d *Daemon) Status() Status {
	s := Status{PID: pidSelf(), Started: d.start, Root: d.root(), Metrics: d.MetricsAddr()}
	nics, fwds := d.runners()
	for _, r := range nics {
		s.NICs = append(s.NICs, r.status())
	}
	for _, f := range fwds {
		s.HvSock = append(s.HvSock, ForwardState{Name: f.name, Listening: f.listening.Load(), Totals: f.fwd.Totals(),
			Active: f.fwd.Active(), Closed: f.fwd.Closed()})
	}
	return s
}

// Stats reports every NIC's counters, per queue.
func (d *Daemon) Stats() Stats {
	var s Stats
	nics, _ := d.runners()
	for _, r := range nics {
		t := r.totals()
		st := netvsc.Stats{Queues: t.queues, Violations: t.viol, Interrupts: t.irq}
		vf := netvsc.VFStatus{VF: netvsc.PathStats{RxPackets: t.vf.Paths.VF.RxPackets, RxBytes: t.vf.Paths.VF.RxBytes,
			TxPackets: t.vf.Paths.VF.TxPackets, TxBytes: t.vf.Paths.VF.TxBytes, TxDropped: t.vf.Paths.VF.TxDropped}}
		s.NICs = append(s.NICs, NICStats{Name: r.name(), State: r.state().State, Interrupts: t.irq, Violations: t.viol,
			ControlFailures: t.controlFailures, Queues: t.queues, VF: t.vf, Ethtool: append(st.Ethtool(), vf.Ethtool()...)})
	}
	return s
}

func (d *Daemon) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.Status()) })
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.Stats()) })
	mux.HandleFunc("GET /v1/capture", d.serveCapture)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// findNIC accepts the configured device name, the instance GUID, the TAP
// name or the index.
func (d *Daemon) findNIC(name string) *nicRunner {
	nics, _ := d.runners()
	for i, r := range nics {
		st := r.state()
		if name == r.cfg.Device || name == st.Instance || (r.cfg.TAP != "" && name == r.cfg.TAP) || name == strconv.Itoa(i) {
			return r
		}
	}
	return nil
}

// serveCapture streams a pcapng capture of a NIC's frames, both
// directions, with direction and queue per packet, until the client goes
// away or count frames were written. Query: device (required), queue,
// snaplen, count.
func (d *Daemon) serveCapture(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	r := d.findNIC(q.Get("device"))
	if r == nil {
		http.Error(w, fmt.Sprintf("no NIC %q is configured (give its device, instance GUID, TAP name or index)", q.Get("device")), http.StatusNotFound)
		return
	}
	queue, snaplen, count := -1, 0, 0
	for _, p := range []struct {
		key string
		v   *int
	}{{"queue", &queue}, {"snaplen", &snaplen}, {"count", &count}} {
		if s := q.Get(p.key); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < -1 {
				http.Error(w, fmt.Sprintf("%s=%q: want a number", p.key, s), http.StatusBadRequest)
				return
			}
			*p.v = n
		}
	}
	limit := d.config().Control.MaxCaptures
	if n := d.captures.Add(1); n > int64(limit) {
		d.captures.Add(-1)
		d.capturesRefused.Add(1)
		http.Error(w, fmt.Sprintf("%d captures are running, the most [control] max_captures allows; try again when one ends", limit),
			http.StatusServiceUnavailable)
		return
	}
	defer d.captures.Add(-1)
	sub := r.cap.add(queue, snaplen)
	defer r.cap.remove(sub)
	w.Header().Set("Content-Type", "application/x-pcapng")
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
	iface, err := pw.AddInterface(r.name(), fmt.Sprintf("vmbusd netvsc %s mac %s", st.Instance, st.MAC), snaplen)
	if err != nil {
		return
	}
	if !flush() {
		return
	}
	d.log.Info("capture started", "nic", r.name(), "queue", queue, "snaplen", snaplen)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	written, pending := 0, false
	defer func() {
		d.log.Info("capture ended", "nic", r.name(), "frames", written, "dropped", sub.dropped.Load())
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
			if pending {
				if !flush() {
					return
				}
				pending = false
			}
		}
	}
	flush()
}
