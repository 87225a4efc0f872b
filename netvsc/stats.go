package netvsc

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Counters are plain per-queue uint64 fields read at scrape time (house
// style). Each is written under one of the queue's locks, so a load and a
// store suffice (no locked instruction on the hot path); readers use
// atomic loads.
type ctr struct{ v atomic.Uint64 }

func (c *ctr) add(n uint64) { c.v.Store(c.v.Load() + n) }
func (c *ctr) inc()         { c.v.Store(c.v.Load() + 1) }
func (c *ctr) load() uint64 { return c.v.Load() }

// incShared counts for a writer under no lock that may run beside another
// (Wait and WaitTx off their locks): an atomic add.
func (c *ctr) incShared() { c.v.Add(1) }

// queueCounters are one queue's counters. Names follow Linux hv_netvsc's
// ethtool -S (docs/protocol/netvsc.md §6) where one exists.
type queueCounters struct {
	// under inMu (the drain, and sleep)
	rxPackets, rxBytes   ctr
	rxNoMemory           ctr // frames dropped: no packet, staging and held ring full (DPDK "ring full", imissed)
	rxHeld               ctr // frames left in the receive buffer, their completion held: no packet or staging slot
	rxTooBig             ctr // frames larger than a packet buffer, dropped
	rxXfers              ctr // transfer-page packets
	txPackets, txBytes   ctr // counted when the host completes the send (DPDK)
	txCompletions        ctr // send completions received
	txFailed             ctr // completions with a status other than success
	rxPPIErrors          ctr // frames whose per-packet info was unreadable (delivered without metadata)
	rxRSCFrames          ctr // coalesced frames reassembled from RSC fragments
	rxRSCDropped         ctr // coalesced frames dropped: fragments out of order, of another id, too long, incomplete
	txWakeups, rxWakeups ctr
	idleSleeps           ctr // sleeps on the ring, both roles
	rxSleeps             ctr // Wait's sleeps on the ring
	rxSleepsOwed         ctr // of those, with sends the host had not completed
	txSleeps             ctr // WaitTx's sleeps on the ring
	// under outMu
	rxCompBusy ctr // receive completions deferred: outbound ring full
	rxCompSent ctr // receive completions sent
	// by Wait's and WaitTx's callers, under no lock (incShared)
	rxPolls           ctr // Wait found work polling
	rxLoadPolls       ctr // of those, past its budget, polling on for full load
	txPolls           ctr // a hybrid WaitTx's poll found room (txPollLocked)
	txBlocked         ctr // WaitTx found inMu held and waited for its holder's drain
	txBlockedTimeouts ctr // of those, ended by the timer: no drain poked it
	rxKicked          ctr // Wait's sleeps a streaming or stalled TxBurst ended
	// under txMu
	txSendFull ctr // no free send section: the frame went GPA-direct (Linux tx_send_full)
	txBusy     ctr // outbound ring full or request table full (Linux tx_busy)
	txNoSpace  ctr // no section, no GPA: the burst stopped short
	txTooBig   ctr // frames larger than the MTU that are no TSO super-frame (or malformed ones), dropped
	// frames no larger than the MTU but larger than a send section, with
	// no GPA pool to send them from: dropped, never cut up
	txDropOversize ctr
	txCopied       ctr // frames copied into send sections
	txGPA          ctr // frames sent GPA-direct
	txSegmented    ctr // TSO super-frames cut in software (Linux tx_scattered's role)
	txSegments     ctr // the frames that produced
	txLSO          ctr // large sends handed to the host (LSOv2), whole or cut to fit a section
	txSections     ctr // NVSP sends of send-buffer sections
	txVLANMoved    ctr // in-frame 802.1Q tags moved into the per-packet info
	stopQueue      ctr // TX found no resources
	// Time Wait spent polling and asleep on the interrupt fd (atomic adds:
	// Wait may run beside TxBurst's WaitTx).
	pollNanos, sleepNanos ctr
}

// QueueStats is a snapshot of one queue's counters.
type QueueStats struct {
	Queue int
	// Ethtool maps each counter's ethtool-style name to its value.
	RxPackets, RxBytes, TxPackets, TxBytes uint64
	RxNoMemory, RxTooBig, RxCompBusy       uint64
	TxSendFull, TxBusy, TxNoSpace          uint64
	TxTooBig, TxCopied, TxGPA              uint64
	TxSegmented, TxSegments, TxSections    uint64
	TxCompletions, TxFailed, RxXfers       uint64
	RxCompSent, RxPPIErrors, TxVLANMoved   uint64
	StopQueue                              uint64
	// TxDropOversize: frames that fit the MTU but not a send section,
	// dropped because no GPA pool was configured to send them from
	// (Config.GPAPool). Frames are sent as they are or not at all.
	TxDropOversize uint64
	// TxLSO counts large sends handed to the host with the LSOv2
	// per-packet info (the host cuts them into segments).
	TxLSO uint64
	// RxHeld counts frames that found no packet or staging slot and were
	// left in the receive buffer, their transfer page's completion held
	// until a later RxBurst copied them: the host's buffer fills and it
	// drops, instead of the guest dropping frames it took.
	RxHeld uint64
	// RxRSCFrames and RxRSCDropped: coalesced frames reassembled from the
	// host's RSC fragments, and dropped for a fragment sequence that
	// broke the rules (Config.RSC).
	RxRSCFrames, RxRSCDropped uint64
	// PollSeconds and SleepSeconds: time Wait spent polling the rings and
	// asleep on the interrupt fd (hybrid: both; poll: only the first).
	PollSeconds, SleepSeconds float64
	// Waits says how Wait and WaitTx ended their waits: by polling, by
	// sleeping on the ring, or (WaitTx) behind another holder of inMu.
	Waits WaitStats
	// Ring-level counters of the queue's channel.
	Channel vmbus.ChannelStats
}

// WaitStats are a queue's waits by role: Rx for Wait (work for RxBurst),
// Tx for WaitTx (room for TxBurst).
type WaitStats struct {
	// RxPolls: hybrid Waits that returned work found by polling, within
	// the poll budget or past it under full load (RxLoadPolls counts
	// those past it, wait.go loadPollSpan). Poll mode counts none.
	RxPolls, RxLoadPolls uint64
	// RxSleeps: Waits that slept on the ring (interrupt unmasked);
	// RxSleepsOwed those that went to sleep while the host held sends it
	// had not completed (send sections or GPA slots); RxWakeups the sleeps
	// the ring ended.
	RxSleeps, RxSleepsOwed, RxWakeups uint64
	// RxKicked: Wait's sleeps a TxBurst ended because the transmitter
	// went under load (wait.go loadPollSpan), so that Wait polls the
	// host's completions in instead of leaving them for an interrupt.
	RxKicked uint64
	// TxPolls: hybrid WaitTx calls whose poll for completions found room;
	// TxSleeps WaitTx's sleeps on the ring (in Poll mode a spin on it),
	// TxWakeups those the ring ended.
	TxPolls, TxSleeps, TxWakeups uint64
	// TxBlocked: WaitTx calls that found inMu held (a Wait asleep on the
	// ring, or a drain) and waited for its holder's drain to poke them;
	// TxBlockedTimeouts those that waited out the timer (1 ms) instead.
	TxBlocked, TxBlockedTimeouts uint64
}

func (q *Queue) stats() QueueStats {
	c := &q.c
	return QueueStats{
		Queue:     q.idx,
		RxPackets: c.rxPackets.load(), RxBytes: c.rxBytes.load(),
		TxPackets: c.txPackets.load(), TxBytes: c.txBytes.load(),
		RxNoMemory: c.rxNoMemory.load(), RxTooBig: c.rxTooBig.load(), RxCompBusy: c.rxCompBusy.load(),
		TxSendFull: c.txSendFull.load(), TxBusy: c.txBusy.load(), TxNoSpace: c.txNoSpace.load(),
		TxTooBig: c.txTooBig.load(), TxCopied: c.txCopied.load(), TxGPA: c.txGPA.load(),
		TxSegmented: c.txSegmented.load(), TxSegments: c.txSegments.load(), TxSections: c.txSections.load(),
		TxCompletions: c.txCompletions.load(), TxFailed: c.txFailed.load(), RxXfers: c.rxXfers.load(),
		RxCompSent: c.rxCompSent.load(), RxPPIErrors: c.rxPPIErrors.load(), TxVLANMoved: c.txVLANMoved.load(),
		StopQueue: c.stopQueue.load(), TxDropOversize: c.txDropOversize.load(),
		TxLSO: c.txLSO.load(), RxHeld: c.rxHeld.load(),
		RxRSCFrames: c.rxRSCFrames.load(), RxRSCDropped: c.rxRSCDropped.load(),
		PollSeconds: float64(c.pollNanos.load()) / 1e9, SleepSeconds: float64(c.sleepNanos.load()) / 1e9,
		Waits: WaitStats{
			RxPolls: c.rxPolls.load(), RxLoadPolls: c.rxLoadPolls.load(),
			RxSleeps: c.rxSleeps.load(), RxSleepsOwed: c.rxSleepsOwed.load(), RxWakeups: c.rxWakeups.load(), RxKicked: c.rxKicked.load(),
			TxPolls: c.txPolls.load(), TxSleeps: c.txSleeps.load(), TxWakeups: c.txWakeups.load(),
			TxBlocked: c.txBlocked.load(), TxBlockedTimeouts: c.txBlockedTimeouts.load(),
		},
		Channel: q.ch.Stats(),
	}
}

// Stats is a snapshot of a NIC's counters.
type Stats struct {
	Queues []QueueStats
	// Violations counts host protocol violations by check ("vmbus: len8",
	// "netvsc: out of range", ...), summed over every reset of this NIC
	// value (each one is fatal to the configuration it hit).
	Violations map[string]uint64
	// Interrupts the device delivered; LinkChanges seen; Resets:
	// configurations torn down (Reconfigure); ControlTimeouts.
	Interrupts, LinkChanges, Reconfigures, ControlTimeouts uint64
	// ControlFailures: control requests the host answered with a failure
	// status (NVSP or RNDIS; each also logged) and control sends it
	// completed with one. Failed data sends are tx_queue_N_failed.
	ControlFailures uint64
	// RxIgnored: data frames acknowledged and dropped because the data
	// path was not running (bring-up, DPDK 107f3cf310).
	RxIgnored uint64
	// HostEvents counts inband host messages by NVSP type name.
	HostEvents map[string]uint64
}

// Named is one counter with its ethtool -S style name.
type Named struct {
	Name  string
	Value uint64
}

// Ethtool returns the counters under Linux hv_netvsc's ethtool -S names
// (docs/protocol/netvsc.md §6): the global ones summed over queues, then per queue
// tx_queue_N_packets, ..., then vmbusd's own additions.
func (s *Stats) Ethtool() []Named {
	var g QueueStats
	for _, q := range s.Queues {
		g.TxSegmented += q.TxSegmented
		g.TxNoSpace += q.TxNoSpace
		g.TxTooBig += q.TxTooBig
		g.TxBusy += q.TxBusy
		g.TxSendFull += q.TxSendFull
		g.RxCompBusy += q.RxCompBusy
		g.RxNoMemory += q.RxNoMemory
		g.StopQueue += q.StopQueue
		g.TxVLANMoved += q.TxVLANMoved
	}
	out := []Named{
		{"tx_scattered", g.TxSegmented}, {"tx_no_memory", 0}, {"tx_no_space", g.TxNoSpace},
		{"tx_too_big", g.TxTooBig}, {"tx_busy", g.TxBusy}, {"tx_send_full", g.TxSendFull},
		{"rx_comp_busy", g.RxCompBusy}, {"rx_no_memory", g.RxNoMemory},
		{"stop_queue", g.StopQueue}, {"wake_queue", g.StopQueue}, {"vlan_error", g.TxVLANMoved},
	}
	for _, q := range s.Queues {
		n := q.Queue
		out = append(out,
			Named{fmt.Sprintf("tx_queue_%d_packets", n), q.TxPackets},
			Named{fmt.Sprintf("tx_queue_%d_bytes", n), q.TxBytes},
			Named{fmt.Sprintf("rx_queue_%d_packets", n), q.RxPackets},
			Named{fmt.Sprintf("rx_queue_%d_bytes", n), q.RxBytes},
			Named{fmt.Sprintf("rx_queue_%d_xdp_drop", n), 0},
		)
	}
	for _, q := range s.Queues {
		n := q.Queue
		out = append(out,
			Named{fmt.Sprintf("tx_queue_%d_copied", n), q.TxCopied},
			Named{fmt.Sprintf("tx_queue_%d_gpa_direct", n), q.TxGPA},
			Named{fmt.Sprintf("tx_queue_%d_segmented", n), q.TxSegmented},
			Named{fmt.Sprintf("tx_queue_%d_lso", n), q.TxLSO},
			Named{fmt.Sprintf("tx_queue_%d_sections", n), q.TxSections},
			Named{fmt.Sprintf("tx_queue_%d_failed", n), q.TxFailed},
			Named{fmt.Sprintf("tx_queue_%d_drop_oversize", n), q.TxDropOversize},
			Named{fmt.Sprintf("rx_queue_%d_too_big", n), q.RxTooBig},
			Named{fmt.Sprintf("rx_queue_%d_held", n), q.RxHeld},
			Named{fmt.Sprintf("rx_queue_%d_rsc_frames", n), q.RxRSCFrames},
			Named{fmt.Sprintf("rx_queue_%d_rsc_dropped", n), q.RxRSCDropped},
			Named{fmt.Sprintf("rx_queue_%d_signals", n), q.Channel.RxSignals},
			Named{fmt.Sprintf("tx_queue_%d_signals", n), q.Channel.TxSignals},
			Named{fmt.Sprintf("queue_%d_wakeups", n), q.Channel.Wakeups},
		)
	}
	return out
}

// violations counts protocol violations by check for a NIC, across
// reconfigurations.
type violations struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (v *violations) add(check string) {
	v.mu.Lock()
	if v.m == nil {
		v.m = map[string]uint64{}
	}
	v.m[check]++
	v.mu.Unlock()
}

func (v *violations) snapshot() map[string]uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.m)
}

// AllChecks lists every check name a violation can be counted under, so
// exporters can publish zeros.
func AllChecks() []string {
	var out []string
	for _, k := range vmbus.CorruptKinds() {
		out = append(out, "vmbus: "+k.String())
	}
	for _, k := range protoerr.Kinds() {
		out = append(out, "netvsc: "+k.String())
	}
	slices.Sort(out)
	return out
}
