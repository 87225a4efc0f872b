package sim

// RNDIS control messages from the guest (netvsc.md §3), answered the way
// openvmm's handle_rndis_control_message / handle_oid_query /
// handle_oid_set do, with the values §7 host 9 asks for. Answers go back
// as transfer-page packets from the control pool, ControlDelay after the
// request (the request itself is completed at once, as openvmm does).

import (
	"encoding/binary"
	"slices"
	"time"
	"unicode/utf16"

	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
)

// handleRNDISControl serves one RNDIS control message on the primary and
// returns the NVSP status that completes its send.
func (ss *nicSession) handleRNDISControl(ch *nicChan, b []byte) nvsp.Status {
	t, ml, err := netvsc.ParseRNDISHeader(b)
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
	case netvsc.RNDISMsgInitialize:
		var m netvsc.RNDISInitialize
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		ss.checkRequestID(m.RequestID)
		st := netvsc.RNDISStatusSuccess
		if nv.rndisInit {
			ss.violation("second RNDIS INITIALIZE")
		}
		if m.MajorVersion != netvsc.RNDISMajorVersion {
			st = netvsc.RNDISStatusBadVersion
		}
		ans := netvsc.RNDISInitializeCmplt{
			RequestID: m.RequestID, Status: st,
			MajorVersion: netvsc.RNDISMajorVersion, MinorVersion: netvsc.RNDISMinorVersion,
			DeviceFlags: netvsc.RNDISDFConnectionless, Medium: netvsc.RNDISMedium8023,
			MaxPacketsPerMessage: maxPacketsPerMessage, MaxTransferSize: maxTransferSize,
			PacketAlignmentFactor: alignFactor,
		}
		ss.reply(ans.Marshal(nil))
		if st == netvsc.RNDISStatusSuccess && !nv.rndisInit {
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
	case netvsc.RNDISMsgQuery:
		var m netvsc.RNDISQuery
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		ss.checkRequestID(m.RequestID)
		if !nv.rndisInit {
			ss.violation("RNDIS QUERY before INITIALIZE")
		}
		st, info := ss.query(m.OID, m.Info)
		ans := netvsc.RNDISQueryCmplt{RequestID: m.RequestID, Status: st, Info: info}
		out := ans.Marshal(nil)
		if ss.n.faults.take(NICFaultRNDISQueryInfo) {
			binary.LittleEndian.PutUint32(out[20:], uint32(len(out))) // info offset past the message
		}
		ss.reply(out)
	case netvsc.RNDISMsgSet:
		var m netvsc.RNDISSet
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		ss.checkRequestID(m.RequestID)
		if !nv.rndisInit {
			ss.violation("RNDIS SET before INITIALIZE")
		}
		st := ss.set(ch, m.OID, m.Info)
		ss.reply(netvsc.RNDISSetCmplt{RequestID: m.RequestID, Status: st}.Marshal(nil))
	case netvsc.RNDISMsgHalt:
		var m netvsc.RNDISHalt
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		// No completion; the host stops the data path (openvmm ignores it).
		nv.halted = true
		ss.publish(func(c *sessCfg) { c.rndisReady, c.stopped = false, true })
		ss.log.Info("RNDIS halted")
	case netvsc.RNDISMsgReset:
		// openvmm does not implement it.
		ss.reply(netvsc.RNDISResetCmplt{Status: netvsc.RNDISStatusNotSupported}.Marshal(nil))
	case netvsc.RNDISMsgKeepalive:
		var m netvsc.RNDISKeepalive
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		ss.reply(netvsc.RNDISKeepaliveCmplt{RequestID: m.RequestID, Status: netvsc.RNDISStatusSuccess}.Marshal(nil))
	case netvsc.RNDISMsgSetEx:
		// openvmm does not implement it. The answer has SET_CMPLT's layout.
		var m netvsc.RNDISSet
		if err := m.Unmarshal(b); err != nil {
			return bad(err)
		}
		out := netvsc.RNDISSetCmplt{RequestID: m.RequestID, Status: netvsc.RNDISStatusNotSupported}.Marshal(nil)
		binary.LittleEndian.PutUint32(out, uint32(netvsc.RNDISMsgSetExCmplt))
		ss.reply(out)
	case netvsc.RNDISMsgKeepaliveCmplt:
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
			binary.LittleEndian.PutUint32(b[12:], uint32(netvsc.RNDISStatusFailure))
		}
	}
	ss.queueControl(b, ss.n.controlDelay())
	if f.take(NICFaultKeepalive) {
		ss.queueControl(netvsc.RNDISKeepalive{RequestID: 0x4b41}.Marshal(nil), 0)
	}
}

// supportedOIDs is the OID_GEN_SUPPORTED_LIST answer.
var supportedOIDs = []netvsc.OID{
	netvsc.OIDGenSupportedList, netvsc.OIDGenHardwareStatus, netvsc.OIDGenMediaSupported,
	netvsc.OIDGenMediaInUse, netvsc.OIDGenMaximumLookahead, netvsc.OIDGenMaximumFrameSize,
	netvsc.OIDGenLinkSpeed, netvsc.OIDGenVendorID, netvsc.OIDGenCurrentPacketFilter,
	netvsc.OIDGenMaximumTotalSize, netvsc.OIDGenMediaConnectStatus, netvsc.OIDGenFriendlyName,
	netvsc.OID8023PermanentAddress, netvsc.OID8023CurrentAddress, netvsc.OID8023MaximumListSize,
	netvsc.OIDTCPOffloadHardwareCapabilities, netvsc.OIDTCPOffloadCurrentConfig, netvsc.OIDTCPOffloadParameters,
	netvsc.OIDGenReceiveScaleCapabilities, netvsc.OIDGenReceiveScaleParameters,
}

// query answers an OID query.
func (ss *nicSession) query(oid netvsc.OID, in []byte) (netvsc.RNDISStatus, []byte) {
	cfg := ss.cfg.Load()
	n := ss.n
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	switch oid {
	case netvsc.OIDGenSupportedList:
		var b []byte
		for _, o := range supportedOIDs {
			b = binary.LittleEndian.AppendUint32(b, uint32(o))
		}
		return netvsc.RNDISStatusSuccess, b
	case netvsc.OIDGenHardwareStatus, netvsc.OIDGenMediaSupported, netvsc.OIDGenMediaInUse:
		return netvsc.RNDISStatusSuccess, u32(0) // ready; 802.3
	case netvsc.OIDGenMaximumLookahead, netvsc.OIDGenMaximumFrameSize:
		return netvsc.RNDISStatusSuccess, u32(uint32(cfg.mtu - ethHeaderLen))
	case netvsc.OIDGenMaximumTotalSize:
		return netvsc.RNDISStatusSuccess, u32(uint32(cfg.mtu))
	case netvsc.OIDGenLinkSpeed:
		return netvsc.RNDISStatusSuccess, u32(uint32(netvsc.LinkSpeedFromBps(n.cfg.LinkSpeed)))
	case netvsc.OIDGenVendorID:
		return netvsc.RNDISStatusSuccess, u32(netvsc.HyperVVendorID)
	case netvsc.OIDGenCurrentPacketFilter:
		return netvsc.RNDISStatusSuccess, u32(cfg.filter)
	case netvsc.OIDGenMediaConnectStatus:
		st := netvsc.NDISMediaStateDisconnected
		if n.LinkUp() {
			st = netvsc.NDISMediaStateConnected
		}
		return netvsc.RNDISStatusSuccess, u32(st)
	case netvsc.OIDGenFriendlyName:
		var b []byte
		for _, r := range utf16.Encode([]rune("Network Adapter")) {
			b = binary.LittleEndian.AppendUint16(b, r)
		}
		return netvsc.RNDISStatusSuccess, append(b, 0, 0)
	case netvsc.OID8023PermanentAddress, netvsc.OID8023CurrentAddress:
		return netvsc.RNDISStatusSuccess, slices.Clone(n.mac[:])
	case netvsc.OID8023MaximumListSize:
		return netvsc.RNDISStatusSuccess, u32(0) // no multicast filtering on the host
	case netvsc.OIDTCPOffloadHardwareCapabilities, netvsc.OIDTCPOffloadCurrentConfig:
		h, err := netvsc.ParseNDISObjectHeader(in)
		if err != nil || h.Type != netvsc.NDISObjectTypeOffload || h.Revision == 0 || int(h.Size) < netvsc.NDISOffloadSizeRev1 {
			ss.violation("offload query without an NDIS_OFFLOAD header")
			return netvsc.RNDISStatusInvalidData, nil
		}
		return netvsc.RNDISStatusSuccess, ss.offload(oid == netvsc.OIDTCPOffloadCurrentConfig, h).Marshal(nil)
	case netvsc.OIDGenReceiveScaleCapabilities:
		if cfg.version < nvsp.Version5 {
			return netvsc.RNDISStatusNotSupported, nil
		}
		h, err := netvsc.ParseNDISObjectHeader(in)
		if err != nil || h.Type != netvsc.NDISObjectTypeRSSCapabilities {
			ss.violation("RSS capabilities query without its NDIS header")
			return netvsc.RNDISStatusInvalidData, nil
		}
		// openvmm: Toeplitz over TCP/IPv4 and TCP/IPv6, 1 interrupt
		// message, and 128 entries even with one queue ("DPDK gets
		// confused if the table size is zero").
		caps := netvsc.RSSCapabilities{
			Flags:                netvsc.NDISRSSCapsHashToeplitz | netvsc.NDISRSSCapsHashTypeTCPIPv4 | netvsc.NDISRSSCapsHashTypeTCPIPv6,
			NumInterruptMessages: 1, NumReceiveQueues: uint32(n.cfg.MaxQueues),
			NumIndirectionEntries: netvsc.RSSIndirectionTableEntries,
		}
		return netvsc.RNDISStatusSuccess, caps.Marshal(nil)
	}
	return netvsc.RNDISStatusNotSupported, nil
}

// offload returns the host's NDIS_OFFLOAD (capabilities, or the current
// configuration) at the revision the guest's header asked for.
func (ss *nicSession) offload(current bool, asked netvsc.NDISObjectHeader) netvsc.Offload {
	cfg := ss.cfg.Load()
	h := netvsc.NDISObjectHeader{Type: netvsc.NDISObjectTypeOffload, Revision: netvsc.NDISOffloadRevision3, Size: netvsc.NDISOffloadSizeRev3}
	switch {
	case asked.Size < netvsc.NDISOffloadSizeRev2 || asked.Revision < 2:
		h.Revision, h.Size = netvsc.NDISOffloadRevision1, netvsc.NDISOffloadSizeRev1
	case asked.Size < netvsc.NDISOffloadSizeRev3 || asked.Revision < 3:
		h.Revision, h.Size = netvsc.NDISOffloadRevision2, netvsc.NDISOffloadSizeRev2
	}
	v4 := netvsc.NDISChecksumCapIP4 | netvsc.NDISChecksumCapIPOptions | netvsc.NDISChecksumCapTCP |
		netvsc.NDISChecksumCapTCPOptions | netvsc.NDISChecksumCapUDP
	v6 := netvsc.NDISChecksumCapIPOptions | netvsc.NDISChecksumCapTCP | netvsc.NDISChecksumCapTCPOptions | netvsc.NDISChecksumCapUDP
	enc := netvsc.NDISOffloadEncap8023
	o := netvsc.Offload{Header: h,
		Checksum: netvsc.ChecksumOffload{
			IPv4TxEncapsulation: enc, IPv4TxFlags: v4, IPv4RxEncapsulation: enc, IPv4RxFlags: v4,
			IPv6TxEncapsulation: enc, IPv6TxFlags: v6, IPv6RxEncapsulation: enc, IPv6RxFlags: v6,
		},
		LSOv2: netvsc.LSOv2Offload{
			IPv4Encapsulation: enc, IPv4MaxSize: netvsc.HostLSOv2MaxSize, IPv4MinSegments: netvsc.HostLSOv2MinSegments,
			IPv6Encapsulation: enc, IPv6MaxSize: netvsc.HostLSOv2MaxSize, IPv6MinSegments: netvsc.HostLSOv2MinSegments,
			IPv6Options: netvsc.NDISLSOv2CapIP6Ext | netvsc.NDISLSOv2CapTCP6Opt,
		},
	}
	if current {
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
func (ss *nicSession) set(ch *nicChan, oid netvsc.OID, in []byte) netvsc.RNDISStatus {
	cfg := ss.cfg.Load()
	switch oid {
	case netvsc.OIDGenCurrentPacketFilter:
		v, err := netvsc.ParseInfoUint32(in)
		if err != nil {
			ss.violation("packet filter set without a u32")
			return netvsc.RNDISStatusInvalidData
		}
		ss.publish(func(c *sessCfg) { c.filter = v })
		ss.log.Info("packet filter", "filter", v)
		return netvsc.RNDISStatusSuccess
	case netvsc.OIDGenReceiveScaleParameters:
		if cfg.version < nvsp.Version5 {
			return netvsc.RNDISStatusNotSupported
		}
		return ss.setRSS(in)
	case netvsc.OIDTCPOffloadParameters:
		var p netvsc.OffloadParameters
		if err := p.Unmarshal(in); err != nil {
			ss.violation("bad NDIS_OFFLOAD_PARAMETERS: " + kindOf(err))
			return netvsc.RNDISStatusInvalidData
		}
		if p.LSOv1 == netvsc.NDISOffloadParametersEnabled {
			return netvsc.RNDISStatusNotSupported // openvmm rejects LSOv1
		}
		lso := func(v uint8, was bool) bool {
			switch v {
			case netvsc.NDISOffloadParametersEnabled:
				return true
			case netvsc.NDISOffloadParametersDisabled:
				return false
			}
			return was
		}
		ss.publish(func(c *sessCfg) { c.lso4, c.lso6 = lso(p.LSOv2IPv4, c.lso4), lso(p.LSOv2IPv6, c.lso6) })
		// openvmm reports the new configuration with an indication.
		cur := ss.offload(true, netvsc.OffloadQueryHeader(cfg.version))
		ss.indicate(netvsc.RNDISIndicateStatus{Status: netvsc.RNDISStatusTaskOffloadCurrentConfig, Buf: cur.Marshal(nil)})
		return netvsc.RNDISStatusSuccess
	case netvsc.OIDGenRNDISConfigParameter, netvsc.OIDGenCurrentLookahead:
		return netvsc.RNDISStatusSuccess
	}
	return netvsc.RNDISStatusNotSupported
}

// setRSS applies OID_GEN_RECEIVE_SCALE_PARAMETERS (netvsc.md §3.6): a
// disable always works; an enable needs a 40-byte key, a non-empty table
// of granted channels, and IP hash types (an Azure host refused UDP-only
// with 0xC000000D). Changing enabled parameters without disabling first is
// the guest's violation ("the host requires that RSS is disabled first").
func (ss *nicSession) setRSS(in []byte) netvsc.RNDISStatus {
	cfg := ss.cfg.Load()
	var p netvsc.RSSParameters
	if err := p.Unmarshal(in); err != nil {
		ss.violation("bad RSS parameters: " + kindOf(err))
		return netvsc.RNDISStatusInvalidData
	}
	if p.Disabled() {
		ss.publish(func(c *sessCfg) { c.rss = nil })
		ss.log.Info("RSS disabled")
		return netvsc.RNDISStatusSuccess
	}
	prev := cfg.rss
	if prev != nil {
		ss.violation("RSS parameters changed without disabling RSS first")
	}
	r := &rssState{types: p.HashInfo.Types()}
	if p.Flags&netvsc.NDISRSSParamFlagHashInfoUnchanged != 0 && prev != nil {
		r.types = prev.types
	}
	if p.Flags&netvsc.NDISRSSParamFlagHashKeyUnchanged != 0 && prev != nil {
		r.key = prev.key
	} else {
		if p.KeyLen != netvsc.RSSHashKeySize {
			return netvsc.RNDISStatusInvalidParameter
		}
		r.key = p.Key
	}
	if p.Flags&netvsc.NDISRSSParamFlagITableUnchanged != 0 && prev != nil {
		r.table = prev.table
	} else {
		if err := p.Validate(1 + cfg.granted); err != nil {
			return netvsc.RNDISStatusInvalidParameter
		}
		// A shorter table is repeated to fill the host's 128 entries.
		r.table = make([]uint32, netvsc.RSSIndirectionTableEntries)
		for i := range r.table {
			r.table[i] = p.Table[i%p.TableLen]
		}
	}
	ip := netvsc.NDISHashIPv4 | netvsc.NDISHashTCPIPv4 | netvsc.NDISHashIPv6 | netvsc.NDISHashIPv6Ex |
		netvsc.NDISHashTCPIPv6 | netvsc.NDISHashTCPIPv6Ex
	if p.HashInfo.Function() != netvsc.NDISHashFunctionToeplitz || r.types&ip == 0 {
		return netvsc.RNDISStatusInvalidParameter
	}
	ss.publish(func(c *sessCfg) { c.rss = r })
	ss.log.Info("RSS enabled", "hash", uint32(p.HashInfo), "queues", 1+cfg.granted)
	return netvsc.RNDISStatusSuccess
}
