//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net"
	"slices"
)

// Port is the AF_XDP data path of one netdev: the XDP program attached to
// it and one Socket per RX queue, registered in the program's XSKMAP.
// Its methods are safe for concurrent use; each Socket documents its own
// rules.
type Port struct {
	name    string
	ifindex int
	prog    *Program
	socks   []*Socket
	area    *umemArea // the shared UMEM, or nil
}

// Open attaches the data path to the netdev ifname: it loads the program,
// opens a socket on each queue of cfg.Queues (every RX queue when empty),
// registers them, then attaches the program, so no frame is redirected
// before its socket is ready. On error nothing is left behind.
func Open(ifname string, cfg Config) (_ *Port, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	queues := slices.Clone(cfg.Queues)
	if len(queues) == 0 {
		n, err := rxQueueCount(ifname)
		if err != nil || n < 1 {
			n = 1
		}
		for q := range n {
			queues = append(queues, q)
		}
	}
	slots := 0
	for _, q := range queues {
		if q < 0 {
			return nil, fmt.Errorf("afxdp: queue %d", q)
		}
		slots = max(slots, q+1)
	}
	p := &Port{name: ifname, ifindex: ifi.Index}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	if p.prog, err = NewProgram(slots); err != nil {
		return nil, err
	}
	if cfg.SharedUMEM {
		if p.area, err = newUMEMArea(len(queues)*2*cfg.RingSize, cfg.FrameSize); err != nil {
			return nil, err
		}
	}
	for i, q := range queues {
		var s *Socket
		if p.area == nil {
			s, err = openSocket(ifi.Index, q, cfg, nil, 0, nil)
		} else {
			var owner *Socket
			if i > 0 {
				owner = p.socks[0]
			}
			s, err = openSocket(ifi.Index, q, cfg, p.area, uint32(i*2*cfg.RingSize), owner)
		}
		if err != nil {
			return nil, err
		}
		p.socks = append(p.socks, s)
		if err = p.prog.Register(q, s); err != nil {
			return nil, err
		}
	}
	if err = p.prog.Attach(ifi.Index, cfg.Attach); err != nil {
		return nil, err
	}
	return p, nil
}

// Sockets returns the port's sockets in the order of its queues.
func (p *Port) Sockets() []*Socket { return slices.Clone(p.socks) }

// Name is the netdev's name, Ifindex its index.
func (p *Port) Name() string { return p.name }
func (p *Port) Ifindex() int { return p.ifindex }

// AttachMode reports how the program is hooked: AttachNative or
// AttachGeneric.
func (p *Port) AttachMode() AttachMode { return p.prog.Mode() }

// BindMode reports what the sockets got: BindZeroCopy or BindCopy.
func (p *Port) BindMode() BindMode {
	if len(p.socks) == 0 {
		return BindAuto
	}
	return p.socks[0].Mode()
}

// Close detaches the program first, so the netdev's traffic goes back to
// the kernel stack rather than to closing sockets, then closes the
// sockets and frees the program and the UMEM.
func (p *Port) Close() error {
	var errs []error
	if p.prog != nil {
		errs = append(errs, p.prog.Close())
	}
	for _, s := range p.socks {
		errs = append(errs, s.Close())
	}
	if p.area != nil {
		p.area.unref()
		p.area = nil
	}
	return errors.Join(errs...)
}
