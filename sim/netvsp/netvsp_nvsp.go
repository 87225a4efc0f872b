package netvsp

// NVSP messages from the guest, on the primary channel (docs/protocol/netvsc.md §2).
//
// Protocol violations a guest can commit against the NetVSP, counted under
// "netvsp: <kind>" in bus.Host.Violations (strict checking per the reference;
// the host carries on as the real one would, usually by completing with a
// failure status):
//
//	handshake   NVSP message before INIT; second INIT; INIT without completion
//	            requested; NVSP type not allowed at the negotiated version;
//	            second SEND_NDIS_CONFIG / SEND_NDIS_VER / SEND_RECV_BUF /
//	            SEND_SEND_BUF; SEND_NDIS_CONFIG after SEND_RECV_BUF;
//	            SEND_RECV_BUF before SEND_NDIS_CONFIG (v >= 2, openvmm); a
//	            GPADL that is not the device's buffer; REVOKE of a buffer
//	            never sent or with another id; malformed NVSP message;
//	            unexpected NVSP type
//	channels    NVSP control message or RNDIS control message on a
//	            sub-channel; second SUBCHANNEL request in a session;
//	            SUBCHANNEL operation other than ALLOCATE, or before the
//	            receive buffer
//	receive     completion for an unknown receive transaction; receive
//	            completion that is not SEND_RNDIS_PKT_COMPLETE; guest sent
//	            a transfer-page packet
//	send        SEND_RNDIS_PKT without a completion requested, before the
//	            receive buffer, without data, with a bad send section, with
//	            a GPA range outside guest memory; RNDIS before INITIALIZE
//	            completed or after HALT; more PACKET_MSGs than
//	            max_pkts_per_msg; aggregated PACKET_MSG not padded; malformed
//	            PACKET_MSG or per-packet info; frame with an in-frame 802.1Q
//	            tag (dropped, as Hyper-V does); frame larger than the MTU;
//	            bad LSO request or LSO without LSOv2 enabled; bad checksum
//	            offload request
//	rndis       malformed RNDIS control message; second INITIALIZE; QUERY or
//	            SET before INITIALIZE; request id 0; query of an NDIS object
//	            without its header; bad OID value; RSS changed without
//	            disabling it first; RNDIS message the guest may not send
//	vf          SWITCH_DATA_PATH to a path other than synthetic (0) or VF (1);
//	            SWITCH_DATA_PATH to the VF in a session that never had a VF
//	            association
//	ring        corrupt guest ring (vmbus.CorruptKind)

import (
	"slices"
	"time"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

// nvspComplete answers a guest request with an NVSP message (padded to the
// host's message size). The table-during-sync fault puts a send
// indirection table in front of it.
func (ss *nicSession) nvspComplete(ch *nicChan, tid uint64, msg []byte) error {
	if ss.n.faults.take(NICFaultTableDuringSync) {
		ss.writeTable(ch, 1)
	}
	return ch.c.SendCompletion(tid, ss.nvspMsg(msg))
}

// emptyComplete answers a request that has no NVSP answer with an empty
// completion, as openvmm does when the guest asked for one.
func (ss *nicSession) emptyComplete(ch *nicChan, p *vmbus.Packet) error {
	if !p.CompletionRequested() {
		return nil
	}
	return ch.c.SendCompletion(p.TransID)
}

// status applies the nvsp-status fault to an answer.
func (ss *nicSession) status(s nvsp.Status) nvsp.Status {
	if s == nvsp.StatusSuccess && ss.n.faults.take(NICFaultNVSPStatus) {
		return nvsp.StatusFail
	}
	return s
}

func (ss *nicSession) supportedVersion(v uint32) bool {
	return v <= ss.n.cfg.MaxNVSPVersion && slices.Contains(nvsp.Versions(), v)
}

// handleNVSP serves an NVSP message other than SEND_RNDIS_PKT on the
// primary.
func (ss *nicSession) handleNVSP(ch *nicChan, p *vmbus.Packet, t nvsp.Type) error {
	cfg := ss.cfg.Load()
	pl := p.Payload()
	nv := &ss.nv
	if t != nvsp.TypeInit {
		if cfg.version == 0 {
			ss.violation("NVSP " + t.String() + " before INIT")
			return ss.emptyComplete(ch, p)
		}
		if !nvsp.TypeAllowed(t, cfg.version) {
			ss.violation("NVSP " + t.String() + " not allowed at the negotiated version")
			return ss.emptyComplete(ch, p)
		}
	}
	malformed := func() error {
		ss.violation("malformed NVSP " + t.String())
		return ss.emptyComplete(ch, p)
	}
	switch t {
	case nvsp.TypeInit:
		var m nvsp.Init
		if m.Unmarshal(pl) != nil {
			return malformed()
		}
		if !p.CompletionRequested() {
			ss.violation("INIT without a completion requested")
		}
		st := nvsp.StatusNone // openvmm's answer to a version it does not speak
		if cfg.version != 0 {
			ss.violation("second INIT")
			st = nvsp.StatusFail
		} else if ss.supportedVersion(m.MinVersion) {
			st = nvsp.StatusSuccess
		}
		st = ss.status(st)
		neg := uint32(0xffffffff)
		if m.MinVersion == nvsp.Version1 {
			neg = 2
		}
		if st == nvsp.StatusSuccess && cfg.version == 0 {
			ss.publish(func(c *sessCfg) { c.version = m.MinVersion })
			ss.log.Info("NVSP version negotiated", "version", m.MinVersion)
		}
		b := nvsp.InitComplete{NegotiatedVersion: neg, MaxMDLChainLen: 34, Status: st}.Marshal(ss.nvBuf[:0])
		return ss.nvspComplete(ch, p.TransID, b)

	case nvsp.TypeSendNDISConfig:
		var m nvsp.NDISConfig
		if m.Unmarshal(pl) != nil {
			return malformed()
		}
		if nv.haveConfig {
			ss.violation("second SEND_NDIS_CONFIG")
		}
		if cfg.recvReady {
			ss.violation("SEND_NDIS_CONFIG after SEND_RECV_BUF")
		}
		nv.haveConfig = true
		mtu := int(m.MTU)
		if mtu < minNDISMTU || mtu > maxNDISMTU {
			mtu = minNDISMTU // "As in the vmswitch" (openvmm)
		}
		mtu = min(mtu, ss.n.cfg.MTU+vswitch.EthHeaderLen)
		ss.publish(func(c *sessCfg) { c.mtu, c.caps = mtu, m.Capabilities })
		return ss.emptyComplete(ch, p)

	case nvsp.TypeSendNDISVer:
		var m nvsp.NDISVersion
		if m.Unmarshal(pl) != nil {
			return malformed()
		}
		if nv.haveNDISVer {
			ss.violation("second SEND_NDIS_VER")
		}
		nv.haveNDISVer = true
		ss.publish(func(c *sessCfg) { c.ndisVersion = m.Version() })
		return ss.emptyComplete(ch, p)

	case nvsp.TypeSendRecvBuf:
		var m nvsp.RecvBuf
		if m.Unmarshal(pl) != nil {
			return malformed()
		}
		return ss.recvBuf(ch, p, &m)

	case nvsp.TypeRevokeRecvBuf:
		var m nvsp.RevokeRecvBuf
		if m.Unmarshal(pl) != nil {
			return malformed()
		}
		if !cfg.recvReady || m.ID != cfg.recvID {
			ss.violation("REVOKE_RECV_BUF of a receive buffer never sent or with another id")
		}
		ss.publish(func(c *sessCfg) { c.stopped = true })
		return ss.emptyComplete(ch, p)

	case nvsp.TypeSendSendBuf:
		var m nvsp.SendBuf
		if m.Unmarshal(pl) != nil {
			return malformed()
		}
		return ss.sendBuf(ch, p, &m)

	case nvsp.TypeRevokeSendBuf:
		var m nvsp.RevokeSendBuf
		if m.Unmarshal(pl) != nil {
			return malformed()
		}
		if !cfg.sendReady {
			ss.violation("REVOKE_SEND_BUF of a send buffer never sent")
		}
		ss.publish(func(c *sessCfg) { c.sendReady = false })
		return ss.emptyComplete(ch, p)

	case nvsp.TypeSwitchDataPath:
		var m nvsp.SwitchDataPath
		if m.Unmarshal(pl) != nil {
			return malformed()
		}
		vf := m.ActiveDataPath == nvsp.DataPathVF
		switch {
		case m.ActiveDataPath > nvsp.DataPathVF:
			ss.violation("SWITCH_DATA_PATH to an unknown data path")
		case vf && !ss.nv.vfEver:
			// A guest switches after an association; one withdrawn
			// meanwhile is a race, not a fault.
			ss.violation("SWITCH_DATA_PATH to the VF without a VF association")
		}
		// Noted first, so that no frame steered by it predates the note.
		if vf {
			ss.n.vfNote(VFGuestSwitchVF, "")
		} else {
			ss.n.vfNote(VFGuestSwitchSynth, "")
		}
		ss.publish(func(c *sessCfg) { c.dataPathVF = vf })
		ss.log.Info("data path switched", "vf", vf)
		// Linux >= 5.12 waits for this empty completion (docs/protocol/netvsc.md §2.9).
		return ss.emptyComplete(ch, p)

	case nvsp.TypeSubchannel:
		var m nvsp.SubchannelRequest
		if m.Unmarshal(pl) != nil {
			return malformed()
		}
		return ss.subchannels(ch, p, &m)

	case nvsp.TypeOIDQueryEx:
		// openvmm answers NOT_SUPPORTED; no guest uses it.
		return ss.emptyComplete(ch, p)
	}
	ss.violation("unexpected NVSP " + t.String() + " from the guest")
	return ss.emptyComplete(ch, p)
}

// recvBuf serves SEND_RECV_BUF (docs/protocol/netvsc.md §2.4, §2.5, §7 host 2).
func (ss *nicSession) recvBuf(ch *nicChan, p *vmbus.Packet, m *nvsp.RecvBuf) error {
	cfg := ss.cfg.Load()
	if !p.CompletionRequested() {
		ss.violation("SEND_RECV_BUF without a completion requested")
	}
	fail := func(what string) error {
		ss.violation(what)
		b := nvsp.RecvBufComplete{Status: nvsp.StatusFail}.Marshal(ss.nvBuf[:0])
		return ss.nvspComplete(ch, p.TransID, b)
	}
	switch {
	case cfg.recvReady:
		return fail("second SEND_RECV_BUF")
	case cfg.version >= nvsp.Version2 && !ss.nv.haveConfig:
		return fail("SEND_RECV_BUF before SEND_NDIS_CONFIG")
	case m.GPADLHandle != ss.recvGPADL:
		return fail("SEND_RECV_BUF with a GPADL that is not the receive buffer's")
	}
	mtu := cfg.mtu
	if mtu == 0 {
		mtu = minNDISMTU // NVSP 1: no NDIS config
		ss.publish(func(c *sessCfg) { c.mtu = mtu })
	}
	size := ss.n.cfg.RecvSectionSize
	if size == RecvSectionFromMTU {
		size = 256 + mtu + 36 // openvmm: header room + MTU + the last 36 unusable bytes
	}
	count := len(ss.recv) / size
	queues := min(ss.n.cfg.MaxQueues, count-rxControlSections)
	per := (count - rxControlSections) / queues
	if per*size < mtu+512 {
		return fail("receive buffer too small for its queues")
	}
	ans := nvsp.RecvBufComplete{Status: ss.status(nvsp.StatusSuccess), NumSections: 1,
		Section: nvsp.RecvBufSection{SubAllocSize: uint32(size), NumSubAllocs: uint32(count), EndOffset: uint32(size * count)}}
	f := &ss.n.faults
	switch {
	case f.take(NICFaultRecvSections):
		ans.NumSections = 2
	case f.take(NICFaultRecvOffset):
		ans.Section.Offset = 64
	case f.take(NICFaultRecvFit):
		ans.Section.NumSubAllocs = uint32(len(ss.recv)/size + 1)
	}
	if ans.Status == nvsp.StatusSuccess {
		ss.publish(func(c *sessCfg) {
			c.recvReady, c.recvID = true, m.ID
			c.subSize, c.subCount = uint32(size), uint32(count)
			c.perQueue, c.queues = uint32(per), queues
		})
		ch.initRings(ss.cfg.Load())
		ss.log.Info("receive buffer connected", "id", m.ID, "section", size, "count", count, "queues", queues)
	}
	return ss.nvspComplete(ch, p.TransID, ans.Marshal(ss.nvBuf[:0]))
}

// sendBuf serves SEND_SEND_BUF: the host chooses the section size.
func (ss *nicSession) sendBuf(ch *nicChan, p *vmbus.Packet, m *nvsp.SendBuf) error {
	cfg := ss.cfg.Load()
	if !p.CompletionRequested() {
		ss.violation("SEND_SEND_BUF without a completion requested")
	}
	fail := func(what string) error {
		ss.violation(what)
		b := nvsp.SendBufComplete{Status: nvsp.StatusFail}.Marshal(ss.nvBuf[:0])
		return ss.nvspComplete(ch, p.TransID, b)
	}
	switch {
	case cfg.sendReady || cfg.sendSecCount != 0:
		return fail("second SEND_SEND_BUF")
	case m.GPADLHandle != ss.sendGPADL:
		return fail("SEND_SEND_BUF with a GPADL that is not the send buffer's")
	}
	size := uint32(ss.n.cfg.SendSectionSize)
	ans := nvsp.SendBufComplete{Status: ss.status(nvsp.StatusSuccess), SectionSize: size}
	if ss.n.faults.take(NICFaultSendSection) {
		ans.SectionSize = size - 2
	}
	if ans.Status == nvsp.StatusSuccess {
		ss.publish(func(c *sessCfg) {
			c.sendReady, c.sendSecSize, c.sendSecCount = true, size, uint32(len(ss.send))/size
		})
		ss.log.Info("send buffer connected", "id", m.ID, "section", size, "count", uint32(len(ss.send))/size)
	}
	return ss.nvspComplete(ch, p.TransID, ans.Marshal(ss.nvBuf[:0]))
}

// subchannels serves SUBCHANNEL: grant min(asked, MaxQueues-1), or fail;
// then offer the sub-channels, which the simulated kernel opens one by
// one (docs/protocol/netvsc.md §2.8).
func (ss *nicSession) subchannels(ch *nicChan, p *vmbus.Packet, m *nvsp.SubchannelRequest) error {
	cfg := ss.cfg.Load()
	n := ss.n
	answer := func(st nvsp.Status, count uint32) error {
		b := nvsp.SubchannelComplete{Status: st, Count: count}.Marshal(ss.nvBuf[:0])
		return ss.nvspComplete(ch, p.TransID, b)
	}
	switch {
	case m.Op != nvsp.SubchannelAllocate:
		ss.violation("SUBCHANNEL operation other than ALLOCATE")
		return answer(nvsp.StatusFail, 0)
	case ss.nv.subRequested:
		// "Cannot re-send NVS subchannel request on the same session"
		// (DPDK 7306b83a80).
		ss.violation("second SUBCHANNEL request in one session")
		return answer(nvsp.StatusFail, 0)
	case !cfg.recvReady:
		ss.violation("SUBCHANNEL before the receive buffer")
		return answer(nvsp.StatusFail, 0)
	}
	ss.nv.subRequested = true
	if !p.CompletionRequested() {
		ss.violation("SUBCHANNEL without a completion requested")
	}
	if n.cfg.FailSubchannels || n.faults.take(NICFaultSubchannelFail) {
		ss.log.Info("sub-channel request refused", "asked", m.Count)
		return answer(ss.status(nvsp.StatusFail), 0)
	}
	grant := min(int(m.Count), n.cfg.MaxQueues-1, cfg.queues-1)
	count := uint32(grant)
	if n.faults.take(NICFaultSubchannelOvergrant) {
		count++
	}
	if n.faults.has(NICFaultRxDuringSetup) {
		ss.publish(func(c *sessCfg) { c.settingUp = true })
		ss.injectSetupFrames(ch)
	}
	st := ss.status(nvsp.StatusSuccess)
	if err := answer(st, count); err != nil || st != nvsp.StatusSuccess {
		return err
	}
	ss.publish(func(c *sessCfg) { c.granted, c.settingUp = grant, grant > 0 })
	ss.log.Info("sub-channels granted", "asked", m.Count, "granted", grant)
	if grant == 0 {
		return nil
	}
	offers := make([]bus.SubchannelOffer, grant)
	for i := range offers {
		offers[i] = bus.SubchannelOffer{Delay: time.Duration(i+1) * n.cfg.SubchannelDelay, NeverOpens: i >= grant-n.cfg.NeverOpen}
	}
	// The NetVSP takes each sub-channel on before its ring file appears,
	// as Hyper-V answers the guest kernel's open only once its end is up:
	// a guest that has opened a queue finds the host using it.
	accept := func(c *bus.Channel) {
		done := make(chan struct{})
		ss.post(ctlEvent{kind: evSubchannel, ch: c, done: done})
		select {
		case <-done:
		case <-ss.ctx.Done():
		}
	}
	opened := ss.s.OfferSubchannels(offers, accept)
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		for range opened {
		}
		ss.post(ctlEvent{kind: evSubchannelDone})
	}()
	return nil
}

// injectSetupFrames queues a few broadcast frames on the primary while the
// guest sets sub-channels up (the rx-during-setup fault).
func (ss *nicSession) injectSetupFrames(ch *nicChan) {
	if !ss.n.faults.take(NICFaultRxDuringSetup) {
		return
	}
	f := make([]byte, 64)
	for i := range 6 {
		f[i] = 0xff
	}
	copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 0x99})
	be.PutUint16(f[12:], 0x88b5) // local experimental ethertype
	for range 4 {
		ch.rxq.push(f, 0, 0, false, 1)
	}
	ch.deliver()
}
