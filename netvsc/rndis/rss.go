package rndis

import (
	"net/netip"

	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// HashInfo is an NDIS hash function and set of hash types: the
// hash_information of RSSParameters and the NBL_HASH_INFO PPI (docs/protocol/netvsc.md
// §3.4, §3.6; DPDK ndis.h NDIS_HASH_*).
type HashInfo uint32

// HashInfo values.
const (
	NDISHashFunctionToeplitz HashInfo = 0x00000001
	NDISHashFunctionMask     HashInfo = 0x000000FF
	NDISHashTypeMask         HashInfo = 0x00FFFF00
	NDISHashIPv4             HashInfo = 0x00000100
	NDISHashTCPIPv4          HashInfo = 0x00000200
	NDISHashIPv6             HashInfo = 0x00000400
	NDISHashIPv6Ex           HashInfo = 0x00000800
	NDISHashTCPIPv6          HashInfo = 0x00001000
	NDISHashTCPIPv6Ex        HashInfo = 0x00002000
	NDISHashUDPIPv4          HashInfo = 0x00004000
	NDISHashUDPIPv6          HashInfo = 0x00008000
	NDISHashUDPIPv6Ex        HashInfo = 0x00010000
)

// Function returns the hash function bits.
func (h HashInfo) Function() HashInfo { return h & NDISHashFunctionMask }

// Types returns the hash type bits.
func (h HashInfo) Types() HashInfo { return h & NDISHashTypeMask }

// RSS capability flags, RSSCapabilities.Flags (docs/protocol/netvsc.md §3.6; DPDK ndis.h
// NDIS_RSS_CAP_*). The hash-type bits here are not HashInfo's.
const (
	NDISRSSCapsHashToeplitz              uint32 = 0x00000001
	NDISRSSCapsHashTypeTCPIPv4           uint32 = 0x00000100
	NDISRSSCapsHashTypeTCPIPv6           uint32 = 0x00000200
	NDISRSSCapsHashTypeTCPIPv6Ex         uint32 = 0x00000400
	NDISRSSCapsMessageSignaledInterrupts uint32 = 0x01000000
	NDISRSSCapsClassificationAtISR       uint32 = 0x02000000
	NDISRSSCapsClassificationAtDPC       uint32 = 0x04000000
	NDISRSSCapsUsingMSIX                 uint32 = 0x08000000
)

// RSS capability revisions and sizes (DPDK ndis.h NDIS_RSS_CAPS_*).
const (
	NDISRSSCapsRevision1 = 1  // NDIS 6.0–6.20
	NDISRSSCapsRevision2 = 2  // NDIS 6.30
	NDISRSSCapsSizeRev1  = 16 // without NumIndirectionEntries
	NDISRSSCapsSizeRev2  = 18
)

// RSSCapabilitiesQueryHeader is the header a guest puts in the input
// buffer of an OID_GEN_RECEIVE_SCALE_CAPABILITIES query.
func RSSCapabilitiesQueryHeader() NDISObjectHeader {
	return NDISObjectHeader{NDISObjectTypeRSSCapabilities, NDISRSSCapsRevision2, NDISRSSCapsSizeRev2}
}

// RSSCapabilities is NDIS_RECEIVE_SCALE_CAPABILITIES (packed, 18 bytes at
// revision 2). openvmm answers Toeplitz|TCP_IPV4|TCP_IPV6, 1 interrupt
// message, NumReceiveQueues = max queues and 128 entries even with one
// queue; DPDK requires entries <= 128.
type RSSCapabilities struct {
	// Header is written as given; the zero value means revision 2, 18
	// bytes. Marshal emits Header.Size bytes.
	Header                NDISObjectHeader
	Flags                 uint32 // @4: NDISRSSCaps*
	NumInterruptMessages  uint32 // @8
	NumReceiveQueues      uint32 // @12
	NumIndirectionEntries uint16 // @16 (rev 2)
}

// Marshal appends the object (Header.Size bytes) to dst.
func (c RSSCapabilities) Marshal(dst []byte) []byte {
	h := c.Header
	if h == (NDISObjectHeader{}) {
		h = RSSCapabilitiesQueryHeader()
	}
	var b [NDISRSSCapsSizeRev2]byte
	h.put(b[:])
	le.PutUint32(b[4:], c.Flags)
	le.PutUint32(b[8:], c.NumInterruptMessages)
	le.PutUint32(b[12:], c.NumReceiveQueues)
	le.PutUint16(b[16:], c.NumIndirectionEntries)
	return appendObject(dst, b[:], int(h.Size))
}

// Unmarshal decodes the object at the start of b: type RSS_CAPABILITIES,
// revision from 1, Size >= 16 and within b. NumIndirectionEntries is 0
// when Size is below 18.
func (c *RSSCapabilities) Unmarshal(b []byte) error {
	h, err := checkObject(b, "NDIS_RECEIVE_SCALE_CAPABILITIES", NDISObjectTypeRSSCapabilities, NDISRSSCapsSizeRev1)
	if err != nil {
		return err
	}
	*c = RSSCapabilities{
		Header:               h,
		Flags:                le.Uint32(b[4:]),
		NumInterruptMessages: le.Uint32(b[8:]),
		NumReceiveQueues:     le.Uint32(b[12:]),
	}
	if h.Size >= NDISRSSCapsSizeRev2 {
		c.NumIndirectionEntries = le.Uint16(b[16:])
	}
	return nil
}

// RSS parameter flags, RSSParameters.Flags (docs/protocol/netvsc.md §3.6).
const (
	NDISRSSParamFlagBaseCPUUnchanged  uint16 = 0x0001
	NDISRSSParamFlagHashInfoUnchanged uint16 = 0x0002
	NDISRSSParamFlagITableUnchanged   uint16 = 0x0004
	NDISRSSParamFlagHashKeyUnchanged  uint16 = 0x0008
	NDISRSSParamFlagDisableRSS        uint16 = 0x0010
)

// RSS parameter revisions, sizes and table limits (docs/protocol/netvsc.md §3.6; DPDK
// ndis.h).
const (
	NDISRSSParamsRevision1 = 1
	NDISRSSParamsRevision2 = 2
	NDISRSSParamsSizeRev1  = 28 // without the processor-mask fields
	NDISRSSParamsSizeRev2  = 40
	// RSSIndirectionTableEntries is the table size both guests send
	// (ITAB_NUM, NDIS_HASH_INDCNT) and the most this package decodes.
	RSSIndirectionTableEntries = 128
	// RSSHashKeySize is the Toeplitz key size (NDIS_HASH_KEYSIZE_TOEPLITZ).
	RSSHashKeySize = 40
	// RSSParametersSize is the info buffer both guests send: the 40-byte
	// object, 128 table entries, then the key (592 bytes).
	RSSParametersSize = NDISRSSParamsSizeRev2 + 4*RSSIndirectionTableEntries + RSSHashKeySize
)

// RSSParameters is NDIS_RECEIVE_SCALE_PARAMETERS with its indirection
// table and hash key, set through OID_GEN_RECEIVE_SCALE_PARAMETERS. Table
// entries are channel (queue) indices. The zero value disables nothing
// and enables nothing; see NewRSSParameters.
type RSSParameters struct {
	// Header is as decoded; Marshal always writes the revision-2 header
	// {0x89, 2, 40}, the only form guests send.
	Header        NDISObjectHeader
	Flags         uint16   // @4: NDISRSSParamFlag*
	BaseCPUNumber uint16   // @6
	HashInfo      HashInfo // @8
	// TableLen entries of Table are used (table size @12 is 4×TableLen,
	// its offset @16 is 40 when encoded).
	TableLen int
	Table    [RSSIndirectionTableEntries]uint32
	// KeyLen bytes of Key are used (key size @20, offset @24 right after
	// the table when encoded).
	KeyLen                  int
	Key                     [RSSHashKeySize]byte
	ProcessorMasksOffset    uint32 // @28 (rev 2)
	NumProcessorMasks       uint32 // @32 (rev 2)
	ProcessorMasksEntrySize uint32 // @36 (rev 2)
}

// NewRSSParameters returns parameters enabling hash over table and key;
// entries past 128 and key bytes past 40 are dropped.
func NewRSSParameters(hash HashInfo, key []byte, table []uint32) RSSParameters {
	p := RSSParameters{HashInfo: hash}
	p.TableLen = copy(p.Table[:], table)
	p.KeyLen = copy(p.Key[:], key)
	return p
}

// Disabled reports whether the parameters turn RSS off: the DISABLE flag,
// or no hash function (openvmm).
func (p *RSSParameters) Disabled() bool {
	return p.Flags&NDISRSSParamFlagDisableRSS != 0 || p.HashInfo.Function() == 0
}

// Lookup returns the queue for a hash (IndirectionLookup over the table).
func (p *RSSParameters) Lookup(hash uint32) uint32 {
	return IndirectionLookup(p.Table[:p.tableLen()], hash)
}

func (p *RSSParameters) tableLen() int { return min(max(p.TableLen, 0), RSSIndirectionTableEntries) }
func (p *RSSParameters) keyLen() int   { return min(max(p.KeyLen, 0), RSSHashKeySize) }

// Size returns the encoded size: 40 + 4×TableLen + KeyLen.
func (p *RSSParameters) Size() int { return NDISRSSParamsSizeRev2 + 4*p.tableLen() + p.keyLen() }

// Marshal appends the object, table and key (Size bytes) to dst.
func (p RSSParameters) Marshal(dst []byte) []byte {
	n, k := p.tableLen(), p.keyLen()
	dst, b := grow(dst, p.Size())
	NDISObjectHeader{NDISObjectTypeRSSParameters, NDISRSSParamsRevision2, NDISRSSParamsSizeRev2}.put(b)
	le.PutUint16(b[4:], p.Flags)
	le.PutUint16(b[6:], p.BaseCPUNumber)
	le.PutUint32(b[8:], uint32(p.HashInfo))
	le.PutUint16(b[12:], uint16(4*n))
	le.PutUint32(b[16:], NDISRSSParamsSizeRev2)
	le.PutUint16(b[20:], uint16(k))
	le.PutUint32(b[24:], uint32(NDISRSSParamsSizeRev2+4*n))
	le.PutUint32(b[28:], p.ProcessorMasksOffset)
	le.PutUint32(b[32:], p.NumProcessorMasks)
	le.PutUint32(b[36:], p.ProcessorMasksEntrySize)
	for i, v := range p.Table[:n] {
		le.PutUint32(b[NDISRSSParamsSizeRev2+4*i:], v)
	}
	copy(b[NDISRSSParamsSizeRev2+4*n:], p.Key[:k])
	return dst
}

// Unmarshal decodes the object at the start of b, where b is the whole
// info buffer (table and key offsets are relative to the object's start):
// type RSS_PARAMETERS, revision from 1, Size >= 28 and within b; a
// non-empty table must be whole u32 entries, at most 128, inside b
// (protoerr.KindRSSTable); a non-empty key at most 40 bytes, inside b (protoerr.KindRSSKey).
// Whether the values are acceptable is Validate's business.
func (p *RSSParameters) Unmarshal(b []byte) error {
	const msg = "NDIS_RECEIVE_SCALE_PARAMETERS"
	h, err := checkObject(b, msg, NDISObjectTypeRSSParameters, NDISRSSParamsSizeRev1)
	if err != nil {
		return err
	}
	var q RSSParameters
	q.Header = h
	q.Flags = le.Uint16(b[4:])
	q.BaseCPUNumber = le.Uint16(b[6:])
	q.HashInfo = HashInfo(le.Uint32(b[8:]))
	tsize, toff := le.Uint16(b[12:]), le.Uint32(b[16:])
	ksize, koff := le.Uint16(b[20:]), le.Uint32(b[24:])
	if h.Size >= NDISRSSParamsSizeRev2 {
		q.ProcessorMasksOffset = le.Uint32(b[28:])
		q.NumProcessorMasks = le.Uint32(b[32:])
		q.ProcessorMasksEntrySize = le.Uint32(b[36:])
	}
	if tsize%4 != 0 || int(tsize)/4 > RSSIndirectionTableEntries {
		return protoerr.New(msg, protoerr.KindRSSTable, "indirection_table_size", uint64(tsize))
	}
	if tsize > 0 {
		if uint64(tsize) > uint64(len(b)) || uint64(toff) > uint64(len(b))-uint64(tsize) {
			return protoerr.New(msg, protoerr.KindRSSTable, "indirection_table_offset", uint64(toff))
		}
		q.TableLen = int(tsize) / 4
		for i := range q.TableLen {
			q.Table[i] = le.Uint32(b[int(toff)+4*i:])
		}
	}
	if ksize > RSSHashKeySize {
		return protoerr.New(msg, protoerr.KindRSSKey, "hash_key_size", uint64(ksize))
	}
	if ksize > 0 {
		if uint64(ksize) > uint64(len(b)) || uint64(koff) > uint64(len(b))-uint64(ksize) {
			return protoerr.New(msg, protoerr.KindRSSKey, "hash_key_offset", uint64(koff))
		}
		q.KeyLen = copy(q.Key[:], b[koff:uint64(koff)+uint64(ksize)])
	}
	*p = q
	return nil
}

// Validate applies openvmm's acceptance rules for an RSS set against a
// host with queues channels (docs/protocol/netvsc.md §3.6): turning RSS off is always
// accepted; otherwise the key must be 40 bytes (protoerr.KindRSSKey), the table
// non-empty (protoerr.KindRSSTable) and every entry below queues (protoerr.KindRSSEntry).
// Which hash types a host accepts (an Azure host refused UDP-only with
// StatusInvalidParameter) is the host's own policy.
func (p *RSSParameters) Validate(queues int) error {
	const msg = "NDIS_RECEIVE_SCALE_PARAMETERS"
	if p.Disabled() {
		return nil
	}
	if p.KeyLen != RSSHashKeySize {
		return protoerr.New(msg, protoerr.KindRSSKey, "hash_key_size", uint64(max(p.KeyLen, 0)))
	}
	n := p.tableLen()
	if n == 0 {
		return protoerr.New(msg, protoerr.KindRSSTable, "indirection_table_size", 0)
	}
	for _, e := range p.Table[:n] {
		if queues <= 0 || uint64(e) >= uint64(queues) {
			return protoerr.New(msg, protoerr.KindRSSEntry, "indirection_table", uint64(e))
		}
	}
	return nil
}

// MicrosoftRSSKey returns Microsoft's default 40-byte Toeplitz key (the
// "Verifying the RSS Hash Calculation" key), which Linux netvsc uses.
func MicrosoftRSSKey() [RSSHashKeySize]byte {
	return [RSSHashKeySize]byte{
		0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2,
		0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
		0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4,
		0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
		0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
	}
}

// Toeplitz returns the Toeplitz hash of input under key: for every set bit
// of input (most significant bit of each byte first), XOR in the 32 key
// bits starting at that bit position. Key bits past the end of key count
// as 0; a full hash needs len(key) >= len(input)+4 (40 bytes covers a TCP
// over IPv6 tuple).
func Toeplitz(key, input []byte) uint32 {
	var w uint32 // the 32-bit key window at the current input bit
	for i := range 4 {
		w <<= 8
		if i < len(key) {
			w |= uint32(key[i])
		}
	}
	var h uint32
	for i, c := range input {
		var next byte
		if i+4 < len(key) {
			next = key[i+4]
		}
		for bit := 7; bit >= 0; bit-- {
			if c>>bit&1 != 0 {
				h ^= w
			}
			w = w<<1 | uint32(next>>bit&1)
		}
	}
	return h
}

// RSSHash hashes a flow the way NDIS RSS does: the input is the source
// address, the destination address and, with ports, the source and
// destination ports, all in network byte order. Two IPv4 (or IPv4-mapped)
// addresses hash as 4 bytes each, anything else as 16.
func RSSHash(key []byte, src, dst netip.Addr, srcPort, dstPort uint16, ports bool) uint32 {
	var in [36]byte
	n := 0
	if src.Unmap().Is4() && dst.Unmap().Is4() {
		s, d := src.Unmap().As4(), dst.Unmap().As4()
		n += copy(in[n:], s[:])
		n += copy(in[n:], d[:])
	} else {
		s, d := src.As16(), dst.As16()
		n += copy(in[n:], s[:])
		n += copy(in[n:], d[:])
	}
	if ports {
		in[n], in[n+1], in[n+2], in[n+3] = byte(srcPort>>8), byte(srcPort), byte(dstPort>>8), byte(dstPort)
		n += 4
	}
	return Toeplitz(key, in[:n])
}

// IndirectionLookup returns the entry a hash selects: table[hash mod
// len(table)], which for the power-of-two sizes NDIS uses (128 for RSS, 16
// for the send table) is the low-order bits of the hash. An empty table
// selects 0.
func IndirectionLookup(table []uint32, hash uint32) uint32 {
	if len(table) == 0 {
		return 0
	}
	return table[uint64(hash)%uint64(len(table))]
}
