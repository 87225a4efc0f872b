package daemon

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/forward"
)

// fwdRunner runs one hv_sock forward: a guest service (hv_sock port ->
// local address) or a host service (local listener -> hv_sock port), from
// its start until its stop (at shutdown, or when a reload removes it).
type fwdRunner struct {
	d    *Daemon
	cfg  config.HvSock
	name string
	log  *slog.Logger
	fwd  *forward.Forwarder
	// listening is true while the listener is up (the forward is ready).
	listening atomic.Bool
	cancel    context.CancelFunc
	done      chan struct{}
}

func newFwdRunner(d *Daemon, cfg config.HvSock) *fwdRunner {
	name := cfg.Name()
	f := &fwdRunner{d: d, cfg: cfg, name: name, log: d.log.With("forward", name), done: make(chan struct{})}
	f.fwd = &forward.Forwarder{Name: name, Logger: d.log, // it adds forward=name itself
		DialTimeout: 10 * time.Second, MaxConnections: cfg.MaxConnections}
	return f
}

func (f *fwdRunner) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	f.cancel = cancel
	go func() {
		defer close(f.done)
		f.run(ctx)
	}()
}

func (f *fwdRunner) stop() {
	f.cancel()
	<-f.done
}

func (f *fwdRunner) hvConfig() hvsock.Config {
	return hvsock.Config{Root: f.d.root(), Logger: f.log}
}

// run listens and forwards until ctx ends, retrying the listener after
// failures (an hv_sock listener can fail while the host is away).
func (f *fwdRunner) run(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		ln, err := f.listen()
		if err != nil {
			f.log.Error("listen failed", "err", err, "retry_in", backoff)
			t := f.d.clk.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		f.fwd.Listener = ln
		f.fwd.Dial = f.dialer()
		f.listening.Store(true)
		f.d.kickNow()
		err = f.fwd.Serve(ctx)
		f.listening.Store(false)
		f.d.kickNow()
		if err != nil && ctx.Err() == nil {
			f.log.Warn("forward stopped", "err", err)
		}
	}
}

func (f *fwdRunner) listen() (net.Listener, error) {
	if f.cfg.Port != 0 {
		cfg := f.hvConfig()
		l, err := cfg.Listen(f.cfg.Port)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	return f.cfg.Listen.Listen()
}

func (f *fwdRunner) dialer() func(ctx context.Context) (net.Conn, error) {
	if f.cfg.Port != 0 {
		to := f.cfg.To
		return func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, to.Network, to.Address)
		}
	}
	d := hvsock.Dialer{Config: f.hvConfig(), Timeout: 5 * time.Second, Retries: 2, RetryWait: 500 * time.Millisecond}
	return func(ctx context.Context) (net.Conn, error) {
		c, err := d.Dial(ctx, f.cfg.ToPort)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}
