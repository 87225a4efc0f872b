package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/tap"
)

// The simulated-host demo: vmbusd's main job against an embedded simulated
// Hyper-V host. The host offers a synthetic NIC (bound to hv_netvsc, as on
// a fresh VM) and an hv_sock service; the daemon binds the NIC through the
// uio contract, attaches it to a TAP, forwards an hv_sock echo service,
// serves metrics, and the demo drives traffic through both and prints a
// live line. Without CAP_NET_ADMIN there are no TAPs: a traffic generator
// feeds a second NIC pair instead.

const (
	demoHostAddr = "10.99.0.1/24"
	demoGuestIP  = "10.99.0.2"
	demoHvPort   = 5000
	demoTCPPort  = 7000
	demoVFSerial = 1
)

// demoNet names what the demo creates in the system's namespaces: unique
// to the process, so that two demos, or a test beside a demo, never take
// (or delete) each other's.
type demoNet struct {
	guestNS, hostNS string // network namespaces of the guest's TAP and the host's port
	vfHost, vfGuest string // the VF stand-in's veth pair (the guest end in this namespace)
}

func newDemoNet(pid int) demoNet {
	return demoNet{guestNS: fmt.Sprintf("vmbusd-demo-%d", pid), hostNS: fmt.Sprintf("vmbusd-demo-host-%d", pid),
		vfHost: fmt.Sprintf("vdvh%d", pid), vfGuest: fmt.Sprintf("vdvf%d", pid)}
}

func runSimDemo(ctx context.Context, out io.Writer, log *slog.Logger, s demoSettings) error {
	if err := checkDemoSettings(s); err != nil {
		return err
	}
	prof, err := sim.ParseProfile(*s.profile)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if !prof.ControlSignalsHost() {
		return fmt.Errorf("%w: --profile %s: the hv_sock service needs 6.10 or newer (its channels are not monitored)", errUsage, prof)
	}
	if *s.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *s.duration)
		defer cancel()
	}
	root, err := os.MkdirTemp(shmDir(), "vmbusd-sim-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	// The simulated host's own steps (sysfs writes, negotiation) are
	// its business: they show at --log-level debug, otherwise only its
	// warnings do, so that vmbusd's lines and the banner stand out.
	simLog := log
	if !log.Enabled(ctx, slog.LevelDebug) {
		simLog = slog.New(minLevel{h: log.Handler(), min: slog.LevelWarn})
	}
	h, err := sim.New(sim.Config{Root: root, Profile: prof, Logger: simLog.With("side", "simulated host")})
	if err != nil {
		return err
	}
	defer h.Close()

	useTAP := !*s.noTAP && haveNetAdmin()
	if *s.vf && !useTAP {
		return fmt.Errorf("%w: --vf needs root (a veth pair stands in for the VF, and AF_XDP drives it) and TAP mode (not --no-tap)", errUsage)
	}
	dn := newDemoNet(os.Getpid())
	cfg := config.Default()
	cfg.Root = root
	cfg.StateDir = filepath.Join(root, "run/vmbusd")
	cfg.Control.Socket = filepath.Join(root, "run/vmbusd/control.sock")
	cfg.Metrics.Listen = freeAddr(*s.metrics)
	tru := true
	var mode config.Mode
	if err := mode.UnmarshalText([]byte(*s.mode)); err != nil {
		return fmt.Errorf("%w: --mode: %v", errUsage, err)
	}
	var traffic func(ctx context.Context, st *demoTraffic)
	var hostPort *sim.TAP
	var gen *sim.Generator
	var vf *sim.VF
	if useTAP {
		if err := ensureNetns(dn.guestNS); err != nil {
			return fmt.Errorf("create network namespace %s: %w", dn.guestNS, err)
		}
		defer netns.DeleteNamed(dn.guestNS)
		hostPort, err = sim.NewTAP(sim.TAPConfig{Netns: dn.hostNS, Name: "hostnic0", Addr: netip.MustParsePrefix(demoHostAddr)})
		if err != nil {
			return fmt.Errorf("host side TAP: %w", err)
		}
		defer hostPort.Close()
		ncfg := sim.NICConfig{Driver: sim.DriverNetvsc, IfName: "eth1", MaxQueues: *s.queues}
		if *s.vf {
			// The VF's netdev goes in this namespace, where the daemon
			// looks for it; the host steers the NIC's unicast to it once
			// the daemon switches the data path.
			ncfg.VF, ncfg.VFDelay = demoVFSerial, 100*time.Millisecond
			ncfg.VFStandIn = &sim.VFConfig{HostIf: dn.vfHost, GuestIf: dn.vfGuest}
		}
		n, err := h.AddNIC(ncfg)
		if err != nil {
			return err
		}
		vf = n.VF()
		if err := n.Attach(hostPort); err != nil {
			return err
		}
		cfg.NICs = []config.NIC{{Device: "eth1", Queues: *s.queues, Mode: mode, Attach: config.AttachTAP, TAP: "vmbus0",
			NetNS: dn.guestNS, Address: netip.MustParsePrefix(demoGuestIP + "/24"), Bind: &tru}}
		if !*s.vf {
			cfg.NICs[0].VF = config.VFOff
		}
		traffic = func(ctx context.Context, st *demoTraffic) { tcpTraffic(ctx, st, dn) }
	} else {
		gen = sim.NewGenerator(sim.GeneratorConfig{Flows: 16, Sizes: []int{64, 1514}, Rate: 50000})
		sink := sim.NewGenerator(sim.GeneratorConfig{Idle: true})
		a, err := h.AddNIC(sim.NICConfig{Driver: sim.DriverNetvsc, IfName: "eth1", MaxQueues: *s.queues})
		if err != nil {
			return err
		}
		b, err := h.AddNIC(sim.NICConfig{Driver: sim.DriverNetvsc, IfName: "eth2", MaxQueues: *s.queues})
		if err != nil {
			return err
		}
		a.Attach(gen)
		b.Attach(sink)
		cfg.NICs = []config.NIC{
			{Device: "eth1", Queues: *s.queues, Mode: mode, Attach: config.AttachForward, Peer: "eth2", Bind: &tru, VF: config.VFOff},
			{Device: "eth2", Queues: *s.queues, Mode: mode, Attach: config.AttachForward, Peer: "eth1", Bind: &tru, VF: config.VFOff},
		}
	}

	// hv_sock: the host's front end, a guest echo service behind a forward.
	hv, err := h.StartHvSock(sim.HvSockConfig{SocketBase: filepath.Join(root, "hvsock")})
	if err != nil {
		return err
	}
	defer hv.Close()
	echoPath := filepath.Join(root, "echo.sock")
	echoLn, err := net.Listen("unix", echoPath)
	if err != nil {
		return err
	}
	defer echoLn.Close()
	go serveEcho(echoLn)
	cfg.HvSock = []config.HvSock{{Port: demoHvPort, To: config.Addr{Network: "unix", Address: echoPath}}}

	d, err := daemon.New(daemon.Options{Config: cfg, Logger: log.With("side", "vmbusd")})
	if err != nil {
		return err
	}
	dctx, stopDaemon := context.WithCancel(context.Background())
	defer stopDaemon()
	derr := make(chan error, 1)
	go func() { derr <- d.Run(dctx) }()
	select {
	case <-d.Ready():
	case err := <-derr:
		return err
	case <-ctx.Done():
		stopDaemon()
		return <-derr
	}

	fmt.Fprintf(out, "vmbusd is running against a simulated Hyper-V host (kernel profile %s) under %s\n", prof, root)
	fmt.Fprintf(out, "  metrics:  http://%s/metrics   (also /healthz, /readyz)\n", d.MetricsAddr())
	fmt.Fprintf(out, "  control:  vmbusd status --control %s   (stats, capture -i eth1 -w - | tshark -r -)\n", cfg.Control.Socket)
	if useTAP {
		fmt.Fprintf(out, "  NIC eth1: bound to uio_hv_generic, attached to TAP vmbus0 (%s/24) in netns %s;\n", demoGuestIP, dn.guestNS)
		fmt.Fprintf(out, "            the simulated host's side is %s in netns %s:  ip netns exec %s ping %s\n", demoHostAddr, dn.hostNS, dn.hostNS, demoGuestIP)
	} else {
		fmt.Fprintf(out, "  NICs eth1 <-> eth2: forwarded by vmbusd; a traffic generator feeds eth1 (no CAP_NET_ADMIN for TAPs%s)\n",
			map[bool]string{true: ", --no-tap", false: ""}[*s.noTAP])
	}
	fmt.Fprintf(out, "  hv_sock:  guest service on port %d (an echo server); host side: socat - UNIX-CONNECT:%s, then CONNECT %d\n",
		demoHvPort, filepath.Join(root, "hvsock"), demoHvPort)
	if vf != nil {
		when := "on SIGUSR2 (kill -USR2 " + fmt.Sprint(os.Getpid()) + ")"
		if *s.vfEvery > 0 {
			when = fmt.Sprintf("every %v, and %s", *s.vfEvery, when)
		}
		fmt.Fprintf(out, "  VF:       a veth pair stands in for eth1's SR-IOV VF (%s here, %s on the host's side, PCI %s under the root);\n",
			dn.vfGuest, dn.vfHost, vf.BDF())
		fmt.Fprintf(out, "            vmbusd pairs it and moves the traffic to it; the host services it (away, then back) %s\n", when)
	}
	fmt.Fprintln(out, "  Ctrl-C stops vmbusd, which gives the NICs back to hv_netvsc.")

	st := &demoTraffic{}
	tctx, stopTraffic := context.WithCancel(ctx)
	var twg sync.WaitGroup
	if traffic != nil {
		twg.Add(1)
		go func() {
			defer twg.Done()
			traffic(tctx, st)
		}()
	}
	twg.Add(1)
	go func() {
		defer twg.Done()
		hvTraffic(tctx, hv, st)
	}()
	// Host servicing of the VF, periodic and on SIGUSR2: the VF goes
	// away (the host switches the guest to synthetic, withdraws the
	// association, removes it), or comes back and is offered again.
	notes := make(chan string, 4)
	if vf != nil {
		usr2 := make(chan os.Signal, 1)
		signal.Notify(usr2, syscall.SIGUSR2)
		defer signal.Stop(usr2)
		twg.Add(1)
		go func() {
			defer twg.Done()
			serviceVF(tctx, vf, usr2, *s.vfEvery, notes)
		}()
	}

	tty := isTerminal(out)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prev := takeDemoSample(d, st)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-derr:
			stopTraffic()
			twg.Wait()
			return fmt.Errorf("vmbusd stopped: %v", err)
		case n := <-notes:
			if tty {
				fmt.Fprintf(out, "\r%s\033[K\n", n)
			} else {
				fmt.Fprintln(out, n)
			}
		case <-tick.C:
			cur := takeDemoSample(d, st)
			line := cur.line(prev, useTAP, vf != nil)
			prev = cur
			if tty {
				fmt.Fprintf(out, "\r%s\033[K", line)
			} else {
				fmt.Fprintln(out, line)
			}
		}
	}
	if tty {
		fmt.Fprintln(out)
	}
	stopTraffic()
	twg.Wait()
	final := takeDemoSample(d, st)
	stopDaemon()
	if err := <-derr; err != nil {
		return err
	}
	fmt.Fprintf(out, "stopped: %d frames received, %d sent by the NICs; %d TCP bytes and %d hv_sock bytes echoed and verified (%d errors)\n",
		final.rxPkts, final.txPkts, st.tcpBytes.Load(), st.hvBytes.Load(), st.errors.Load())
	if vf != nil {
		fmt.Fprintf(out, "  data path: synthetic rx %d tx %d frames, vf rx %d tx %d frames; %d switches (%s)\n",
			final.synRx, final.synTx, final.vfRx, final.vfTx, final.switches, final.reasons)
	}
	for _, n := range cfg.NICs {
		for _, dev := range h.Devices() {
			if dev.IfName() == n.Device || dev.Instance().String() == n.Device {
				fmt.Fprintf(out, "  %s is back with %s\n", n.Device, orNone(dev.Driver()))
			}
		}
	}
	var total uint64
	for _, v := range h.Violations() {
		total += v
	}
	fmt.Fprintf(out, "  guest protocol violations seen by the simulated host: %d\n", total)
	if n := st.errors.Load(); n > 0 {
		return fmt.Errorf("%d traffic verification errors", n)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "no driver"
	}
	return s
}

// demoTraffic counts what the demo's own traffic moved and verified.
type demoTraffic struct {
	tcpBytes, hvBytes, errors atomic.Uint64
}

type demoSample struct {
	at               time.Time
	rxPkts, txPkts   uint64
	rxBytes, txBytes uint64
	tcp, hv          uint64
	cpu              int64
	// The data path: per-path frames, where transmit goes, the VF's
	// state, switches.
	synRx, synTx, vfRx, vfTx uint64
	path, vfState            string
	switches                 uint64
	reasons                  string
}

func takeDemoSample(d *daemon.Daemon, st *demoTraffic) demoSample {
	s := demoSample{at: time.Now(), tcp: st.tcpBytes.Load(), hv: st.hvBytes.Load(), cpu: cpuTime()}
	for _, n := range d.Stats().NICs {
		p := n.VF.Paths
		s.rxPkts += p.Synthetic.RxPackets + p.VF.RxPackets
		s.txPkts += p.Synthetic.TxPackets + p.VF.TxPackets
		s.rxBytes += p.Synthetic.RxBytes + p.VF.RxBytes
		s.txBytes += p.Synthetic.TxBytes + p.VF.TxBytes
		s.synRx += p.Synthetic.RxPackets
		s.synTx += p.Synthetic.TxPackets
		s.vfRx += p.VF.RxPackets
		s.vfTx += p.VF.TxPackets
		if n.VF.Mode != "off" {
			s.path, s.vfState, s.switches = n.VF.Path, n.VF.State, n.VF.Switches
			var rs []string
			for r, c := range n.VF.SwitchReasons {
				if c > 0 {
					rs = append(rs, fmt.Sprintf("%s %d", r, c))
				}
			}
			slices.Sort(rs)
			s.reasons = strings.Join(rs, ", ")
		}
	}
	return s
}

func (s demoSample) line(p demoSample, tcp, vf bool) string {
	dt := s.at.Sub(p.at).Seconds()
	rate := func(a, b uint64) float64 { return float64(a-b) / dt }
	tcpCol := "TCP echo    n/a   "
	if tcp {
		tcpCol = fmt.Sprintf("TCP echo %6.1f MB/s", rate(s.tcp, p.tcp)/1e6)
	}
	line := fmt.Sprintf("NIC rx %7.0f pkt/s %7.1f Mb/s  tx %7.0f pkt/s %7.1f Mb/s | %s | hv_sock echo %6.1f MB/s | CPU %3.0f%%",
		rate(s.rxPkts, p.rxPkts), rate(s.rxBytes, p.rxBytes)*8/1e6, rate(s.txPkts, p.txPkts), rate(s.txBytes, p.txBytes)*8/1e6,
		tcpCol, rate(s.hv, p.hv)/1e6, float64(s.cpu-p.cpu)/1e9/dt*100)
	if vf {
		line += fmt.Sprintf(" | path %-9s (VF %-9s) synthetic rx %6.0f tx %6.0f, vf rx %6.0f tx %6.0f pkt/s",
			dash(s.path), s.vfState, rate(s.synRx, p.synRx), rate(s.synTx, p.synTx), rate(s.vfRx, p.vfRx), rate(s.vfTx, p.vfTx))
	}
	return line
}

// serviceVF plays the host's servicing of the VF, every `every` (0:
// never) and whenever sig fires: a present VF is taken away gracefully,
// an absent one comes back. Each step is reported on notes.
func serviceVF(ctx context.Context, vf *sim.VF, sig <-chan os.Signal, every time.Duration, notes chan<- string) {
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		why := "periodic"
		select {
		case <-ctx.Done():
			return
		case <-sig:
			why = "SIGUSR2"
		case <-tick:
		}
		away := vf.Present()
		msg := "VF servicing (" + why + "): the host takes the VF away (switch to synthetic, association withdrawn, VF removed)"
		if !away {
			msg = "VF servicing (" + why + "): the VF is back and offered again"
		}
		select {
		case notes <- msg:
		case <-ctx.Done():
			return
		}
		if _, err := vf.Toggle(ctx); err != nil && ctx.Err() == nil {
			select {
			case notes <- "VF servicing failed: " + err.Error():
			case <-ctx.Done():
				return
			}
		}
	}
}

// tcpTraffic runs an echo server in the guest's namespace (behind vmbusd's
// TAP) and a client in the host's namespace (behind the simulated host's
// port), and streams verified data through the NIC both ways.
func tcpTraffic(ctx context.Context, st *demoTraffic, dn demoNet) {
	var ln net.Listener
	err := tap.InNetns(dn.guestNS, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(demoGuestIP, fmt.Sprint(demoTCPPort)))
		return err
	})
	if err != nil {
		st.errors.Add(1)
		return
	}
	defer ln.Close()
	go serveEcho(ln)
	for ctx.Err() == nil {
		var c net.Conn
		err := tap.InNetns(dn.hostNS, func() (err error) {
			d := net.Dialer{Timeout: 2 * time.Second}
			c, err = d.DialContext(ctx, "tcp", net.JoinHostPort(demoGuestIP, fmt.Sprint(demoTCPPort)))
			return err
		})
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		echoThrough(ctx, c, &st.tcpBytes, &st.errors, 0)
		c.Close()
	}
}

// hvTraffic connects from the simulated host to the guest's hv_sock echo
// service again and again, verifying every byte.
func hvTraffic(ctx context.Context, hv *sim.HvSock, st *demoTraffic) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := hv.Connect(cctx, demoHvPort)
		cancel()
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		// Paced (a 64 KiB block every 5 ms, ~13 MB/s) so that it shows
		// the service working without taking the CPU from the NIC.
		echoThrough(lctx, c, &st.hvBytes, &st.errors, 5*time.Millisecond)
		lcancel()
		c.CloseWrite()
		c.Close()
	}
}

// echoThrough writes random blocks on c and checks each comes back, until
// ctx ends or the connection fails, pausing pace between blocks.
func echoThrough(ctx context.Context, c net.Conn, n, errs *atomic.Uint64, pace time.Duration) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	out := make([]byte, 64<<10)
	in := make([]byte, len(out))
	for ctx.Err() == nil {
		rand.Read(out)
		wdone := make(chan error, 1)
		go func() {
			_, err := c.Write(out)
			wdone <- err
		}()
		if _, err := io.ReadFull(c, in); err != nil {
			if ctx.Err() == nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				errs.Add(1)
			}
			<-wdone
			return
		}
		if err := <-wdone; err != nil {
			return
		}
		if !bytes.Equal(in, out) {
			errs.Add(1)
			return
		}
		n.Add(uint64(len(out)))
		if pace > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pace):
			}
		}
	}
}

func serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// haveNetAdmin reports whether this process may create network devices
// and namespaces (CAP_NET_ADMIN and CAP_SYS_ADMIN in its effective set).
func haveNetAdmin() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			var caps uint64
			fmt.Sscanf(strings.TrimSpace(v), "%x", &caps)
			return caps&(1<<unix.CAP_NET_ADMIN) != 0 && caps&(1<<unix.CAP_SYS_ADMIN) != 0
		}
	}
	return false
}

// ensureNetns creates a named network namespace if it does not exist,
// leaving the calling thread where it was.
func ensureNetns(name string) error {
	if h, err := netns.GetFromName(name); err == nil {
		h.Close()
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		// The thread ends up in the new namespace; it is left locked and
		// dies with the goroutine.
		lockOSThread()
		h, err := netns.NewNamed(name)
		if err == nil {
			h.Close()
		}
		errc <- err
	}()
	return <-errc
}

// freeAddr returns addr if it can be listened on now, else a free port on
// the same host.
func freeAddr(addr string) string {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		return addr
	}
	host, _, _ := net.SplitHostPort(addr)
	if ln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err == nil {
		a := ln.Addr().String()
		ln.Close()
		return a
	}
	return addr
}

// minLevel passes on only records at min or above.
type minLevel struct {
	h   slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.h.Enabled(ctx, l)
}
func (m minLevel) Handle(ctx context.Context, r slog.Record) error { return m.h.Handle(ctx, r) }
func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h: m.h.WithAttrs(as), min: m.min}
}
func (m minLevel) WithGroup(g string) slog.Handler { return minLevel{h: m.h.WithGroup(g), min: m.min} }
