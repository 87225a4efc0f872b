package main

import (
	"fmt"
	"os"
	"time"

	"github.com/vmbusd/vmbusd/vmbus"
)

// batch is how many packets a side moves per Commit at most: like a driver,
// the sender writes what it has (or what fits) and publishes once, and the
// receiver reads until the ring is empty and releases the space once, but
// at least every batch packets or batchLimit bytes.
const batch = 64

// batchLimit is the most bytes a side moves per Commit (a packet larger
// than that goes alone). A batch that holds a large part of the ring leaves
// the peer idle until it is published, and the two ends take turns instead
// of overlapping: with 64 KiB packets and a 2 MiB ring, committing only
// every 64 packets or when full/empty halved the throughput. Between 8 and
// 128 KiB the limit made no measurable difference.
func batchLimit(dataSize int) int {
	return min(dataSize/8, 32<<10)
}

// maxPayload is the largest SIZE: tlen is a u16 count of 8-byte units and
// covers the 16-byte descriptor.
const maxPayload = 0xffff*8 - 16

// result is what the last stdout line reports.
type result struct {
	op, role               string
	pkts, bytes            uint64
	secs                   float64
	signals, waits, errors uint64
}

func (r *result) print() {
	secs := r.secs
	if secs <= 0 {
		secs = 1e-9
	}
	fmt.Printf("result op=%s role=%s pkts=%d payload_bytes=%d secs=%.6f pps=%.0f MBps=%.1f signals=%d waits=%d errors=%d\n",
		r.op, r.role, r.pkts, r.bytes, secs, float64(r.pkts)/secs, float64(r.bytes)/secs/1e6,
		r.signals, r.waits, r.errors)
}

// send writes n inband packets of size payload bytes, xactid = seq. The
// payload is generated into a buffer and handed to Write, which copies it
// into the ring. Packets go out in batches: as many as fit (up to batch),
// then one Commit; signals counts the Commits that asked to signal the
// reader. When the ring is full, waits counts the packet and the sender
// polls Free until the packet fits; with -w it first announces
// pending_send_sz, as a driver about to sleep would, so the reader's side
// of that protocol gets exercised.
func send(o *options, out *vmbus.OutRing, n, size uint64) result {
	words := make([]uint64, size/8)
	payload := asBytes(words)
	fill(words, 0)
	w := newWaiter(o)
	announce := o.waitUS > 0 && out.PendingSendSupported()
	r := result{op: "send", role: o.role(), pkts: n, bytes: n * size}
	pkt := vmbus.PacketSize(0, int(size))
	batchBytes := batchLimit(out.DataSize())
	ready := false // words holds the payload of packet seq
	t0 := time.Now()
	for seq := uint64(0); seq < n; {
		var err error
		for k, b := 0, 0; k < batch && b < batchBytes && seq < n; k, b = k+1, b+pkt {
			if !ready {
				if o.seqOnly {
					words[0] = seq
				} else {
					fill(words, seq)
				}
				ready = true
			}
			if err = out.Write(vmbus.PacketInband, 0, seq, nil, payload); err != nil {
				break
			}
			ready = false
			seq++
		}
		if out.Commit() {
			r.signals++
		}
		if err == nil {
			continue
		}
		full, ok := err.(*vmbus.RingFullError)
		if !ok {
			fatal("write failed: %v", err)
		}
		r.waits++
		need := full.Need
		if announce {
			out.SetPendingSend(need)
		}
		for out.Free() <= need {
			if err := out.Err(); err != nil {
				fatal("write failed: %v", err)
			}
			w.idle()
		}
		if announce {
			out.ClearPendingSend()
		}
		w.progress()
	}
	if n > 0 {
		r.secs = time.Since(t0).Seconds()
	}
	return r
}

// recv reads n packets and checks each: type inband, xactid = seq, a
// non-empty payload that follows the pattern (-x: word 0 only). It reads
// until the ring is empty (at most batch packets or batchLimit bytes), then
// Commits once; signals
// counts the Commits that asked to signal the writer (pending_send_sz
// rule), waits the times the ring was found empty. The clock runs from the
// arrival of packet 0 to that of packet n-1.
func recv(o *options, in *vmbus.InRing, n uint64) result {
	words := make([]uint64, (in.MaxPacket()+7)/8)
	buf := asBytes(words)[:in.MaxPacket()]
	w := newWaiter(o)
	r := result{op: "recv", role: o.role(), pkts: n}
	var t0 time.Time
	waiting := false
	unreleased, unreleasedBytes := 0, 0
	batchBytes := batchLimit(in.DataSize())
	for i := uint64(0); i < n; {
		p, err := in.Read(buf)
		if err == vmbus.ErrRingEmpty {
			if in.Commit() {
				r.signals++
			}
			unreleased, unreleasedBytes = 0, 0
			if !waiting {
				r.waits++
				waiting = true
			}
			w.idle()
			continue
		}
		if err != nil {
			fatal("read failed: %v", err)
		}
		if i == 0 {
			t0 = time.Now()
		}
		waiting = false
		w.progress()
		// Raw starts at buf[0], so the payload is a word-aligned slice of words.
		pw := words[p.Offset8:p.Len8]
		bad := firstBad(pw, i, o.seqOnly)
		if p.Type != vmbus.PacketInband || p.TransID != i || len(pw) == 0 || bad < len(pw) {
			if r.errors < 10 {
				fmt.Fprintf(os.Stderr, "ringbench: packet %d: type %d xact %d len %d, first bad word %d\n",
					i, p.Type, p.TransID, 8*len(pw), bad)
			}
			r.errors++
		}
		r.bytes += 8 * uint64(len(pw))
		i++
		unreleased++
		unreleasedBytes += len(p.Raw)
		if unreleased == batch || unreleasedBytes >= batchBytes {
			if in.Commit() {
				r.signals++
			}
			unreleased, unreleasedBytes = 0, 0
		}
	}
	if in.Commit() {
		r.signals++
	}
	if n > 0 {
		r.secs = time.Since(t0).Seconds()
	}
	return r
}
