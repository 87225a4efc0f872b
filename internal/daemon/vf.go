package daemon

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/netvsc"
)

// The accelerated-networking VF as the daemon reports it
// (docs/accelerated-networking.md): the pairing and the path of the running
// incarnation, and per-path counters, time on each path and switches summed
// over every incarnation of the NIC, so that none goes backwards across a
// reset or a reload that restarts the NIC.

// VFStatus is a NIC's VF pairing and data path, in `vmbusd status`,
// `stats` and `devices` (and /v1/status, /v1/stats).
type VFStatus struct {
	// Mode is the configured vf: auto, off or required.
	Mode string `json:"mode"`
	// State: off, none (no VF associated, or the NIC is down), searching,
	// attaching, active, detaching.
	State string `json:"state"`
	// Path is where the NIC transmits now: synthetic or vf ("" while
	// the NIC is down).
	Path string `json:"path"`
	// Associated and Serial: what the host last said (VF_ASSOCIATION).
	Associated bool   `json:"associated"`
	Serial     uint32 `json:"serial"`
	// The VF as last paired: its netdev, PCI function and driver, and
	// how it was found (serial: through its PCI slot; mac).
	IfName    string `json:"ifname"`
	Ifindex   int    `json:"ifindex"`
	PCI       string `json:"pci"`
	Driver    string `json:"driver"`
	MatchedBy string `json:"matched_by"`
	// XDP hook (native, generic), socket mode (zero-copy, copy) and the
	// number of AF_XDP sockets while attached.
	XDPAttach string `json:"xdp_attach"`
	XDPBind   string `json:"xdp_bind"`
	Sockets   int    `json:"sockets"`
	// Paths counts each path's traffic.
	Paths Paths `json:"paths"`
	// Seconds on each path while the NIC was up.
	SecondsSynthetic float64 `json:"seconds_synthetic"`
	SecondsVF        float64 `json:"seconds_vf"`
	// Switches of the data path, and their count by reason (the metric
	// label: spaces as underscores, e.g. association_withdrawn).
	Switches      uint64            `json:"switches"`
	SwitchReasons map[string]uint64 `json:"switch_reasons"`
	// Attach attempts and failures while a VF was associated, and the
	// latest failure.
	AttachAttempts uint64 `json:"attach_attempts"`
	AttachFailures uint64 `json:"attach_failures"`
	LastError      string `json:"last_error"`
	// Events are the latest switches, oldest first.
	Events []VFEvent `json:"events"`
}

// Paths holds the synthetic and the VF path's counters.
type Paths struct {
	Synthetic PathCounters `json:"synthetic"`
	VF        PathCounters `json:"vf"`
}

// PathCounters is one path's traffic. Synthetic: frames through the
// VMBus rings (transmits counted when the host completes them), TxDropped
// frames too large to send (tx_too_big) or larger than a send section
// without a GPA-direct pool. VF: frames through the VF's AF_XDP sockets,
// TxDropped frames too large for the VF and not segmentable.
type PathCounters struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	TxDropped uint64 `json:"tx_dropped"`
}

// VFEvent is one switch of the data path.
type VFEvent struct {
	To       string    `json:"to"`
	Reason   string    `json:"reason"`
	Observed time.Time `json:"observed"`
	// Switched is when the host confirmed the switch, Done when the
	// new path carried traffic; null until then.
	Switched *time.Time `json:"switched"`
	Done     *time.Time `json:"done"`
	IfName   string     `json:"ifname"`
	Error    string     `json:"error"`
}

// vfStates lists VFStatus.State's values (netvsc.VFState), each a series
// of vmbusd_netvsc_vf_state.
var vfStates = []string{netvsc.VFStateOff.String(), netvsc.VFStateNone.String(), netvsc.VFStateSearching.String(),
	netvsc.VFStateAttaching.String(), netvsc.VFStateActive.String(), netvsc.VFStateDetaching.String()}

// switchReasons lists the reasons netvsc gives a switch, so that each has
// a series (at 0) before it first happens.
var switchReasons = []string{netvsc.ReasonVFReady, netvsc.ReasonWithdrawn, netvsc.ReasonHostSwitch,
	netvsc.ReasonNetdevRemoved, netvsc.ReasonNetdevDown, netvsc.ReasonDataPathError, netvsc.ReasonSessionEnded,
	netvsc.ReasonReconfigure, netvsc.ReasonClosing, netvsc.ReasonSwitchRejected}

// reasonLabel is a switch reason as a label value: "netdev removed" ->
// "netdev_removed".
func reasonLabel(r string) string { return strings.ReplaceAll(r, " ", "_") }

// maxVFEvents is how many switches a NIC's status keeps across
// incarnations (netvsc keeps as many per incarnation).
const maxVFEvents = 64

// vfTotals is what closed incarnations of a NIC added up to, and the
// pairing the last one had.
type vfTotals struct {
	vf                 netvsc.PathStats
	timeSyn, timeVF    time.Duration
	switches           uint64
	reasons            map[string]uint64
	attempts, failures uint64
	lastErr            string
	events             []VFEvent
	// The pairing last seen, shown while the NIC is down.
	pairing netvsc.VFStatus
}

func (t vfTotals) clone() vfTotals {
	t.reasons = maps.Clone(t.reasons)
	t.events = slices.Clone(t.events)
	return t
}

// add folds a closed incarnation's VF status in.
func (t *vfTotals) add(st netvsc.VFStatus) {
	t.vf.RxPackets += st.VF.RxPackets
	t.vf.RxBytes += st.VF.RxBytes
	t.vf.TxPackets += st.VF.TxPackets
	t.vf.TxBytes += st.VF.TxBytes
	t.vf.TxDropped += st.VF.TxDropped
	t.timeSyn += st.TimeSynthetic
	t.timeVF += st.TimeVF
	t.switches += st.Switches
	if t.reasons == nil {
		t.reasons = map[string]uint64{}
	}
	for k, v := range st.Reasons {
		t.reasons[k] += v
	}
	t.attempts += st.Attempts
	t.failures += st.Failures
	if st.LastError != "" {
		t.lastErr = st.LastError
	}
	t.events = appendEvents(t.events, st.Events)
	if st.IfName != "" || st.Associated {
		t.pairing = st
	}
}

func appendEvents(to []VFEvent, evs []netvsc.VFEvent) []VFEvent {
	for _, e := range evs {
		to = append(to, VFEvent{To: e.To.String(), Reason: e.Reason, Observed: e.Observed, Switched: timeOrNull(e.Switched),
			Done: timeOrNull(e.Done), IfName: e.IfName, Error: e.Err})
	}
	if n := len(to) - maxVFEvents; n > 0 {
		to = slices.Delete(to, 0, n)
	}
	return to
}

// vfReport builds a NIC's VFStatus: the base of closed incarnations, the
// running one (cur, nil when there is none), and the synthetic path's
// counters from the queues summed over every incarnation.
func vfReport(mode config.VFMode, base vfTotals, cur *netvsc.VFStatus, queues []netvsc.QueueStats) VFStatus {
	out := VFStatus{Mode: mode.String(), State: netvsc.VFStateNone.String(), SwitchReasons: map[string]uint64{}}
	if mode == config.VFOff {
		out.State = netvsc.VFStateOff.String()
	}
	for _, q := range queues {
		s := &out.Paths.Synthetic
		s.RxPackets += q.RxPackets
		s.RxBytes += q.RxBytes
		s.TxPackets += q.TxPackets
		s.TxBytes += q.TxBytes
		s.TxDropped += q.TxTooBig + q.TxDropOversize
	}
	vf := base.vf
	timeSyn, timeVF := base.timeSyn, base.timeVF
	out.Switches, out.AttachAttempts, out.AttachFailures, out.LastError = base.switches, base.attempts, base.failures, base.lastErr
	for k, v := range base.reasons {
		out.SwitchReasons[reasonLabel(k)] += v
	}
	pairing := base.pairing
	events := base.events
	if cur != nil {
		vf.RxPackets += cur.VF.RxPackets
		vf.RxBytes += cur.VF.RxBytes
		vf.TxPackets += cur.VF.TxPackets
		vf.TxBytes += cur.VF.TxBytes
		vf.TxDropped += cur.VF.TxDropped
		timeSyn += cur.TimeSynthetic
		timeVF += cur.TimeVF
		out.Switches += cur.Switches
		for k, v := range cur.Reasons {
			out.SwitchReasons[reasonLabel(k)] += v
		}
		out.AttachAttempts += cur.Attempts
		out.AttachFailures += cur.Failures
		if cur.LastError != "" {
			out.LastError = cur.LastError
		}
		out.State, out.Path = cur.State.String(), cur.Path.String()
		out.Associated, out.Serial = cur.Associated, cur.Serial
		out.XDPAttach, out.XDPBind, out.Sockets = cur.Attach, cur.Bind, cur.Sockets
		if cur.IfName != "" {
			pairing = *cur
		}
		events = appendEvents(slices.Clone(events), cur.Events)
	}
	out.IfName, out.Ifindex, out.PCI, out.Driver, out.MatchedBy = pairing.IfName, pairing.Ifindex, pairing.PCI, pairing.Driver, pairing.MatchedBy
	if cur == nil {
		out.Serial = pairing.Serial
	}
	out.Paths.VF = PathCounters{RxPackets: vf.RxPackets, RxBytes: vf.RxBytes, TxPackets: vf.TxPackets, TxBytes: vf.TxBytes, TxDropped: vf.TxDropped}
	out.SecondsSynthetic, out.SecondsVF = timeSyn.Seconds(), timeVF.Seconds()
	out.Events = events
	if out.Events == nil {
		out.Events = []VFEvent{} // a key is never null (docs/control-api.md)
	}
	return out
}
