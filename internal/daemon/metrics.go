package daemon

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vmbusd/vmbusd/internal/buildinfo"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/connlimit"
	"github.com/vmbusd/vmbusd/internal/forward"
)

// Metrics: one registry per daemon, the process and Go collectors, and one
// custom collector that reads the counters the data path keeps (atomics
// with a single writer) at scrape time. No client_golang call runs per
// packet. Every series is listed in docs/metrics.md.

type metricDesc struct {
	d    *prometheus.Desc
	kind prometheus.ValueType
}

func newDesc(name, help string, kind prometheus.ValueType, labels ...string) metricDesc {
	return metricDesc{prometheus.NewDesc(name, help, labels, nil), kind}
}

var (
	qLabels = []string{"device", "queue"}

	mBuildInfo = newDesc("vmbusd_build_info", "vmbusd's version, source revision and Go version (always 1).", prometheus.GaugeValue, "version", "revision", "goversion")
	mNICInfo   = newDesc("vmbusd_netvsc_info", "One series per configured NIC: instance, MAC, attachment (always 1).",
		prometheus.GaugeValue, "device", "instance", "mac", "attach", "mode")
	mNICUp       = newDesc("vmbusd_netvsc_up", "1 while the NIC carries traffic, 0 while it starts, resets or waits for the host.", prometheus.GaugeValue, "device")
	mNICFailed   = newDesc("vmbusd_netvsc_failed", "1 while the NIC is down for a configuration or permanent error (status says why); a reload retries it.", prometheus.GaugeValue, "device")
	mLinkUp      = newDesc("vmbusd_netvsc_link_up", "The host's link state for the NIC (1 up).", prometheus.GaugeValue, "device")
	mLinkSpeed   = newDesc("vmbusd_netvsc_link_speed_bytes_per_second", "Link speed the host reports, in bytes per second (bits / 8).", prometheus.GaugeValue, "device")
	mQueues      = newDesc("vmbusd_netvsc_queues", "Queues (VMBus channels) granted by the host.", prometheus.GaugeValue, "device")
	mResets      = newDesc("vmbusd_netvsc_resets_total", "Times the NIC was torn down and brought up again after a failure.", prometheus.CounterValue, "device")
	mRescinds    = newDesc("vmbusd_netvsc_rescinds_total", "Times the host took the device away.", prometheus.CounterValue, "device")
	mViolations  = newDesc("vmbusd_netvsc_protocol_violations_total", "Host protocol violations detected, by check (vmbus_len8, netvsc_bad_message_length, ...); each resets the NIC.", prometheus.CounterValue, "device", "check")
	mInterrupts  = newDesc("vmbusd_vmbus_interrupts_total", "Interrupt notifications read from the device's uio fd.", prometheus.CounterValue, "device")
	mRxPackets   = newDesc("vmbusd_netvsc_receive_packets_total", "Frames received from the host.", prometheus.CounterValue, qLabels...)
	mRxBytes     = newDesc("vmbusd_netvsc_receive_bytes_total", "Bytes of frames received from the host.", prometheus.CounterValue, qLabels...)
	mTxPackets   = newDesc("vmbusd_netvsc_transmit_packets_total", "Frames the host confirmed sending.", prometheus.CounterValue, qLabels...)
	mTxBytes     = newDesc("vmbusd_netvsc_transmit_bytes_total", "Bytes of frames the host confirmed sending.", prometheus.CounterValue, qLabels...)
	mRxHeld      = newDesc("vmbusd_netvsc_receive_held_total", "Received frames held in the host's receive buffer (completion deferred) because the pool or staging was full.", prometheus.CounterValue, qLabels...)
	mRxDropped   = newDesc("vmbusd_netvsc_receive_dropped_total", "Received frames dropped: no buffer (rx_no_memory), too large, or a coalesced frame whose fragments broke the rules (rx_rsc_dropped).", prometheus.CounterValue, qLabels...)
	mRxRSC       = newDesc("vmbusd_netvsc_receive_coalesced_total", "Coalesced frames reassembled from the host's RSC fragments (rx_rsc_frames).", prometheus.CounterValue, qLabels...)
	mTxDropped   = newDesc("vmbusd_netvsc_transmit_dropped_total", "Frames that could be neither sent nor segmented (tx_too_big).", prometheus.CounterValue, qLabels...)
	mTxPath      = newDesc("vmbusd_netvsc_transmit_path_total", "Frames sent by path: copy (into a send section), gpa (GPA-direct), segment (cut in software).", prometheus.CounterValue, "device", "queue", "path")
	mTxSendFull  = newDesc("vmbusd_netvsc_transmit_send_full_total", "No free send section (Linux tx_send_full).", prometheus.CounterValue, qLabels...)
	mTxBusy      = newDesc("vmbusd_netvsc_transmit_busy_total", "Outbound ring or request table full (Linux tx_busy).", prometheus.CounterValue, qLabels...)
	mRxCompBusy  = newDesc("vmbusd_netvsc_receive_completion_busy_total", "Receive completions deferred because the outbound ring was full (Linux rx_comp_busy).", prometheus.CounterValue, qLabels...)
	mSignals     = newDesc("vmbusd_vmbus_signals_sent_total", "Signals raised to the host (monitor bit or uio write).", prometheus.CounterValue, qLabels...)
	mWakeups     = newDesc("vmbusd_vmbus_wakeups_total", "Blocked waits ended by an interrupt.", prometheus.CounterValue, qLabels...)
	mMissed      = newDesc("vmbusd_vmbus_missed_wakeups_total", "Blocked waits that found work only on their timeout (an interrupt the host owed and did not raise).", prometheus.CounterValue, qLabels...)
	mPollSeconds = newDesc("vmbusd_netvsc_poll_seconds_total", "Time the queue spent polling its rings.", prometheus.CounterValue, qLabels...)
	mSleepSecs   = newDesc("vmbusd_netvsc_sleep_seconds_total", "Time the queue spent asleep on the interrupt fd.", prometheus.CounterValue, qLabels...)
	mRingUsed    = newDesc("vmbusd_vmbus_ring_used_bytes", "Bytes waiting in a ring (outbound: guest to host; inbound: host to guest).", prometheus.GaugeValue, "device", "queue", "ring")
	mRingSize    = newDesc("vmbusd_vmbus_ring_size_bytes", "Data size of a ring.", prometheus.GaugeValue, "device", "queue", "ring")
	mTxOversize  = newDesc("vmbusd_netvsc_transmit_oversize_dropped_total", "Frames within the MTU but larger than a send section, dropped for want of a GPA-direct pool (not in transmit_dropped).", prometheus.CounterValue, qLabels...)
	mSharedWake  = newDesc("vmbusd_vmbus_shared_wakeups_total", "Interrupts that woke the queue with nothing for it: another channel's on the shared interrupt fd, or a spurious one.", prometheus.CounterValue, qLabels...)
	mCtlFailures = newDesc("vmbusd_netvsc_control_failures_total", "Control requests the host answered with a failure status (NVSP or RNDIS).", prometheus.CounterValue, "device")

	// The data path's split between the synthetic NIC and the
	// accelerated-networking VF. Per device, not per queue: the queue
	// series above are the synthetic path's VMBus channels, and summing
	// these over path gives the NIC's whole traffic without counting a
	// frame twice.
	mPathRxPkts  = newDesc("vmbusd_netvsc_datapath_receive_packets_total", "Frames received, by path: synthetic (the VMBus rings) or vf (the VF's AF_XDP sockets).", prometheus.CounterValue, "device", "path")
	mPathRxBytes = newDesc("vmbusd_netvsc_datapath_receive_bytes_total", "Bytes of frames received, by path.", prometheus.CounterValue, "device", "path")
	mPathTxPkts  = newDesc("vmbusd_netvsc_datapath_transmit_packets_total", "Frames sent, by path (synthetic: completed by the host; vf: taken by the VF's socket).", prometheus.CounterValue, "device", "path")
	mPathTxBytes = newDesc("vmbusd_netvsc_datapath_transmit_bytes_total", "Bytes of frames sent, by path.", prometheus.CounterValue, "device", "path")
	mPathTxDrop  = newDesc("vmbusd_netvsc_datapath_transmit_dropped_total", "Frames dropped as unsendable, by path (synthetic: too big or oversize without a pool; vf: too big and not segmentable).", prometheus.CounterValue, "device", "path")
	mPathSeconds = newDesc("vmbusd_netvsc_datapath_seconds_total", "Time the NIC was up with its transmit on each path.", prometheus.CounterValue, "device", "path")
	mPathSwitch  = newDesc("vmbusd_netvsc_datapath_switches_total", "Data path switches between synthetic and the VF, by reason (vf_ready to the VF; the others back to synthetic).", prometheus.CounterValue, "device", "reason")
	mVFState     = newDesc("vmbusd_netvsc_vf_state", "1 for the VF pairing's state: off, none, searching, attaching, active, detaching; 0 for the others.", prometheus.GaugeValue, "device", "state")
	mVFInfo      = newDesc("vmbusd_netvsc_vf_info", "The NIC's VF setting and the VF as last paired: netdev, PCI function, driver, how it was matched, XDP hook and socket mode (always 1).",
		prometheus.GaugeValue, "device", "mode", "ifname", "pci", "driver", "matched_by", "xdp_attach", "xdp_bind")
	mVFAttempts = newDesc("vmbusd_netvsc_vf_attach_attempts_total", "Attempts to attach an associated VF (find, prepare, sockets, switch).", prometheus.CounterValue, "device")
	mVFFailures = newDesc("vmbusd_netvsc_vf_attach_failures_total", "Attach attempts that failed for another reason than a VF not there yet.", prometheus.CounterValue, "device")

	mHvConns    = newDesc("vmbusd_hvsock_connections_total", "Connections accepted by an hv_sock forward.", prometheus.CounterValue, "forward")
	mHvActive   = newDesc("vmbusd_hvsock_connections_active", "Connections an hv_sock forward carries now.", prometheus.GaugeValue, "forward")
	mHvBytes    = newDesc("vmbusd_hvsock_bytes_total", "Bytes forwarded; in: from the accepting side to the dialed side.", prometheus.CounterValue, "forward", "direction")
	mHvClosed   = newDesc("vmbusd_hvsock_connections_closed_total", "Closed connections by reason.", prometheus.CounterValue, "forward", "reason")
	mHvDialFail = newDesc("vmbusd_hvsock_dial_failures_total", "Connections whose other side could not be reached.", prometheus.CounterValue, "forward")
	mHvRefused  = newDesc("vmbusd_hvsock_connections_refused_total", "Connections closed unserved: max_connections were forwarding.", prometheus.CounterValue, "forward")

	mConnActive  = newDesc("vmbusd_daemon_connections_active", "Connections the metrics or control server holds now.", prometheus.GaugeValue, "server")
	mConnRefused = newDesc("vmbusd_daemon_connections_refused_total", "Connections closed unserved, by reason: total (max_connections), per_client (max_connections_per_user), forbidden (a user who may not use the control socket).", prometheus.CounterValue, "server", "reason")
	mCaptures    = newDesc("vmbusd_daemon_captures_active", "Captures running now.", prometheus.GaugeValue)
	mCapRefused  = newDesc("vmbusd_daemon_captures_refused_total", "Captures refused: max_captures were running.", prometheus.CounterValue)
)

var allDescs = []metricDesc{mBuildInfo, mNICInfo, mNICUp, mNICFailed, mLinkUp, mLinkSpeed, mQueues, mResets, mRescinds,
	mViolations, mInterrupts, mRxPackets, mRxBytes, mTxPackets, mTxBytes, mRxDropped, mRxRSC, mRxHeld, mTxDropped, mTxPath,
	mTxSendFull, mTxBusy, mRxCompBusy, mSignals, mWakeups, mMissed, mPollSeconds, mSleepSecs, mRingUsed,
	mRingSize, mTxOversize, mSharedWake, mCtlFailures, mPathRxPkts, mPathRxBytes, mPathTxPkts, mPathTxBytes,
	mPathTxDrop, mPathSeconds, mPathSwitch, mVFState, mVFInfo, mVFAttempts, mVFFailures,
	mHvConns, mHvActive, mHvBytes, mHvClosed, mHvDialFail, mHvRefused, mConnActive, mConnRefused,
	mCaptures, mCapRefused}

func newRegistry(d *Daemon) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(), &collector{d: d})
	return reg
}

type collector struct{ d *Daemon }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range allDescs {
		ch <- m.d
	}
}

func emit(ch chan<- prometheus.Metric, m metricDesc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(m.d, m.kind, v, labels...)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	bi := buildinfo.Get()
	emit(ch, mBuildInfo, 1, bi.Version, bi.Revision, bi.GoVersion)
	nics, fwds := c.d.runners()
	for _, r := range nics {
		c.collectNIC(ch, r)
	}
	for _, f := range fwds {
		collectForward(ch, f.name, f.fwd.Totals())
	}
	c.collectServers(ch)
}

func (c *collector) collectServers(ch chan<- prometheus.Metric) {
	d := c.d
	if d.metricsLn != nil {
		st := d.metricsLn.Stats()
		emit(ch, mConnActive, float64(st.Active), "metrics")
		emit(ch, mConnRefused, float64(st.RefusedTotal), "metrics", connlimit.ReasonTotal)
	}
	if d.ctl != nil {
		st := d.ctl.Stats()
		emit(ch, mConnActive, float64(st.Active), "control")
		emit(ch, mConnRefused, float64(st.RefusedTotal), "control", connlimit.ReasonTotal)
		emit(ch, mConnRefused, float64(st.RefusedPerClient), "control", connlimit.ReasonPerClient)
		emit(ch, mConnRefused, float64(d.ctl.Forbidden()), "control", "forbidden")
	}
	emit(ch, mCaptures, float64(d.captures.Load()))
	emit(ch, mCapRefused, float64(d.capturesRefused.Load()))
}

func (c *collector) collectNIC(ch chan<- prometheus.Metric, r *nicRunner) {
	dev := r.name()
	st := r.state()
	emit(ch, mNICInfo, 1, dev, st.Instance, st.MAC, st.Attach, st.Mode)
	emit(ch, mNICUp, b2f(st.State == stateUp), dev)
	emit(ch, mNICFailed, b2f(st.State == stateFailed), dev)
	emit(ch, mLinkUp, b2f(st.LinkUp), dev)
	emit(ch, mLinkSpeed, float64(st.LinkSpeed)/8, dev)
	emit(ch, mQueues, float64(st.Queues), dev)
	emit(ch, mResets, float64(st.Resets), dev)
	emit(ch, mRescinds, float64(st.Rescinds), dev)
	t := r.totals()
	for check, n := range violationCounts(t.viol) {
		emit(ch, mViolations, float64(n), dev, check)
	}
	emit(ch, mInterrupts, float64(t.irq), dev)
	emit(ch, mCtlFailures, float64(t.controlFailures), dev)
	collectVF(ch, dev, t.vf)
	for _, q := range t.queues {
		qs := strconv.Itoa(q.Queue)
		emit(ch, mRxPackets, float64(q.RxPackets), dev, qs)
		emit(ch, mRxBytes, float64(q.RxBytes), dev, qs)
		emit(ch, mTxPackets, float64(q.TxPackets), dev, qs)
		emit(ch, mTxBytes, float64(q.TxBytes), dev, qs)
		emit(ch, mRxDropped, float64(q.RxNoMemory+q.RxTooBig+q.RxRSCDropped), dev, qs)
		emit(ch, mRxRSC, float64(q.RxRSCFrames), dev, qs)
		emit(ch, mRxHeld, float64(q.RxHeld), dev, qs)
		emit(ch, mTxDropped, float64(q.TxTooBig), dev, qs)
		emit(ch, mTxPath, float64(q.TxCopied), dev, qs, "copy")
		emit(ch, mTxPath, float64(q.TxGPA), dev, qs, "gpa")
		emit(ch, mTxPath, float64(q.TxSegmented), dev, qs, "segment")
		emit(ch, mTxSendFull, float64(q.TxSendFull), dev, qs)
		emit(ch, mTxBusy, float64(q.TxBusy), dev, qs)
		emit(ch, mRxCompBusy, float64(q.RxCompBusy), dev, qs)
		emit(ch, mSignals, float64(q.Channel.TxSignals+q.Channel.RxSignals), dev, qs)
		emit(ch, mWakeups, float64(q.Channel.Wakeups), dev, qs)
		emit(ch, mMissed, float64(q.Channel.MissedWakeups), dev, qs)
		emit(ch, mPollSeconds, q.PollSeconds, dev, qs)
		emit(ch, mSleepSecs, q.SleepSeconds, dev, qs)
		emit(ch, mTxOversize, float64(q.TxDropOversize), dev, qs)
		emit(ch, mSharedWake, float64(q.Channel.SharedWakeups), dev, qs)
	}
	if nic, _ := r.current(); nic != nil {
		for _, q := range nic.Queues() {
			qs := strconv.Itoa(q.Index())
			ch0 := q.Channel()
			out, in := ch0.RingUsage()
			emit(ch, mRingUsed, float64(max(out, 0)), dev, qs, "outbound")
			emit(ch, mRingUsed, float64(max(in, 0)), dev, qs, "inbound")
			emit(ch, mRingSize, float64(ch0.Out().DataSize()), dev, qs, "outbound")
			emit(ch, mRingSize, float64(ch0.In().DataSize()), dev, qs, "inbound")
		}
	}
}

func collectVF(ch chan<- prometheus.Metric, dev string, vf VFStatus) {
	for _, p := range []struct {
		path string
		c    PathCounters
		secs float64
	}{{"synthetic", vf.Paths.Synthetic, vf.SecondsSynthetic}, {"vf", vf.Paths.VF, vf.SecondsVF}} {
		emit(ch, mPathRxPkts, float64(p.c.RxPackets), dev, p.path)
		emit(ch, mPathRxBytes, float64(p.c.RxBytes), dev, p.path)
		emit(ch, mPathTxPkts, float64(p.c.TxPackets), dev, p.path)
		emit(ch, mPathTxBytes, float64(p.c.TxBytes), dev, p.path)
		emit(ch, mPathTxDrop, float64(p.c.TxDropped), dev, p.path)
		emit(ch, mPathSeconds, p.secs, dev, p.path)
	}
	reasons := maps.Clone(vf.SwitchReasons)
	for _, r := range switchReasons {
		emit(ch, mPathSwitch, float64(reasons[reasonLabel(r)]), dev, reasonLabel(r))
		delete(reasons, reasonLabel(r))
	}
	for r, n := range reasons { // a reason this daemon does not know yet
		emit(ch, mPathSwitch, float64(n), dev, r)
	}
	for _, s := range vfStates {
		emit(ch, mVFState, b2f(vf.State == s), dev, s)
	}
	emit(ch, mVFInfo, 1, dev, vf.Mode, vf.IfName, vf.PCI, vf.Driver, vf.MatchedBy, vf.XDPAttach, vf.XDPBind)
	emit(ch, mVFAttempts, float64(vf.AttachAttempts), dev)
	emit(ch, mVFFailures, float64(vf.AttachFailures), dev)
}

func collectForward(ch chan<- prometheus.Metric, name string, t forward.Totals) {
	emit(ch, mHvConns, float64(t.Accepted), name)
	emit(ch, mHvActive, float64(t.Active), name)
	emit(ch, mHvBytes, float64(t.BytesIn), name, "in")
	emit(ch, mHvBytes, float64(t.BytesOut), name, "out")
	emit(ch, mHvDialFail, float64(t.DialFailed), name)
	emit(ch, mHvRefused, float64(t.Refused), name)
	for _, r := range forwardReasons {
		emit(ch, mHvClosed, float64(t.ClosedBy[r]), name, reasonKey(r))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metricsServer is the HTTP server of /metrics, /healthz and /readyz,
// bounded in time (a slow or silent client is cut off) and in what a
// request may carry; the connection limit is on its listener.
func (d *Daemon) metricsServer(m config.Metrics) *http.Server {
	return &http.Server{Handler: d.metricsHandler(), ReadHeaderTimeout: min(5*time.Second, m.RequestTimeout),
		ReadTimeout: m.RequestTimeout, WriteTimeout: m.RequestTimeout, IdleTimeout: m.IdleTimeout,
		MaxHeaderBytes: 16 << 10, ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelWarn)}
}

// metricsHandler serves /metrics, /healthz (the process answers) and
// /readyz (503 with the devices that are not ready), to GET (and HEAD)
// only: any other method gets 405.
func (d *Daemon) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-d.ready:
		default:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "starting")
			for _, b := range d.notReady() {
				fmt.Fprintln(w, b)
			}
			return
		}
		if bad := d.notReady(); len(bad) > 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, b := range bad {
				fmt.Fprintln(w, b)
			}
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "vmbusd: /metrics /healthz /readyz")
	})
	return mux
}
