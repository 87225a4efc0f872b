package hvsock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/hvsock/wire"
)

// Dialer connects to services on the host. The zero value dials with the
// default Config, waits DefaultConnectTimeout per attempt and does not
// retry. A Dialer is safe for concurrent use; it is not modified.
type Dialer struct {
	Config Config
	// Timeout bounds one attempt: on the VMBus transport the wait for the
	// host's offer and the open, timed by Config.Clock; on the kernel
	// transport the connect, by a socket deadline (wall-clock time).
	// 0 means DefaultConnectTimeout.
	Timeout time.Duration
	// Retries is how many more attempts follow one that was refused or
	// timed out (go-winio HvsockDialer semantics).
	Retries int
	// RetryWait is the pause between attempts, timed by Config.Clock.
	RetryWait time.Duration
}

// Dial connects to port on the host with the default Dialer.
func Dial(ctx context.Context, port uint32) (*Conn, error) {
	var d Dialer
	return d.Dial(ctx, port)
}

// Dial connects to port on the host with c's settings.
func (c *Config) Dial(ctx context.Context, port uint32) (*Conn, error) {
	d := Dialer{Config: *c}
	return d.Dial(ctx, port)
}

// Dial connects to port on the host (CIDHost). Errors are *net.OpError:
// syscall.ECONNREFUSED when the host refused, syscall.ETIMEDOUT when no
// offer came within the timeout, or ctx's error.
func (d *Dialer) Dial(ctx context.Context, port uint32) (*Conn, error) {
	cfg := d.Config
	tr := cfg.transport()
	remote := &Addr{ContextID: CIDHost, Port: port, Transport: tr}
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: remote.Network(), Addr: remote, Err: err}
	}
	if err := cfg.check(); err != nil {
		return nil, opErr(err)
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	for attempt := 0; ; attempt++ {
		var c *Conn
		var err error
		if tr == TransportKernel {
			c, err = dialKernel(ctx, &cfg, port, timeout)
		} else {
			c, err = dialVMBus(ctx, &cfg, port, timeout)
		}
		if err == nil {
			return c, nil
		}
		if attempt >= d.Retries || !retryable(err) || ctx.Err() != nil {
			return nil, opErr(err)
		}
		if d.RetryWait > 0 {
			t := clock.Or(cfg.Clock).NewTimer(d.RetryWait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, opErr(ctx.Err())
			case <-t.C():
			}
		}
	}
}

// retryable reports an error worth another attempt: refused, timed out,
// reset during the open, unreachable.
func retryable(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ETIMEDOUT, syscall.ECONNRESET, syscall.ENETUNREACH, syscall.EHOSTUNREACH} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// dialVMBus is a guest-initiated connect on the VMBus transport
// (docs/protocol/hvsock.md §1.2, "Numbered sequences"): bind an ephemeral local port L, send
// TL_CONNECT_REQUEST(endpoint = ServiceID(L), service = ServiceID(port)),
// then wait for the host's offer of a channel with exactly that interface
// and instance (is_for_guest_accept 0), or a TL_CONNECT_RESULT refusing it,
// or the timeout; open the channel with our ring sizes. Unlike Linux, a
// refusal ends the wait at once (ECONNREFUSED instead of a timeout).
func dialVMBus(ctx context.Context, cfg *Config, port uint32, timeout time.Duration) (*Conn, error) {
	root := cfg.root()
	tlPath := filepath.Join(root, wire.ConnectNode)
	if _, err := os.Stat(tlPath); err != nil {
		return nil, fmt.Errorf("hvsock: no hv_sock connect node under %s: %w", root, err)
	}
	local, release, err := ephemeralPort(root)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			release()
		}
	}()
	req := wire.ConnectRequest{Endpoint: ServiceID(local), Service: ServiceID(port)}

	found := make(chan offer, 1)
	unwatch := watch(root, cfg.logger(), &subscriber{
		match: func(o offer) bool {
			return !o.forGuestAccept && o.instance == req.Endpoint && o.class == req.Service
		},
		deliver: func(o offer) {
			select {
			case found <- o:
			default:
			}
		},
	})
	defer unwatch()

	tctx, cancel := clock.WithTimeout(ctx, cfg.Clock, timeout)
	defer cancel()
	var nd net.Dialer
	nc, err := nd.DialContext(tctx, "unixpacket", tlPath)
	if err != nil {
		if tctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("hvsock: connect request: %w", syscall.ETIMEDOUT)
		}
		return nil, fmt.Errorf("hvsock: connect request: %w", err)
	}
	tl := nc.(*net.UnixConn)
	defer tl.Close()
	if _, err := tl.Write(req.Marshal()); err != nil {
		return nil, fmt.Errorf("hvsock: connect request: %w", err)
	}
	refused := make(chan error, 1)
	go readTLResult(tl, req, refused)

	var o offer
	select {
	case o = <-found:
	case err := <-refused:
		return nil, err
	case <-tctx.Done():
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, syscall.ETIMEDOUT
	}
	snd, rcv := cfg.RingSizes()
	h, err := openOffer(tctx, cfg, o, snd, rcv)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The host did not accept our open (its service could not be
		// reached after all): refused.
		return nil, fmt.Errorf("%w (open: %v)", syscall.ECONNREFUSED, err)
	}
	s := newVMBusStream(h, o.instance.String(), cfg, snd, rcv)
	s.release = release
	ok = true
	cfg.logger().Debug("hvsock: connected", "port", port, "local_port", local, "device", o.instance.String())
	return &Conn{s: s,
		local:  &Addr{ContextID: CIDAny, Port: local, Transport: TransportVMBus},
		remote: &Addr{ContextID: CIDHost, Port: port, Transport: TransportVMBus}}, nil
}

// readTLResult waits for the host's TL_CONNECT_RESULT on the request's
// socket and reports a refusal of req; anything else is ignored (a host
// never answers success with a result). It returns when the socket closes.
func readTLResult(tl *net.UnixConn, req wire.ConnectRequest, refused chan<- error) {
	buf := make([]byte, 2*wire.ConnectResultLen)
	for {
		n, err := tl.Read(buf)
		if err != nil || n == 0 {
			return
		}
		r, err := wire.ParseConnectResult(buf[:n])
		if err != nil || r.Endpoint != req.Endpoint || r.Service != req.Service || r.Status >= 0 {
			continue
		}
		refused <- fmt.Errorf("%w (host status %#x)", syscall.ECONNREFUSED, uint32(r.Status))
		return
	}
}
