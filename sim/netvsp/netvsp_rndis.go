package netvsp

// RNDIS control messages from the guest (docs/protocol/netvsc.md §3), answered the way
// openvmm's handle_rndis_control_message / handle_oid_query /
// handle_oid_set do, with the values §7 host 9 asks for. Answers go back
// as transfer-page packets from the control pool, ControlDelay after the
// request (the request itself is completed at once, as openvmm does).

import (
	"encoding/binary"
	"slices"
	"time"
	"unicode/utf16"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/vswitch"
)

// handleRNDISControl serves one RNDIS control message on the primary and
// returns the NVSP status that completes its send.
func (ss *nicSession) handleRNDISControl(ch *nicChan, b []byte) nvsp.Status {
	t, ml, err := rndis.ParseHeader(b)
	if err != nil {
		ss.violation("malformed RNDIS control message: " + kindOf(err))
		return nvsp.StatusFail
	}
	b = b[:ml]
	nv := &ss.nv
	cfg := ss.cfg.Load()
	ss.n.st.control.Add(1)
	if nv.halted {
		ss.violation("RNDIS " + t.String() + " after HALT")
		return nvsp.StatusFail
	}
	bad := func(err error) nvsp.Status {
		ss.violation("malformed RNDIS " + t.String() + ": " + kindOf(err))
		return nvsp.StatusFail
	}
	switch t {
	case rndis.TypeInitialize:
		var m rndis.Initialize
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		ss.checkRequestID(m.RequestID)
		st := rndis.StatusSuccess
		if nv.rndisInit {
			ss.violation("second RNDIS INITIALIZE")
		}
		if m.MajorVersion != rndis.MajorVersion {
			st = rndis.StatusBadVersion
		}
		ans := rndis.InitializeComplete{
			RequestID: m.RequestID, Status: st,
			MajorVersion: rndis.MajorVersion, MinorVersion: rndis.MinorVersion,
			DeviceFlags: rndis.DFConnectionless, Medium: rndis.Medium8023,
			MaxPacketsPerMessage: maxPacketsPerMessage, MaxTransferSize: maxTransferSize,
			PacketAlignmentFactor: alignFactor,
		}
		ss.reply(ans.Marshal(nil))
		if st == rndis.StatusSuccess && !nv.rndisInit {
			nv.rndisInit = true
			ss.publish(func(c *sessCfg) { c.rndisReady = true })
			n := ss.n
			n.linkMu.Lock()
			vf := n.vfPresent
			n.linkMu.Unlock()
			if vf && cfg.version >= nvsp.Version4 && cfg.caps&nvsp.NDISConfigCapSRIOV != 0 {
				// After the INITIALIZE completion, VFDelay later (openvmm:
				// older Linux guests race over the interface name).
				nv.vfDue = time.Now().Add(ss.n.cfg.ControlDelay + n.cfg.VFDelay)
			}
		}
	case rndis.TypeQuery:
		var m rndis.Query
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		ss.checkRequestID(m.RequestID)
		if !nv.rndisInit {
			ss.violation("RNDIS QUERY before INITIALIZE")
		}
		st, info := ss.query(m.OID, m.Info)
		ans := rndis.QueryComplete{RequestID: m.RequestID, Status: st, Info: info}
		out := ans.Marshal(nil)
		if ss.n.faults.take(NICFaultRNDISQueryInfo) {
			binary.LittleEndian.PutUint32(out[20:], uint32(len(out))) // info offset past the message
		}
		ss.reply(out)
	case rndis.TypeSet:
		var m rndis.Set
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		ss.checkRequestID(m.RequestID)
		if !nv.rndisInit {
			ss.violation("RNDIS SET before INITIALIZE")
		}
		st := ss.set(ch, m.OID, m.Info)
		ss.reply(rndis.SetComplete{RequestID: m.RequestID, Status: st}.Marshal(nil))
	case rndis.TypeHalt:
		var m rndis.Halt
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		// No completion; the host stops the data path (openvmm ignores it).
		nv.halted = true
		ss.publish(func(c *sessCfg) { c.rndisReady, c.stopped = false, true })
		ss.log.Info("RNDIS halted")
	case rndis.TypeReset:
		// openvmm does not implement it.
		ss.reply(rndis.ResetComplete{Status: rndis.StatusNotSupported}.Marshal(nil))
	case rndis.TypeKeepalive:
		var m rndis.Keepalive
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		ss.reply(rndis.KeepaliveComplete{RequestID: m.RequestID, Status: rndis.StatusSuccess}.Marshal(nil))
	case rndis.TypeSetEx:
		// openvmm does not implement it. The answer has SET_CMPLT's layout.
		var m rndis.Set
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		out := rndis.SetComplete{RequestID: m.RequestID, Status: rndis.StatusNotSupported}.Marshal(nil)
		binary.LittleEndian.PutUint32(out, uint32(rndis.TypeSetExComplete))
		ss.reply(out)
	case rndis.TypeKeepaliveComplete:
		// The guest answering the keepalive fault's request.
	default:
		ss.violation("RNDIS " + t.String() + " from the guest")
		return nvsp.StatusFail
	}
	return nvsp.StatusSuccess
}

func (ss *nicSession) checkRequestID(id uint32) {
	if id == 0 {
		ss.violation("RNDIS request id 0")
	}
}

// reply queues an RNDIS completion, ControlDelay from now, applying the
// faults that corrupt completions.
func (ss *nicSession) reply(b []byte) {
	f := &ss.n.faults
	if len(b) >= 16 {
		switch {
		case f.take(NICFaultRNDISRequestID):
			binary.LittleEndian.PutUint32(b[8:], binary.LittleEndian.Uint32(b[8:])+1)
		case f.take(NICFaultRNDISStatus):
			binary.LittleEndian.PutUint32(b[12:], uint32(rndis.StatusFailure))
		}
	}
	ss.queueControl(b, ss.n.controlDelay())
	if f.take(NICFaultKeepalive) {
		ss.queueControl(rndis.Keepalive{RequestID: 0x4b41}.Marshal(nil), 0)
	}
}

// supportedOIDs is the OID_GEN_SUPPORTED_LIST answer.
var supportedOIDs = []rndis.OID{
	rndis.OIDGenSupportedList, rndis.OIDGenHardwareStatus, rndis.OIDGenMediaSupported,
	rndis.OIDGenMediaInUse, rndis.OIDGenMaximumLookahead, rndis.OIDGenMaximumFrameSize,
	rndis.OIDGenLinkSpeed, rndis.OIDGenVendorID, rndis.OIDGenCurrentPacketFilter,
	rndis.OIDGenMaximumTotalSize, rndis.OIDGenMediaConnectStatus, rndis.OIDGenFriendlyName,
	rndis.OID8023PermanentAddress, rndis.OID8023CurrentAddress, rndis.OID8023MaximumListSize,
	rndis.OIDTCPOffloadHardwareCapabilities, rndis.OIDTCPOffloadCurrentConfig, rndis.OIDTCPOffloadParameters,
	rndis.OIDGenReceiveScaleCapabilities, rndis.OIDGenReceiveScaleParameters,
}

// query answers an OID query.
func (ss *nicSession) query(oid rndis.OID, in []byte) (rndis.Status, []byte) {
	cfg := ss.cfg.Load()
	n := ss.n
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	switch oid {
	case rndis.OIDGenSupportedList:
		var b []byte
		for _, o := range supportedOIDs {
			b = binary.LittleEndian.AppendUint32(b, uint32(o))
		}
		return rndis.StatusSuccess, b
	case rndis.OIDGenHardwareStatus, rndis.OIDGenMediaSupported, rndis.OIDGenMediaInUse:
		return rndis.StatusSuccess, u32(0) // ready; 802.3
	case rndis.OIDGenMaximumLookahead, rndis.OIDGenMaximumFrameSize:
		return rndis.StatusSuccess, u32(uint32(cfg.mtu - vswitch.EthHeaderLen))
	case rndis.OIDGenMaximumTotalSize:
		return rndis.StatusSuccess, u32(uint32(cfg.mtu))
	case rndis.OIDGenLinkSpeed:
		return rndis.StatusSuccess, u32(uint32(rndis.LinkSpeedFromBps(n.cfg.LinkSpeed)))
	case rndis.OIDGenVendorID:
		return rndis.StatusSuccess, u32(rndis.HyperVVendorID)
	case rndis.OIDGenCurrentPacketFilter:
		return rndis.StatusSuccess, u32(cfg.filter)
	case rndis.OIDGenMediaConnectStatus:
		st := rndis.NDISMediaStateDisconnected
		if n.LinkUp() {
			st = rndis.NDISMediaStateConnected
		}
		return rndis.StatusSuccess, u32(st)
	case rndis.OIDGenFriendlyName:
		var b []byte
		for _, r := range utf16.Encode([]rune("Network Adapter")) {
			b = binary.LittleEndian.AppendUint16(b, r)
		}
		return rndis.StatusSuccess, append(b, 0, 0)
	case rndis.OID8023PermanentAddress, rndis.OID8023CurrentAddress:
		return rndis.StatusSuccess, slices.Clone(n.mac[:])
	case rndis.OID8023MaximumListSize:
		return rndis.StatusSuccess, u32(0) // no multicast filtering on the host
	case rndis.OIDTCPOffloadHardwareCapabilities, rndis.OIDTCPOffloadCurrentConfig:
		h, err := rndis.ParseNDISObjectHeader(in)
		if err != nil || h.Type != rndis.NDISObjectTypeOffload || h.Revision == 0 || int(h.Size) < rndis.NDISOffloadSizeRev1 {
			ss.violation("offload query without an NDIS_OFFLOAD header")
			return rndis.StatusInvalidData, nil
		}
		return rndis.StatusSuccess, ss.offload(oid == rndis.OIDTCPOffloadCurrentConfig, h).Marshal(nil)
	case rndis.OIDGenReceiveScaleCapabilities:
		if cfg.version < nvsp.Version5 {
			return rndis.StatusNotSupported, nil
		}
		h, err := rndis.ParseNDISObjectHeader(in)
		if err != nil || h.Type != rndis.NDISObjectTypeRSSCapabilities {
			ss.violation("RSS capabilities query without its NDIS header")
			return rndis.StatusInvalidData, nil
		}
		// openvmm: Toeplitz over TCP/IPv4 and TCP/IPv6, 1 interrupt
		// message, and 128 entries even with one queue ("DPDK gets
		// confused if the table size is zero").
		caps := rndis.RSSCapabilities{
			Flags:                rndis.NDISRSSCapsHashToeplitz | rndis.NDISRSSCapsHashTypeTCPIPv4 | rndis.NDISRSSCapsHashTypeTCPIPv6,
			NumInterruptMessages: 1, NumReceiveQueues: uint32(n.cfg.MaxQueues),
			NumIndirectionEntries: rndis.RSSIndirectionTableEntries,
		}
		return rndis.StatusSuccess, caps.Marshal(nil)
	}
	return rndis.StatusNotSupported, nil
}

// offload returns the host's NDIS_OFFLOAD (capabilities, or the current
// configuration) at the revision the guest's header asked for.
func (ss *nicSession) offload(current bool, asked rndis.NDISObjectHeader) rndis.Offload {
	cfg := ss.cfg.Load()
	h := rndis.NDISObjectHeader{Type: rndis.NDISObjectTypeOffload, Revision: rndis.NDISOffloadRevision3, Size: rndis.NDISOffloadSizeRev3}
	switch {
	case asked.Size < rndis.NDISOffloadSizeRev2 || asked.Revision < 2:
		h.Revision, h.Size = rndis.NDISOffloadRevision1, rndis.NDISOffloadSizeRev1
	case asked.Size < rndis.NDISOffloadSizeRev3 || asked.Revision < 3:
		h.Revision, h.Size = rndis.NDISOffloadRevision2, rndis.NDISOffloadSizeRev2
	}
	v4 := rndis.NDISChecksumCapIP4 | rndis.NDISChecksumCapIPOptions | rndis.NDISChecksumCapTCP |
		rndis.NDISChecksumCapTCPOptions | rndis.NDISChecksumCapUDP
	v6 := rndis.NDISChecksumCapIPOptions | rndis.NDISChecksumCapTCP | rndis.NDISChecksumCapTCPOptions | rndis.NDISChecksumCapUDP
	enc := rndis.NDISOffloadEncap8023
	o := rndis.Offload{Header: h,
		Checksum: rndis.ChecksumOffload{
			IPv4TxEncapsulation: enc, IPv4TxFlags: v4, IPv4RxEncapsulation: enc, IPv4RxFlags: v4,
			IPv6TxEncapsulation: enc, IPv6TxFlags: v6, IPv6RxEncapsulation: enc, IPv6RxFlags: v6,
		},
		LSOv2: rndis.LSOv2Offload{
			IPv4Encapsulation: enc, IPv4MaxSize: rndis.HostLSOv2MaxSize, IPv4MinSegments: rndis.HostLSOv2MinSegments,
			IPv6Encapsulation: enc, IPv6MaxSize: rndis.HostLSOv2MaxSize, IPv6MinSegments: rndis.HostLSOv2MinSegments,
			IPv6Options: rndis.NDISLSOv2CapIP6Ext | rndis.NDISLSOv2CapTCP6Opt,
		},
	}
	if h.Revision >= rndis.NDISOffloadRevision3 {
		// RSC over VMBus, for TCP over IPv4 and IPv6 (the field exists
		// from revision 3, NDIS 6.30).
		o.RSCIPv4, o.RSCIPv6 = 1, 1
	}
	if current {
		if !cfg.rscOn(false) {
			o.RSCIPv4 = 0
		}
		if !cfg.rscOn(true) {
			o.RSCIPv6 = 0
		}
		if !cfg.lso4 {
			o.LSOv2.IPv4Encapsulation, o.LSOv2.IPv4MaxSize, o.LSOv2.IPv4MinSegments = 0, 0, 0
		}
		if !cfg.lso6 {
			o.LSOv2.IPv6Encapsulation, o.LSOv2.IPv6MaxSize, o.LSOv2.IPv6MinSegments, o.LSOv2.IPv6Options = 0, 0, 0, 0
		}
	}
	return o
}

// set applies an OID set.
func (ss *nicSession) set(ch *nicChan, oid rndis.OID, in []byte) rndis.Status {
	cfg := ss.cfg.Load()
	switch oid {
	case rndis.OIDGenCurrentPacketFilter:
		v, err := rndis.ParseInfoUint32(in)
		if err != nil {
			ss.violation("packet filter set without a u32")
			return rndis.StatusInvalidData
		}
		ss.publish(func(c *sessCfg) { c.filter = v })
		ss.log.Info("packet filter", "filter", v)
		return rndis.StatusSuccess
	case rndis.OIDGenReceiveScaleParameters:
		if cfg.version < nvsp.Version5 {
			return rndis.StatusNotSupported
		}
		return ss.setRSS(in)
	case rndis.OIDTCPOffloadParameters:
		var p rndis.OffloadParameters
		if err := p.Unmarshal(in); err != nil {
			ss.violation("bad NDIS_OFFLOAD_PARAMETERS: " + kindOf(err))
			return rndis.StatusInvalidData
		}
		if p.LSOv1 == rndis.NDISOffloadParametersEnabled {
			return rndis.StatusNotSupported // openvmm rejects LSOv1
		}
		lso := func(v uint8, was bool) bool {
			switch v {
			case rndis.NDISOffloadParametersEnabled:
				return true
			case rndis.NDISOffloadParametersDisabled:
				return false
			}
			return was
		}
		ss.publish(func(c *sessCfg) {
			c.lso4, c.lso6 = lso(p.LSOv2IPv4, c.lso4), lso(p.LSOv2IPv6, c.lso6)
			// A revision 1 or 2 object has no RSC fields: they read 0, no change.
			c.rsc4, c.rsc6 = lso(p.RSCIPv4, c.rsc4), lso(p.RSCIPv6, c.rsc6)
		})
		// openvmm reports the new configuration with an indication.
		cur := ss.offload(true, rndis.OffloadQueryHeader(cfg.version))
		ss.indicate(rndis.IndicateStatus{Status: rndis.StatusTaskOffloadCurrentConfig, Buf: cur.Marshal(nil)})
		return rndis.StatusSuccess
	case rndis.OIDGenRNDISConfigParameter, rndis.OIDGenCurrentLookahead:
		return rndis.StatusSuccess
	}
	return rndis.StatusNotSupported
}

// setRSS applies OID_GEN_RECEIVE_SCALE_PARAMETERS (docs/protocol/netvsc.md §3.6): a
// disable always works; an enable needs a 40-byte key, a non-empty table
// of granted channels, and IP hash types (an Azure host refused UDP-only
// with 0xC000000D). Changing enabled parameters without disabling first is
// the guest's violation ("the host requires that RSS is disabled first").
func (ss *nicSession) setRSS(in []byte) rndis.Status {
	cfg := ss.cfg.Load()
	var p rndis.RSSParameters
	if err := p.Unmarshal(in); err != nil {
		ss.violation("bad RSS parameters: " + kindOf(err))
		return rndis.StatusInvalidData
	}
	if p.Disabled() {
		ss.publish(func(c *sessCfg) { c.rss = nil })
		ss.log.Info("RSS disabled")
		return rndis.StatusSuccess
	}
	prev := cfg.rss
	if prev != nil {
		ss.violation("RSS parameters changed without disabling RSS first")
	}
	r := &rssState{types: p.HashInfo.Types()}
	if p.Flags&rndis.NDISRSSParamFlagHashInfoUnchanged != 0 && prev != nil {
		r.types = prev.types
	}
	if p.Flags&rndis.NDISRSSParamFlagHashKeyUnchanged != 0 && prev != nil {
		r.key = prev.key
	} else {
		if p.KeyLen != rndis.RSSHashKeySize {
			return rndis.StatusInvalidParameter
		}
		r.key = p.Key
	}
	if p.Flags&rndis.NDISRSSParamFlagITableUnchanged != 0 && prev != nil {
		r.table = prev.table
	} else {
		if err := p.Validate(1 + cfg.granted); err != nil {
			return rndis.StatusInvalidParameter
		}
		// A shorter table is repeated to fill the host's 128 entries.
		r.table = make([]uint32, rndis.RSSIndirectionTableEntries)
		for i := range r.table {
			r.table[i] = p.Table[i%p.TableLen]
		}
	}
	ip := rndis.NDISHashIPv4 | rndis.NDISHashTCPIPv4 | rndis.NDISHashIPv6 | rndis.NDISHashIPv6Ex |
		rndis.NDISHashTCPIPv6 | rndis.NDISHashTCPIPv6Ex
	if p.HashInfo.Function() != rndis.NDISHashFunctionToeplitz || r.types&ip == 0 {
		return rndis.StatusInvalidParameter
	}
	ss.publish(func(c *sessCfg) { c.rss = r })
	ss.log.Info("RSS enabled", "hash", uint32(p.HashInfo), "queues", 1+cfg.granted)
	return rndis.StatusSuccess
}
