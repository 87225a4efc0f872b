package netvsp

// NIC-level faults: host misbehaviour in the NVSP, RNDIS and NDIS data a
// NetVSP hands its guest, one switch per check a careful guest makes on
// that data (docs/protocol/netvsc.md §2.5 guest checks, §7 guest 3–7 and host 10; the
// ring-level faults are bus.Fault, sim/bus/fault.go). Switch them per NIC with
// NIC.SetFault; NIC.FaultHits counts how often each took effect.
//
// One-shot faults apply to the next message of their kind and then switch
// themselves off; lasting ones stay on until switched off.
//
//	fault                    what the host does                                 the guest check it trips
//	bad-xfer-pageset         next transfer-page packet: xfer_pageset_id != the   xfer_pageset_id == receive-buffer id
//	                         guest's receive-buffer id
//	range-outside-buffer     next transfer-page packet: a range ending past the   offset <= len && count <= len-offset
//	                         receive buffer
//	section-index            next transfer-page packet: tid = the section count   tid < announced sub-allocation count
//	duplicate-tid            next transfer-page packet reuses an outstanding tid  no tid twice in flight on a channel
//	nvsp-type                next transfer-page packet carries an NVSP message    NVSP type == SEND_RNDIS_PKT
//	                         that is not SEND_RNDIS_PKT
//	rndis-length             next received RNDIS message: MessageLength beyond    MessageLength <= range
//	                         its range
//	rndis-offset             next received PACKET: DataOffset past the message    DataOffset+DataLength <= MessageLength
//	rndis-data-length        next received PACKET: DataLength 0                   DataLength > 0
//	bad-ppi                  next received PACKET: a per-packet info whose size   PPI size >= 12, %4 == 0, inside the area
//	                         is not a multiple of 4
//	rndis-type               next transfer-page packet holds an RNDIS message of  known RNDIS type
//	                         an unknown type (0x7777)
//	unknown-completion       a completion for a transaction the guest never sent  completion id matches a request
//	tx-fail                  next guest send completes with status FAIL           send completion status
//	nvsp-status              next NVSP request completes with status FAIL         NVSP status == SUCCESS
//	recv-sections            RECV_BUF completion announces 2 sections             num_sections == 1
//	recv-offset              RECV_BUF completion: section offset 64               offset == 0
//	recv-fit                 RECV_BUF completion: sub-allocations past the buffer size × count <= buffer
//	send-section             SEND_BUF completion: section size 6142               section size %4 == 0, >= 68
//	subchannel-fail          next SUBCHANNEL request fails (status FAIL, 0)       status == SUCCESS
//	subchannel-overgrant     next SUBCHANNEL completion grants one more than      granted <= requested
//	                         requested (and offers only what was asked)
//	bad-indirection-table    the send indirection table has count 15              count == 16, table inside the message
//	table-during-sync        a send indirection table right before each NVSP      tolerate TXTBL while waiting (DPDK 0a4533facb)
//	                         completion (lasting)
//	rx-during-setup          data frames on the primary while sub-channels are    drop data during multi-channel setup
//	                         set up (lasting)                                       (DPDK 107f3cf310)
//	rndis-request-id         next RNDIS completion carries another request id     request id matches the outstanding one
//	rndis-status             next RNDIS completion has status FAILURE             RNDIS status == SUCCESS
//	rndis-query-info         next QUERY_CMPLT: info buffer outside the message    info offset/length inside MessageLength
//	bad-indication           next INDICATE_STATUS: status buffer outside the      status buffer inside MessageLength
//	                         message (sent at once)
//	keepalive                the host sends an RNDIS KEEPALIVE (neither guest     tolerate unexpected RNDIS requests
//	                         handles one)
//	vf-flap                  VF_ASSOCIATION{1} then {0} 10 ms apart (lasting,     VF association bookkeeping
//	                         every second)
//	link-flap                the link goes down and up again, again and again,   link state handling, LINKCHANGE_INT
//	                         at the NIC's link spacing (lasting)

import (
	"fmt"
	"math/bits"
	"strings"
	"sync/atomic"
)

// NICFault is a NIC-level host misbehaviour (see the table above).
type NICFault uint64

// NIC faults.
const (
	NICFaultXferPageSet NICFault = 1 << iota
	NICFaultRangeOutsideBuffer
	NICFaultSectionIndex
	NICFaultDuplicateTID
	NICFaultNVSPType
	NICFaultRNDISLength
	NICFaultRNDISOffset
	NICFaultRNDISDataLength
	NICFaultBadPPI
	NICFaultRNDISType
	NICFaultUnknownCompletion
	NICFaultTxFail
	NICFaultNVSPStatus
	NICFaultRecvSections
	NICFaultRecvOffset
	NICFaultRecvFit
	NICFaultSendSection
	NICFaultSubchannelFail
	NICFaultSubchannelOvergrant
	NICFaultBadIndirectionTable
	NICFaultTableDuringSync // lasting
	NICFaultRxDuringSetup   // lasting
	NICFaultRNDISRequestID
	NICFaultRNDISStatus
	NICFaultRNDISQueryInfo
	NICFaultBadIndication
	NICFaultKeepalive
	NICFaultVFFlap   // lasting
	NICFaultLinkFlap // lasting

	nicFaultEnd
)

// nicFaultLasting are the faults that stay on until switched off.
const nicFaultLasting = NICFaultTableDuringSync | NICFaultRxDuringSetup | NICFaultVFFlap | NICFaultLinkFlap

var nicFaultNames = map[NICFault]string{
	NICFaultXferPageSet:         "bad-xfer-pageset",
	NICFaultRangeOutsideBuffer:  "range-outside-buffer",
	NICFaultSectionIndex:        "section-index",
	NICFaultDuplicateTID:        "duplicate-tid",
	NICFaultNVSPType:            "nvsp-type",
	NICFaultRNDISLength:         "rndis-length",
	NICFaultRNDISOffset:         "rndis-offset",
	NICFaultRNDISDataLength:     "rndis-data-length",
	NICFaultBadPPI:              "bad-ppi",
	NICFaultRNDISType:           "rndis-type",
	NICFaultUnknownCompletion:   "unknown-completion",
	NICFaultTxFail:              "tx-fail",
	NICFaultNVSPStatus:          "nvsp-status",
	NICFaultRecvSections:        "recv-sections",
	NICFaultRecvOffset:          "recv-offset",
	NICFaultRecvFit:             "recv-fit",
	NICFaultSendSection:         "send-section",
	NICFaultSubchannelFail:      "subchannel-fail",
	NICFaultSubchannelOvergrant: "subchannel-overgrant",
	NICFaultBadIndirectionTable: "bad-indirection-table",
	NICFaultTableDuringSync:     "table-during-sync",
	NICFaultRxDuringSetup:       "rx-during-setup",
	NICFaultRNDISRequestID:      "rndis-request-id",
	NICFaultRNDISStatus:         "rndis-status",
	NICFaultRNDISQueryInfo:      "rndis-query-info",
	NICFaultBadIndication:       "bad-indication",
	NICFaultKeepalive:           "keepalive",
	NICFaultVFFlap:              "vf-flap",
	NICFaultLinkFlap:            "link-flap",
}

func (f NICFault) String() string {
	if n, ok := nicFaultNames[f]; ok {
		return n
	}
	return fmt.Sprintf("nicfault(%#x)", uint64(f))
}

// Lasting reports whether the fault stays on until switched off.
func (f NICFault) Lasting() bool { return f&nicFaultLasting != 0 }

// AllNICFaults lists every NIC fault.
func AllNICFaults() []NICFault {
	var fs []NICFault
	for f := NICFault(1); f < nicFaultEnd; f <<= 1 {
		fs = append(fs, f)
	}
	return fs
}

// ParseNICFault takes a fault's name as String prints it.
func ParseNICFault(s string) (NICFault, error) {
	for f, n := range nicFaultNames {
		if n == s {
			return f, nil
		}
	}
	var names []string
	for _, f := range AllNICFaults() {
		names = append(names, f.String())
	}
	return 0, fmt.Errorf("sim: unknown NIC fault %q (valid: %s)", s, strings.Join(names, ", "))
}

// nicFaults holds a NIC's fault switches. Safe for concurrent use.
type nicFaults struct {
	on   atomic.Uint64
	hits [64]atomic.Uint64
}

func (f *nicFaults) has(x NICFault) bool { return NICFault(f.on.Load())&x != 0 }

func (f *nicFaults) set(x NICFault, on bool) {
	for {
		v := f.on.Load()
		nv := v &^ uint64(x)
		if on {
			nv |= uint64(x)
		}
		if f.on.CompareAndSwap(v, nv) {
			return
		}
	}
}

func (f *nicFaults) count(x NICFault) { f.hits[bits.TrailingZeros64(uint64(x))].Add(1) }

// take reports whether fault x is on, counting a hit, and switches a
// one-shot fault off.
func (f *nicFaults) take(x NICFault) bool {
	for {
		v := f.on.Load()
		if NICFault(v)&x == 0 {
			return false
		}
		if x.Lasting() || f.on.CompareAndSwap(v, v&^uint64(x)) {
			f.count(x)
			return true
		}
	}
}

// SetFault switches a NIC fault on or off.
func (n *NIC) SetFault(x NICFault, on bool) {
	n.faults.set(x, on)
	n.log.Info("nic fault", "fault", x.String(), "on", on)
	if x&(NICFaultLinkFlap|NICFaultVFFlap) != 0 {
		n.kickLink()
	}
}

// FaultHits returns how many times NIC fault x took effect.
func (n *NIC) FaultHits(x NICFault) uint64 {
	return n.faults.hits[bits.TrailingZeros64(uint64(x))].Load()
}
