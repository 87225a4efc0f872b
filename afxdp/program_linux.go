//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// Program is the XDP program that hands each RX queue's frames to the
// socket registered for that queue in its XSKMAP, and its attachment to
// one netdev. A frame on a queue without a socket goes on to the kernel
// stack (XDP_PASS). It is safe for concurrent use.
type Program struct {
	mu    sync.Mutex
	xsks  *ebpf.Map
	prog  *ebpf.Program
	link  link.Link
	mode  AttachMode
	slots int
}

// xdpPass is XDP_PASS (linux/bpf.h), the action for a frame whose queue
// has no socket.
const xdpPass = 2

// xdpMDRxQueueIndex is the offset of rx_queue_index in struct xdp_md.
const xdpMDRxQueueIndex = 16

// NewProgram loads the program with an XSKMAP of queues slots (queue ids
// 0..queues-1). It is built in place, so no compiler or object file is
// involved:
//
//	r2 = ctx->rx_queue_index
//	return bpf_redirect_map(&xsks, r2, XDP_PASS)
//
// bpf_redirect_map takes the low bits of its flags as the action when the
// slot is empty (Linux 5.3+).
func NewProgram(queues int) (*Program, error) {
	if queues < 1 || queues > 1<<16 {
		return nil, fmt.Errorf("afxdp: xskmap of %d queues", queues)
	}
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "vmbusd_xsks",
		Type:       ebpf.XSKMap,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(queues),
	})
	if err != nil {
		return nil, fmt.Errorf("afxdp: create xskmap: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "vmbusd_xsk",
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, xdpMDRxQueueIndex, asm.Word),
			asm.LoadMapPtr(asm.R1, xsks.FD()),
			asm.Mov.Imm(asm.R3, xdpPass),
			asm.FnRedirectMap.Call(),
			asm.Return(),
		},
		License: "MIT",
	})
	if err != nil {
		xsks.Close()
		return nil, fmt.Errorf("afxdp: load xdp program: %w", err)
	}
	return &Program{xsks: xsks, prog: prog, slots: queues}, nil
}

// Attach hooks the program to the netdev ifindex through a BPF link, so
// it is detached when the Program is closed or the process dies. With
// AttachAuto it tries the native hook first and falls back to the generic
// one; Mode reports which.
func (p *Program) Attach(ifindex int, mode AttachMode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prog == nil {
		return ErrClosed
	}
	if p.link != nil {
		return errors.New("afxdp: program already attached")
	}
	try := func(flags link.XDPAttachFlags) error {
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: flags})
		if err == nil {
			p.link = l
		}
		return err
	}
	var err error
	switch mode {
	case AttachNative:
		err = try(link.XDPDriverMode)
	case AttachGeneric:
		err = try(link.XDPGenericMode)
	default:
		mode = AttachNative
		if err = try(link.XDPDriverMode); err != nil {
			nerr := err
			mode = AttachGeneric
			if err = try(link.XDPGenericMode); err != nil {
				err = fmt.Errorf("native: %w; generic: %w", nerr, err)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("afxdp: attach xdp to ifindex %d: %w", ifindex, err)
	}
	p.mode = mode
	return nil
}

// Register points queue's XSKMAP slot at s. Frames on that queue go to s
// from then on.
func (p *Program) Register(queue int, s *Socket) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.xsks == nil {
		return ErrClosed
	}
	if queue < 0 || queue >= p.slots {
		return fmt.Errorf("afxdp: queue %d outside the xskmap's %d slots", queue, p.slots)
	}
	if err := p.xsks.Put(uint32(queue), uint32(s.FD())); err != nil {
		return fmt.Errorf("afxdp: xskmap slot %d: %w", queue, err)
	}
	return nil
}

// Unregister empties queue's slot: its frames go to the kernel stack.
// Closing a socket empties its slot as well.
func (p *Program) Unregister(queue int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.xsks == nil {
		return ErrClosed
	}
	if err := p.xsks.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("afxdp: xskmap slot %d: %w", queue, err)
	}
	return nil
}

// Mode reports the hook the program is attached with (AttachNative or
// AttachGeneric), or AttachAuto while it is not attached.
func (p *Program) Mode() AttachMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Detach unhooks the program from its netdev; it can be attached again.
func (p *Program) Detach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.detachLocked()
}

// detachLocked needs p.mu held. A link whose netdev is already gone
// closes without error.
func (p *Program) detachLocked() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link, p.mode = nil, AttachAuto
	if err != nil {
		return fmt.Errorf("afxdp: detach xdp: %w", err)
	}
	return nil
}

// Close detaches the program and frees it and its map.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.detachLocked()
	if p.prog != nil {
		p.prog.Close()
		p.xsks.Close()
		p.prog, p.xsks = nil, nil
	}
	return err
}
