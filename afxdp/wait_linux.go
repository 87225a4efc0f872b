//go:build linux

package afxdp

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel gives an AF_XDP socket no readiness event when its netdev is
// unregistered: poll reports nothing, and only the next sendto/recvfrom
// fails (ENXIO). So Wait also listens to rtnetlink's link group for the
// netdev's RTM_DELLINK, and probes the socket whenever it wakes without
// work and at least every probeInterval, so a removal is seen at once
// and a missed notification late at worst.
const probeInterval = time.Second

// waiter holds what Wait polls besides the socket: an rtnetlink socket
// subscribed to link events, and an eventfd that Close and context
// cancellation write to.
type waiter struct {
	ifindex int
	probe   time.Duration // probeInterval; tests set it negative to rely on events alone
	nlfd    int
	evMu    sync.Mutex // evfd against interrupt from a context callback
	evfd    int
	fds     [3]unix.PollFd
	nlbuf   []byte

	// The context whose cancellation is wired to evfd (by its Done
	// channel), so a loop that passes the same context every time
	// registers once.
	done <-chan struct{}
	stop func() bool
}

func (w *waiter) open(ifindex, xskfd int) error {
	w.ifindex = ifindex
	w.probe = probeInterval
	var err error
	w.nlfd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("afxdp: rtnetlink socket: %w", err)
	}
	if err = unix.Bind(w.nlfd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK}); err != nil {
		return fmt.Errorf("afxdp: rtnetlink bind: %w", err)
	}
	w.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("afxdp: eventfd: %w", err)
	}
	w.nlbuf = make([]byte, 16<<10)
	w.fds = [3]unix.PollFd{
		{Fd: int32(xskfd), Events: unix.POLLIN},
		{Fd: int32(w.nlfd), Events: unix.POLLIN},
		{Fd: int32(w.evfd), Events: unix.POLLIN},
	}
	return nil
}

// interrupt wakes a blocked poll.
func (w *waiter) interrupt() {
	w.evMu.Lock()
	defer w.evMu.Unlock()
	if w.evfd >= 0 {
		var one = [8]byte{1}
		_, _ = unix.Write(w.evfd, one[:])
	}
}

func (w *waiter) close() {
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
	if w.nlfd >= 0 {
		_ = unix.Close(w.nlfd)
		w.nlfd = -1
	}
	w.evMu.Lock()
	if w.evfd >= 0 {
		_ = unix.Close(w.evfd)
		w.evfd = -1
	}
	w.evMu.Unlock()
}

// watch wires ctx's cancellation to the eventfd, once per context.
func (w *waiter) watch(ctx context.Context) {
	done := ctx.Done()
	if done == nil || done == w.done {
		return
	}
	if w.stop != nil {
		w.stop()
	}
	w.done = done
	w.stop = context.AfterFunc(ctx, w.interrupt)
}

// drainNetlink reads every pending link message and reports whether one
// was the RTM_DELLINK of our netdev. A lost message (ENOBUFS) reports
// false; the caller probes the socket instead.
func (w *waiter) drainNetlink() (gone bool) {
	for {
		n, err := unix.Read(w.nlfd, w.nlbuf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return gone
		}
		if linkDeleted(w.nlbuf[:n], w.ifindex) {
			gone = true
		}
	}
}

// linkDeleted reports whether the netlink datagram b carries an
// RTM_DELLINK for ifindex. Every length is checked; a malformed message
// ends the scan.
func linkDeleted(b []byte, ifindex int) bool {
	const hdr = unix.SizeofNlMsghdr
	for len(b) >= hdr {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if l < hdr || l > len(b) {
			return false
		}
		if typ == unix.RTM_DELLINK && l >= hdr+unix.SizeofIfInfomsg {
			m := b[hdr:]
			family := m[0]
			index := int32(binary.NativeEndian.Uint32(m[4:8]))
			// Bridge port removals come as PF_BRIDGE RTM_DELLINK for
			// a netdev that stays; only AF_UNSPEC means unregistered.
			if family == unix.AF_UNSPEC && int(index) == ifindex {
				return true
			}
		}
		next := (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if next >= len(b) {
			return false
		}
		b = b[next:]
	}
	return false
}

// Wait blocks until Recv has frames, the context ends, the socket is
// closed (ErrClosed) or its netdev goes away (ErrDeviceGone, within
// milliseconds of the removal). It returns nil at once if frames are
// already there. While it sleeps the process uses no CPU for this socket
// apart from a probe every second. Call it from the goroutine that calls
// Recv.
func (s *Socket) Wait(ctx context.Context) error {
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	for {
		if s.closed.Load() {
			return ErrClosed
		}
		if err := s.x.err(); err != nil {
			return err
		}
		avail, cerr := s.x.rx.peek()
		if cerr != nil {
			return s.x.fail(cerr)
		}
		if avail > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.busyPoll || s.x.fill.needWakeup() {
			if err := s.kickRx(); err != nil {
				return err
			}
			if avail, _ := s.x.rx.peek(); avail > 0 {
				return nil
			}
		}
		s.w.watch(ctx)
		ms := -1 // block
		if s.w.probe > 0 {
			ms = int((s.w.probe + time.Millisecond - 1) / time.Millisecond)
		}
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left <= 0 {
				// The context's timer may not have fired yet.
				return context.DeadlineExceeded
			}
			d := int((left + time.Millisecond - 1) / time.Millisecond)
			if ms < 0 || d < ms {
				ms = d
			}
		}
		s.x.c.waits.Add(1)
		n, err := unix.Poll(s.w.fds[:], ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("afxdp: poll queue %d: %w", s.queue, err)
		}
		if s.w.fds[2].Revents != 0 {
			var v [8]byte
			_, _ = unix.Read(s.w.evfd, v[:])
		}
		if s.w.fds[1].Revents != 0 && s.w.drainNetlink() {
			return s.x.fail(ErrDeviceGone)
		}
		if (n == 0 || s.w.fds[0].Revents == 0) && s.w.probe > 0 {
			// Woken without frames: make sure the socket is still bound.
			if err := s.kickRx(); err != nil {
				return err
			}
		}
	}
}
