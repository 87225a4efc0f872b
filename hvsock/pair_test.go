package hvsock_test

import (
	"context"
	"io"
	"testing"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/vmbus"
	"github.com/vmbusd/vmbusd/vmbus/vmbustest"
)

// Unit tests of the stream protocol drive the host end of the
// connection's channel directly, over a vmbustest pair: no simulated
// host, sysfs tree or connect request. The tests of connecting,
// accepting, discovery and the simulated host's own behaviour keep the
// full simulator (testEnv).

// hostPipe is the host's end of one hv_sock connection over a pair: just
// the pipe framing, written and read with the channel as the host's
// relay would. Write and WriteFIN belong to one goroutine, Read to one.
// It allocates nothing while data fits the rings.
type hostPipe struct {
	p   *vmbustest.Pair
	h   *vmbustest.Host
	ctx context.Context

	whdr [wire.PipeHeaderSize]byte
	cur  []byte // undelivered payload of the packet read last
	fin  bool   // the guest's FIN was read
}

// pipePair connects a Conn with cfg to a hostPipe. The rings are cfg's
// sizes unless opts gives them. At the end of the test the host rescinds
// the channel, so the Conn's Close need not wait out its linger.
func pipePair(t testing.TB, cfg hvsock.Config, opts vmbustest.Options) (*hvsock.Conn, *hostPipe) {
	t.Helper()
	if opts.OutRingSize == 0 && opts.InRingSize == 0 {
		opts.OutRingSize, opts.InRingSize = cfg.RingSizes()
	}
	opts.MaxPacket = wire.MaxPacketBody // as the transport opens its channels
	p := vmbustest.New(t, opts)
	g := hvsock.ConnOverPair(p, cfg, 5000)
	t.Cleanup(func() {
		p.Rescind()
		g.Close()
	})
	return g, &hostPipe{p: p, h: p.Host, ctx: testCtx(t)}
}

// queue writes b as data packets of at most a Linux chunk each, without
// publishing them, waiting for room when the ring is full.
func (hp *hostPipe) queue(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k := min(len(b)-n, wire.DefaultChunk)
		wire.PutPipeHeader(hp.whdr[:], k)
		err := hp.h.SendInband(0, hp.whdr[:], b[n:n+k])
		if full, ok := err.(*vmbus.RingFullError); ok {
			if err := hp.h.Flush(); err != nil {
				return n, err
			}
			if err := hp.h.WaitWritable(hp.ctx, full.Need); err != nil {
				return n, err
			}
			continue
		}
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// queueFIN writes the host's FIN without publishing it.
func (hp *hostPipe) queueFIN() error {
	wire.PutPipeHeader(hp.whdr[:], 0)
	return hp.h.SendInband(0, hp.whdr[:])
}

// Write sends b to the guest and publishes it.
func (hp *hostPipe) Write(b []byte) (int, error) {
	n, err := hp.queue(b)
	if err != nil {
		return n, err
	}
	return n, hp.h.Flush()
}

// Read delivers what the guest sent, and io.EOF after its FIN. It
// releases a packet's ring space once the packet is consumed.
func (hp *hostPipe) Read(b []byte) (int, error) {
	for len(hp.cur) == 0 {
		if hp.fin {
			return 0, io.EOF
		}
		pkt, err := hp.h.Recv()
		if err == vmbus.ErrRingEmpty {
			if err := hp.h.CommitRecv(); err != nil {
				return 0, err
			}
			if err := hp.h.WaitReadable(hp.ctx); err != nil {
				return 0, err
			}
			continue
		}
		if err != nil {
			return 0, err
		}
		data, err := wire.DecodePacket(pkt.Raw)
		if err != nil {
			return 0, err
		}
		if len(data) == 0 {
			hp.fin = true
			if err := hp.h.CommitRecv(); err != nil {
				return 0, err
			}
		}
		hp.cur = data
	}
	n := copy(b, hp.cur)
	hp.cur = hp.cur[n:]
	if len(hp.cur) == 0 {
		if err := hp.h.CommitRecv(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// finish ends the host's side as a host that has read the guest's FIN
// does: its own FIN, then the rescind.
func (hp *hostPipe) finish() error {
	if err := hp.queueFIN(); err != nil {
		return err
	}
	if err := hp.h.Flush(); err != nil {
		return err
	}
	hp.p.Rescind()
	return nil
}
