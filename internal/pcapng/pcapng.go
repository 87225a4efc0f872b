package pcapng

import (
	"encoding/binary"
	"errors"
	"io"
	"time"
)

// Direction of a captured frame relative to the guest.
type Direction uint8

const (
	DirUnknown Direction = 0
	DirIn      Direction = 1 // host to guest (received)
	DirOut     Direction = 2 // guest to host (sent)
)

// LinkTypeEthernet is LINKTYPE_ETHERNET.
const LinkTypeEthernet = 1

const (
	blockSHB = 0x0A0D0D0A
	blockIDB = 0x00000001
	blockEPB = 0x00000006
	blockISB = 0x00000005

	optEnd         = 0
	optComment     = 1
	optIfName      = 2
	optIfDesc      = 3
	optIfTsResol   = 9
	optShbUserAppl = 4
	optEpbFlags    = 2
	optEpbQueue    = 6

	optIsbEndTime      = 3
	optIsbIfRecv       = 4
	optIsbIfDrop       = 5
	optIsbFilterAccept = 6
)

// Writer writes one pcapng section. It is not safe for concurrent use.
type Writer struct {
	w       io.Writer
	buf     []byte
	snaplen int
	ifaces  int
}

// NewWriter writes the section header and returns a writer. app names the
// writing program (shb_userappl).
func NewWriter(w io.Writer, app string) (*Writer, error) {
	pw := &Writer{w: w, buf: make([]byte, 0, 64<<10)}
	b := pw.buf[:0]
	b = le32(b, blockSHB)
	b = le32(b, 0) // total length, patched
	b = le32(b, 0x1A2B3C4D)
	b = le16(b, 1)
	b = le16(b, 0)
	b = binary.LittleEndian.AppendUint64(b, ^uint64(0)) // section length unknown
	b = appendOpt(b, optShbUserAppl, []byte(app))
	b = le32(appendOptEnd(b), 0)
	return pw, pw.finish(b)
}

// AddInterface declares an interface (a NIC) and returns its id for
// WritePacket. snaplen 0 means 262144.
func (pw *Writer) AddInterface(name, desc string, snaplen int) (int, error) {
	if snaplen <= 0 {
		snaplen = 262144
	}
	b := pw.buf[:0]
	b = le32(b, blockIDB)
	b = le32(b, 0)
	b = le16(b, LinkTypeEthernet)
	b = le16(b, 0)
	b = le32(b, uint32(snaplen))
	b = appendOpt(b, optIfName, []byte(name))
	if desc != "" {
		b = appendOpt(b, optIfDesc, []byte(desc))
	}
	b = appendOpt(b, optIfTsResol, []byte{9}) // nanoseconds
	b = le32(appendOptEnd(b), 0)
	id := pw.ifaces
	pw.ifaces++
	if pw.snaplen == 0 || snaplen > pw.snaplen {
		pw.snaplen = snaplen
	}
	return id, pw.finish(b)
}

// ErrNoInterface is returned for a packet on an undeclared interface.
var ErrNoInterface = errors.New("pcapng: packet on an undeclared interface")

// WritePacket writes one enhanced packet block. origLen is the frame's
// length on the wire (>= len(data) when the caller truncated it).
func (pw *Writer) WritePacket(iface int, ts time.Time, dir Direction, queue int, data []byte, origLen int) error {
	if iface < 0 || iface >= pw.ifaces {
		return ErrNoInterface
	}
	ns := uint64(ts.UnixNano())
	b := pw.buf[:0]
	b = le32(b, blockEPB)
	b = le32(b, 0)
	b = le32(b, uint32(iface))
	b = le32(b, uint32(ns>>32))
	b = le32(b, uint32(ns))
	b = le32(b, uint32(len(data)))
	b = le32(b, uint32(max(origLen, len(data))))
	b = append(b, data...)
	b = pad4(b)
	if dir != DirUnknown {
		var f [4]byte
		binary.LittleEndian.PutUint32(f[:], uint32(dir))
		b = appendOpt(b, optEpbFlags, f[:])
	}
	if queue >= 0 {
		var q [4]byte
		binary.LittleEndian.PutUint32(q[:], uint32(queue))
		b = appendOpt(b, optEpbQueue, q[:])
	}
	b = le32(appendOptEnd(b), 0)
	err := pw.finish(b)
	if cap(b) > cap(pw.buf) {
		pw.buf = b[:0]
	}
	return err
}

// Stats are an interface's capture counters, written as an interface
// statistics block: Received frames the capture saw (before its filter),
// Accepted those its filter passed, Dropped those of them it could not
// keep (its reader was too slow).
type Stats struct {
	Received, Accepted, Dropped uint64
}

// WriteStats writes an interface statistics block for iface as of ts
// (isb_endtime, isb_ifrecv, isb_filteraccept, isb_ifdrop). A stream may
// carry several; readers such as capinfos and tshark take the last.
func (pw *Writer) WriteStats(iface int, ts time.Time, st Stats) error {
	if iface < 0 || iface >= pw.ifaces {
		return ErrNoInterface
	}
	ns := uint64(ts.UnixNano())
	var v [8]byte
	u64 := func(x uint64) []byte {
		binary.LittleEndian.PutUint64(v[:], x)
		return v[:]
	}
	b := pw.buf[:0]
	b = le32(b, blockISB)
	b = le32(b, 0)
	b = le32(b, uint32(iface))
	b = le32(b, uint32(ns>>32))
	b = le32(b, uint32(ns))
	var end [8]byte
	binary.LittleEndian.PutUint32(end[:], uint32(ns>>32))
	binary.LittleEndian.PutUint32(end[4:], uint32(ns))
	b = appendOpt(b, optIsbEndTime, end[:])
	b = appendOpt(b, optIsbIfRecv, u64(st.Received))
	b = appendOpt(b, optIsbFilterAccept, u64(st.Accepted))
	b = appendOpt(b, optIsbIfDrop, u64(st.Dropped))
	b = le32(appendOptEnd(b), 0)
	return pw.finish(b)
}

// finish patches both length words and writes the block.
func (pw *Writer) finish(b []byte) error {
	n := uint32(len(b))
	binary.LittleEndian.PutUint32(b[4:], n)
	binary.LittleEndian.PutUint32(b[n-4:], n)
	_, err := pw.w.Write(b)
	return err
}

func le16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }
func le32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func appendOpt(b []byte, code uint16, v []byte) []byte {
	b = le16(b, code)
	b = le16(b, uint16(len(v)))
	b = append(b, v...)
	return pad4(b)
}

func appendOptEnd(b []byte) []byte { return le32(b, 0) }
