package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/vmbusd/vmbusd/internal/buildinfo"
	"github.com/vmbusd/vmbusd/internal/forward"
	"github.com/vmbusd/vmbusd/netvsc"
)

// The control API's documents (docs/control-api.md): explicit types with
// snake_case keys, every key always present (an absent value is "", 0,
// false, null or an empty list, never a missing key), and a
// schema_version that changes only when a key is removed or changes its
// meaning (adding keys does not change it). The types are the API's own,
// never the data path's: a field renamed in netvsc does not rename a key.

// SchemaVersion is the version of every document the control API and the
// CLI's --json print.
const SchemaVersion = 1

// Status is GET /v1/status and `vmbusd status --json`.
type Status struct {
	SchemaVersion int       `json:"schema_version"`
	Version       string    `json:"version"`
	Revision      string    `json:"revision"`
	PID           int       `json:"pid"`
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Root          string    `json:"root"`
	StateDir      string    `json:"state_dir"`
	ControlSocket string    `json:"control_socket"`
	// Metrics is the metrics listener's address ("" when disabled).
	Metrics string         `json:"metrics"`
	NICs    []NICStatus    `json:"nics"`
	HvSock  []ForwardState `json:"hvsock"`
}

// ForwardState is one hv_sock forward in Status.
type ForwardState struct {
	Name      string        `json:"name"`
	Listening bool          `json:"listening"`
	Totals    ForwardTotals `json:"totals"`
	Active    []ForwardConn `json:"active"`
	Closed    []ForwardConn `json:"recently_closed"`
}

// ForwardTotals sum every connection a forward handled.
type ForwardTotals struct {
	Accepted   uint64 `json:"accepted"`
	DialFailed uint64 `json:"dial_failed"`
	Refused    uint64 `json:"refused"`
	Active     int    `json:"active"`
	BytesIn    uint64 `json:"bytes_in"`
	BytesOut   uint64 `json:"bytes_out"`
	// ClosedBy counts closed connections by reason, every reason present.
	ClosedBy map[string]uint64 `json:"closed_by"`
	// LastClosed is when a connection last closed (null: none yet).
	LastClosed *time.Time `json:"last_closed"`
}

// ForwardConn is one forwarded connection.
type ForwardConn struct {
	ID       uint64     `json:"id"`
	Client   string     `json:"client"`
	Upstream string     `json:"upstream"`
	Opened   time.Time  `json:"opened"`
	Closed   *time.Time `json:"closed"`
	BytesIn  uint64     `json:"bytes_in"`
	BytesOut uint64     `json:"bytes_out"`
	InDone   bool       `json:"in_done"`
	OutDone  bool       `json:"out_done"`
	// Reason is why it closed ("open" while it runs).
	Reason string `json:"reason"`
	Error  string `json:"error"`
}

// Stats is GET /v1/stats and `vmbusd stats --json`.
type Stats struct {
	SchemaVersion int `json:"schema_version"`
	// Time is when the counters were read: rates are differences of two
	// documents divided by the difference of their times.
	Time time.Time  `json:"time"`
	NICs []NICStats `json:"nics"`
}

// NICStats is one NIC's counters, summed over every reset of it.
type NICStats struct {
	Name       string `json:"name"`
	State      string `json:"state"`
	Interrupts uint64 `json:"interrupts"`
	// Violations counts host protocol violations by check (the metric's
	// check label, e.g. netvsc_bad_message_length), every check present.
	Violations map[string]uint64 `json:"protocol_violations"`
	// ControlFailures: control requests the host answered with a failure.
	ControlFailures uint64 `json:"control_failures"`
	// Totals are the NIC's whole traffic: both paths.
	Totals NICTotals `json:"totals"`
	// Queues are the synthetic path's queues (VMBus channels).
	Queues []QueueStats `json:"queues"`
	// VF is the data path's split between synthetic and the VF.
	VF VFStatus `json:"vf"`
	// Ethtool: the counters under Linux hv_netvsc's ethtool -S names,
	// vf_* included.
	Ethtool []Counter `json:"ethtool"`
	// Xstats: the counters under DPDK's ethdev xstats names.
	Xstats []Counter `json:"xstats"`
}

// NICTotals is a NIC's traffic over both paths.
type NICTotals struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	// RxDropped: no buffer (on either path) or too large.
	RxDropped uint64 `json:"rx_dropped"`
	// TxDropped: unsendable frames on either path.
	TxDropped uint64 `json:"tx_dropped"`
}

// QueueStats is one synthetic queue's counters.
type QueueStats struct {
	Queue          int          `json:"queue"`
	RxPackets      uint64       `json:"rx_packets"`
	RxBytes        uint64       `json:"rx_bytes"`
	TxPackets      uint64       `json:"tx_packets"`
	TxBytes        uint64       `json:"tx_bytes"`
	RxNoMemory     uint64       `json:"rx_no_memory"`
	RxHeld         uint64       `json:"rx_held"`
	RxRSCFrames    uint64       `json:"rx_rsc_frames"`
	RxRSCDropped   uint64       `json:"rx_rsc_dropped"`
	RxTooBig       uint64       `json:"rx_too_big"`
	RxCompBusy     uint64       `json:"rx_comp_busy"`
	RxCompSent     uint64       `json:"rx_comp_sent"`
	RxXfers        uint64       `json:"rx_xfers"`
	RxPPIErrors    uint64       `json:"rx_ppi_errors"`
	TxSendFull     uint64       `json:"tx_send_full"`
	TxBusy         uint64       `json:"tx_busy"`
	TxNoSpace      uint64       `json:"tx_no_space"`
	TxTooBig       uint64       `json:"tx_too_big"`
	TxDropOversize uint64       `json:"tx_drop_oversize"`
	TxCopied       uint64       `json:"tx_copied"`
	TxGPA          uint64       `json:"tx_gpa"`
	TxSegmented    uint64       `json:"tx_segmented"`
	TxSegments     uint64       `json:"tx_segments"`
	TxLSO          uint64       `json:"tx_lso"`
	TxSections     uint64       `json:"tx_sections"`
	TxCompletions  uint64       `json:"tx_completions"`
	TxFailed       uint64       `json:"tx_failed"`
	TxVLANMoved    uint64       `json:"tx_vlan_moved"`
	StopQueue      uint64       `json:"stop_queue"`
	PollSeconds    float64      `json:"poll_seconds"`
	SleepSeconds   float64      `json:"sleep_seconds"`
	Channel        ChannelStats `json:"channel"`
}

// ChannelStats are the ring-level counters of a queue's VMBus channel.
type ChannelStats struct {
	TxPackets     uint64 `json:"tx_packets"`
	TxBytes       uint64 `json:"tx_bytes"`
	TxCommits     uint64 `json:"tx_commits"`
	TxSignals     uint64 `json:"tx_signals"`
	TxFullWaits   uint64 `json:"tx_full_waits"`
	RxPackets     uint64 `json:"rx_packets"`
	RxBytes       uint64 `json:"rx_bytes"`
	RxCommits     uint64 `json:"rx_commits"`
	RxSignals     uint64 `json:"rx_signals"`
	Wakeups       uint64 `json:"wakeups"`
	MissedWakeups uint64 `json:"missed_wakeups"`
	IdleWaits     uint64 `json:"idle_waits"`
	SharedWakeups uint64 `json:"shared_wakeups"`
}

// Counter is one named counter (ethtool -S, DPDK xstats).
type Counter struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// Devices is `vmbusd devices --json`: the VMBus devices under a root, as
// sysfs shows them, joined with what a running daemon says of its NICs.
type Devices struct {
	SchemaVersion int    `json:"schema_version"`
	Root          string `json:"root"`
	// Daemon is whether a running daemon answered on the control socket
	// (nic and vf are filled only then).
	Daemon  bool     `json:"daemon"`
	Devices []Device `json:"devices"`
}

// Device is one VMBus device in Devices.
type Device struct {
	Instance string `json:"instance"`
	// Class is the class GUID, ClassName its short name (netvsc, hvsock,
	// ...; "unknown" for a class vmbusd does not know).
	Class     string `json:"class"`
	ClassName string `json:"class_name"`
	// Driver is the kernel driver bound to the device ("" for none).
	Driver string `json:"driver"`
	// UIO is the uio node ("uio0") while uio_hv_generic has the device.
	UIO       string `json:"uio"`
	Channels  int    `json:"channels"`
	Monitored bool   `json:"monitored"`
	// Interface and MAC: the kernel's network interface while hv_netvsc
	// has the device.
	Interface string `json:"interface"`
	MAC       string `json:"mac"`
	// NIC is the name the running daemon drives the device under, VF its
	// accelerated-networking VF and data path ("" and null without a
	// daemon driving it).
	NIC string    `json:"nic"`
	VF  *VFStatus `json:"vf"`
}

// APIError is the body of every error the control API answers.
type APIError struct {
	SchemaVersion int    `json:"schema_version"`
	Status        int    `json:"status"`
	Error         string `json:"error"`
}

// Status reports the daemon, its NICs and forwards.
func (d *Daemon) Status() Status {
	bi := buildinfo.Get()
	cfg := d.config()
	s := Status{SchemaVersion: SchemaVersion, Version: bi.Version, Revision: bi.Revision, PID: pidSelf(),
		Started: d.start, UptimeSeconds: d.clk.Since(d.start).Seconds(), Root: cfg.Root, StateDir: cfg.State(),
		ControlSocket: cfg.Control.Socket, Metrics: d.MetricsAddr(), NICs: []NICStatus{}, HvSock: []ForwardState{}}
	nics, fwds := d.runners()
	for _, r := range nics {
		s.NICs = append(s.NICs, r.status())
	}
	for _, f := range fwds {
		s.HvSock = append(s.HvSock, ForwardState{Name: f.name, Listening: f.listening.Load(),
			Totals: forwardTotals(f.fwd.Totals()), Active: forwardConns(f.fwd.Active()), Closed: forwardConns(f.fwd.Closed())})
	}
	return s
}

// Stats reports every NIC's counters, per queue.
func (d *Daemon) Stats() Stats {
	s := Stats{SchemaVersion: SchemaVersion, Time: d.clk.Now(), NICs: []NICStats{}}
	nics, _ := d.runners()
	for _, r := range nics {
		t := r.totals()
		st := netvsc.Stats{Queues: t.queues, Violations: t.viol, Interrupts: t.irq}
		vf := netvsc.VFStatus{VF: netvsc.PathStats{RxPackets: t.vf.Paths.VF.RxPackets, RxBytes: t.vf.Paths.VF.RxBytes,
			TxPackets: t.vf.Paths.VF.TxPackets, TxBytes: t.vf.Paths.VF.TxBytes, TxDropped: t.vf.Paths.VF.TxDropped}}
		n := NICStats{Name: r.name(), State: r.state().State, Interrupts: t.irq, Violations: violationCounts(t.viol),
			ControlFailures: t.controlFailures, VF: t.vf, Queues: make([]QueueStats, 0, len(t.queues))}
		for _, q := range t.queues {
			n.Queues = append(n.Queues, queueStats(q))
		}
		n.Totals = sumPaths(n.Queues, t.vf)
		for _, c := range append(st.Ethtool(), vf.Ethtool()...) {
			n.Ethtool = append(n.Ethtool, Counter{c.Name, c.Value})
		}
		n.Xstats = xstats(n.Totals, n.Queues, t.vf)
		s.NICs = append(s.NICs, n)
	}
	return s
}

// checkLabel is a violation's check as a label value and key:
// "netvsc: bad message length" -> "netvsc_bad_message_length".
func checkLabel(check string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '_'
	}, strings.ReplaceAll(check, ": ", "_"))
}

// violationCounts keys the counts by checkLabel, with every known check
// present.
func violationCounts(v map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range netvsc.AllChecks() {
		out[checkLabel(c)] = 0
	}
	for c, n := range v {
		out[checkLabel(c)] += n
	}
	return out
}

func queueStats(q netvsc.QueueStats) QueueStats {
	c := q.Channel
	return QueueStats{Queue: q.Queue, RxPackets: q.RxPackets, RxBytes: q.RxBytes, TxPackets: q.TxPackets, TxBytes: q.TxBytes,
		RxNoMemory: q.RxNoMemory, RxHeld: q.RxHeld, RxRSCFrames: q.RxRSCFrames, RxRSCDropped: q.RxRSCDropped, RxTooBig: q.RxTooBig, RxCompBusy: q.RxCompBusy, RxCompSent: q.RxCompSent,
		RxXfers: q.RxXfers, RxPPIErrors: q.RxPPIErrors, TxSendFull: q.TxSendFull, TxBusy: q.TxBusy,
		TxNoSpace: q.TxNoSpace, TxTooBig: q.TxTooBig, TxDropOversize: q.TxDropOversize, TxCopied: q.TxCopied,
		TxGPA: q.TxGPA, TxSegmented: q.TxSegmented, TxSegments: q.TxSegments, TxLSO: q.TxLSO,
		TxSections: q.TxSections, TxCompletions: q.TxCompletions, TxFailed: q.TxFailed, TxVLANMoved: q.TxVLANMoved,
		StopQueue: q.StopQueue, PollSeconds: q.PollSeconds, SleepSeconds: q.SleepSeconds,
		Channel: ChannelStats{TxPackets: c.TxPackets, TxBytes: c.TxBytes, TxCommits: c.TxCommits, TxSignals: c.TxSignals,
			TxFullWaits: c.TxFullWaits, RxPackets: c.RxPackets, RxBytes: c.RxBytes, RxCommits: c.RxCommits,
			RxSignals: c.RxSignals, Wakeups: c.Wakeups, MissedWakeups: c.MissedWakeups, IdleWaits: c.IdleWaits,
			SharedWakeups: c.SharedWakeups}}
}

// sumPaths adds the paths: the synthetic one from the queues, the VF's
// from its sockets. Receive drops are counted in the queues on either path.
func sumPaths(qs []QueueStats, vf VFStatus) NICTotals {
	t := NICTotals{RxPackets: vf.Paths.VF.RxPackets, RxBytes: vf.Paths.VF.RxBytes, TxPackets: vf.Paths.VF.TxPackets,
		TxBytes: vf.Paths.VF.TxBytes, TxDropped: vf.Paths.VF.TxDropped}
	for _, q := range qs {
		t.RxPackets += q.RxPackets
		t.RxBytes += q.RxBytes
		t.TxPackets += q.TxPackets
		t.TxBytes += q.TxBytes
		t.RxDropped += q.RxNoMemory + q.RxTooBig
		t.TxDropped += q.TxTooBig + q.TxDropOversize
	}
	return t
}

// xstats names a NIC's counters as DPDK's ethdev does (rte_ethdev.c's
// basic stats, then per queue, then the VF's with a vf_ prefix, as the
// netvsc PMD names its VF's), so that scripts written for testpmd's
// "show port xstats" or dpdk-telemetry's /ethdev/xstats find them.
func xstats(t NICTotals, qs []QueueStats, vf VFStatus) []Counter {
	var missed, rxErr, txErr uint64
	for _, q := range qs {
		missed += q.RxNoMemory
		rxErr += q.RxTooBig
		txErr += q.TxTooBig + q.TxDropOversize + q.TxFailed
	}
	txErr += vf.Paths.VF.TxDropped
	out := []Counter{
		{"rx_good_packets", t.RxPackets}, {"tx_good_packets", t.TxPackets},
		{"rx_good_bytes", t.RxBytes}, {"tx_good_bytes", t.TxBytes},
		{"rx_missed_errors", missed}, {"rx_errors", rxErr}, {"tx_errors", txErr},
		// vmbusd's receive buffers are a fixed pool: a frame with none
		// free is rx_missed_errors, never an allocation failure.
		{"rx_mbuf_allocation_errors", 0},
	}
	for _, q := range qs {
		out = append(out, Counter{fmt.Sprintf("rx_q%d_packets", q.Queue), q.RxPackets},
			Counter{fmt.Sprintf("rx_q%d_bytes", q.Queue), q.RxBytes},
			Counter{fmt.Sprintf("rx_q%d_errors", q.Queue), q.RxTooBig})
	}
	for _, q := range qs {
		out = append(out, Counter{fmt.Sprintf("tx_q%d_packets", q.Queue), q.TxPackets},
			Counter{fmt.Sprintf("tx_q%d_bytes", q.Queue), q.TxBytes})
	}
	v := vf.Paths.VF
	return append(out, Counter{"vf_rx_good_packets", v.RxPackets}, Counter{"vf_tx_good_packets", v.TxPackets},
		Counter{"vf_rx_good_bytes", v.RxBytes}, Counter{"vf_tx_good_bytes", v.TxBytes}, Counter{"vf_tx_errors", v.TxDropped})
}

// forwardReasons are the reasons a forwarded connection closes, in the
// order the metrics list them.
var forwardReasons = []forward.Reason{forward.ReasonDone, forward.ReasonDialFailed, forward.ReasonClientError,
	forward.ReasonUpstreamErr, forward.ReasonCanceled}

// reasonKey is a close reason as a key and label value: "dial failed" ->
// "dial_failed".
func reasonKey(r forward.Reason) string { return strings.ReplaceAll(string(r), " ", "_") }

func forwardTotals(t forward.Totals) ForwardTotals {
	out := ForwardTotals{Accepted: t.Accepted, DialFailed: t.DialFailed, Refused: t.Refused, Active: t.Active,
		BytesIn: t.BytesIn, BytesOut: t.BytesOut, ClosedBy: map[string]uint64{}, LastClosed: timeOrNull(t.LastClosure)}
	for _, r := range forwardReasons {
		out.ClosedBy[reasonKey(r)] = 0
	}
	for r, n := range t.ClosedBy {
		out.ClosedBy[reasonKey(r)] += n
	}
	return out
}

func forwardConns(ss []forward.Stats) []ForwardConn {
	out := make([]ForwardConn, 0, len(ss))
	for _, s := range ss {
		reason := reasonKey(s.Reason)
		if s.Reason == forward.ReasonOpen {
			reason = "open"
		}
		out = append(out, ForwardConn{ID: s.ID, Client: s.Client, Upstream: s.Upstream, Opened: s.Opened,
			Closed: timeOrNull(s.Closed), BytesIn: s.BytesIn, BytesOut: s.BytesOut, InDone: s.InDone, OutDone: s.OutDone,
			Reason: reason, Error: s.Err})
	}
	return out
}

// timeOrNull is nil for the zero time, so that "not yet" is null rather
// than year 1.
func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Endpoints lists the control API's routes (docs/control-api.md documents
// each).
var Endpoints = []string{"GET /v1/status", "GET /v1/stats", "GET /v1/capture"}

func (d *Daemon) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(Endpoints[0], func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, d.Status()) })
	mux.HandleFunc(Endpoints[1], func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, d.Stats()) })
	mux.HandleFunc(Endpoints[2], d.serveCapture)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		for _, e := range Endpoints {
			if _, path, _ := strings.Cut(e, " "); path == r.URL.Path {
				w.Header().Set("Allow", "GET, HEAD")
				apiError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: the control API answers only GET", r.Method, r.URL.Path))
				return
			}
		}
		apiError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s (the API has %s)", r.Method, r.URL.Path, strings.Join(Endpoints, ", ")))
	})
	return mux
}

// writeJSON answers v, indented, with HTML escaping off (a "->" stays
// "->", not "\u003e").
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func apiError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, APIError{SchemaVersion: SchemaVersion, Status: code, Error: msg})
}
