package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/internal/echo"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

func runRingDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet(out, "ringdemo", "ringdemo [flags]")
	profile := fs.String("profile", sim.DefaultProfile.String(), "simulated kernel profile: legacy, 6.10, 6.16, 6.18")
	size := fs.Int("size", 1024, "payload bytes per packet (multiple of 8)")
	window := fs.Int("window", 256, "packets in flight")
	mode := fs.String("mode", "interrupt", "guest wait mode: interrupt (sleep on the uio fd when idle) or poll (spin)")
	duration := fs.Duration("duration", 0, "stop after this long (0: until Ctrl-C)")
	mkLog := logFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := mkLog(os.Stderr)
	if err != nil {
		return err
	}
	prof, err := sim.ParseProfile(*profile)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *size <= 0 || *size%8 != 0 || *size > 65536 {
		return fmt.Errorf("%w: --size %d: want a multiple of 8 up to 65536", errUsage, *size)
	}
	var wm vmbus.WaitMode
	switch *mode {
	case "interrupt":
		wm = vmbus.WaitInterrupt
	case "poll":
		wm = vmbus.WaitPoll
	default:
		return fmt.Errorf("%w: --mode %q: want interrupt or poll", errUsage, *mode)
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}

	root, err := os.MkdirTemp(shmDir(), "vmbusd-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	h, err := sim.New(sim.Config{Root: root, Profile: prof, Logger: log})
	if err != nil {
		return err
	}
	defer h.Close()
	d, err := h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest})
	if err != nil {
		return err
	}
	dev, err := vmbus.LookupDevice(root, d.Instance())
	if err != nil {
		return err
	}
	hd, err := vmbus.Open(dev, vmbus.Options{Mode: wm, Logger: log})
	if err != nil {
		return err
	}
	defer hd.Close()
	fmt.Fprintf(out, "simulated host under %s (kernel profile %s); guest bound %s via %s\n",
		root, prof, dev.Instance, dev.UIO)
	fmt.Fprintf(out, "echoing %d-byte packets, %d in flight, guest %s mode; Ctrl-C stops\n", *size, *window, wm)

	p := &echo.Pump{Size: *size, Window: *window}
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx, hd.Primary(), 0) }()

	tty := isTerminal(out)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last liveSample
	last.take(p, hd)
	for {
		select {
		case err := <-errc:
			if tty {
				fmt.Fprintln(out)
			}
			st := hd.Primary().Stats()
			fmt.Fprintf(out, "done: %d packets echoed and verified, %d signals to the host, %d interrupts, %d missed wake-ups, guest violations %d\n",
				p.Echoed.Load(), st.TxSignals+st.RxSignals, hd.Interrupts(), st.MissedWakeups, total(h.Violations()))
			return err
		case <-tick.C:
			var cur liveSample
			cur.take(p, hd)
			line := cur.line(last)
			last = cur
			if tty {
				fmt.Fprintf(out, "\r%s\033[K", line)
			} else {
				fmt.Fprintln(out, line)
			}
		}
	}
}

type liveSample struct {
	at               time.Time
	echoed, bytes    uint64
	interrupts, cpuN int64
	stats            vmbus.ChannelStats
}

func (s *liveSample) take(p *echo.Pump, hd *vmbus.Handle) {
	s.at = time.Now()
	s.echoed = p.Echoed.Load()
	s.bytes = p.Bytes.Load()
	s.stats = hd.Primary().Stats()
	s.interrupts = int64(hd.Interrupts())
	s.cpuN = cpuTime()
}

func (s *liveSample) line(prev liveSample) string {
	dt := s.at.Sub(prev.at).Seconds()
	pk := float64(s.echoed - prev.echoed)
	sig := float64(s.stats.TxSignals + s.stats.RxSignals - prev.stats.TxSignals - prev.stats.RxSignals)
	irq := float64(s.interrupts - prev.interrupts)
	perPkt := func(v float64) float64 {
		if pk == 0 {
			return 0
		}
		return v / pk
	}
	cpu := float64(s.cpuN-prev.cpuN) / 1e9 / dt * 100
	return fmt.Sprintf("echo %8.0f pkt/s %8.1f MB/s | signals/pkt %.4f interrupts/pkt %.4f | missed wake-ups %d | process CPU %3.0f%%",
		pk/dt, float64(s.bytes-prev.bytes)/dt/1e6, perPkt(sig), perPkt(irq), s.stats.MissedWakeups, cpu)
}

func total(v map[string]uint64) uint64 {
	var t uint64
	for _, n := range v {
		t += n
	}
	return t
}

// cpuTime returns this process's user+system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// shmDir is where simulated roots go: tmpfs, as docs/uio-contract.md §1.1 asks.
func shmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}
