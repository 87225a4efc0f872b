package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

func main() {
	tables := flag.String("table", "all", "tables to print: sendloop, ringsize, vsunix or all (comma-separated)")
	iters := flag.Int("iterations", 10, "iterations per cell (the seeds used 10)")
	sendSize := flag.String("sendloop-size", "10G", "bytes per sendloop iteration (seed 000: 10 GB)")
	ringSize := flag.String("ringsize-size", "1G", "bytes per ringsize cell (seed 002: 1 GB)")
	unixSize := flag.String("vsunix-size", "1G", "bytes per vsunix cell")
	unixRings := flag.String("vsunix-rings", "default,256K", "ring sizes for the vsunix table (both directions; header page included)")
	unixWrites := flag.String("vsunix-writes", "128,4K,64K", "write sizes for the vsunix table")
	chunk := flag.Int("chunk", 0, "payload per guest packet (0: hvsock's default, sized to the send ring: hvsock.AutoChunk)")
	mode := flag.String("mode", "interrupt", "how the guest waits for the host: interrupt or poll")
	rings := flag.String("rings", "default,16K,32K,64K,128K,256K", "ring sizes for the ringsize table (header page included; 16K is clamped to the 24K minimum)")
	writes := flag.String("writes", "128,1K,4K,64K", "write sizes for the ringsize table")
	hostChunk := flag.Int("host-chunk", 0, "payload per host packet (0: the simulator's default, OpenVMM's 2048)")
	root := flag.String("root", "", "simulated system root (default: a fresh directory on /dev/shm)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("hvsockbench: ")

	b, err := newBench(*root, *hostChunk, *chunk)
	if *mode == "poll" {
		b.mode = vmbus.WaitPoll
	}
	if err != nil {
		log.Fatal(err)
	}
	defer b.close()
	fmt.Printf("# hvsockbench: %s, %d CPUs, GOMAXPROCS %d, %s, load average %s; simulated host in this process (profile %s, host chunk %d B); guest chunk %s, waits by %s; default rings %s; %d iterations per cell\n\n",
		runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel(), loadAvg(), sim.DefaultProfile, b.hv.Config().ChunkSize,
		b.chunk(), b.mode, b.defaultRings(), *iters)
	for _, t := range strings.Split(*tables, ",") {
		var err error
		switch strings.TrimSpace(t) {
		case "all":
			if err = b.sendLoop(mustSize(*sendSize), *iters); err == nil {
				if err = b.ringSize(mustSize(*ringSize), *iters, mustSizes(*rings), mustSizes(*writes)); err == nil {
					err = b.vsUnix(mustSize(*unixSize), *iters, mustSizes(*unixRings), mustSizes(*unixWrites))
				}
			}
		case "sendloop":
			err = b.sendLoop(mustSize(*sendSize), *iters)
		case "ringsize":
			err = b.ringSize(mustSize(*ringSize), *iters, mustSizes(*rings), mustSizes(*writes))
		case "vsunix":
			err = b.vsUnix(mustSize(*unixSize), *iters, mustSizes(*unixRings), mustSizes(*unixWrites))
		default:
			err = fmt.Errorf("unknown table %q", t)
		}
		if err != nil {
			log.Fatal(err)
		}
	}
}

type bench struct {
	root       string
	cleanup    bool
	host       *sim.Host
	hv         *sim.HvSock
	port       uint32
	guestChunk int
	mode       vmbus.WaitMode
}

func newBench(root string, hostChunk, guestChunk int) (*bench, error) {
	b := &bench{root: root, port: 20000, guestChunk: guestChunk}
	if root == "" {
		base := "/dev/shm"
		if st, err := os.Stat(base); err != nil || !st.IsDir() {
			base = ""
		}
		d, err := os.MkdirTemp(base, "hvsockbench-")
		if err != nil {
			return nil, err
		}
		b.root, b.cleanup = d, true
	}
	h, err := sim.New(sim.Config{Root: b.root, Profile: sim.DefaultProfile})
	if err != nil {
		return nil, err
	}
	hv, err := h.StartHvSock(sim.HvSockConfig{ChunkSize: hostChunk})
	if err != nil {
		h.Close()
		return nil, err
	}
	b.host, b.hv = h, hv
	return b, nil
}

func (b *bench) close() {
	b.hv.Close()
	b.host.Close()
	if b.cleanup {
		os.RemoveAll(b.root)
	}
}

// result is one measured transfer.
type result struct {
	mbps float64 // MB/s (10^6)
	cpu  float64 // CPU seconds
	sigs uint64  // guest signals to the host and wake-ups, for hv_sock
	wake uint64
}

// pair connects a guest to a fresh host listener.
func (b *bench) pair(cfg hvsock.Config) (*hvsock.Conn, *sim.HvSockConn, error) {
	b.port++
	l, err := b.hv.Listen(b.port)
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	cfg.Transport, cfg.Root, cfg.ChunkSize, cfg.Mode = hvsock.TransportVMBus, b.root, b.guestChunk, b.mode
	type acc struct {
		c   *sim.HvSockConn
		err error
	}
	ch := make(chan acc, 1)
	go func() {
		c, err := l.AcceptHvSock()
		ch <- acc{c, err}
	}()
	g, err := cfg.Dial(context.Background(), b.port)
	if err != nil {
		return nil, nil, err
	}
	a := <-ch
	if a.err != nil {
		g.Close()
		return nil, nil, a.err
	}
	return g, a.c, nil
}

// transfer writes total bytes to w in writes of size (each handed to
// Write in pieces of at most split bytes when split > 0) while r is read
// to the count with a 64 KiB buffer.
func transfer(w io.Writer, r io.Reader, total int64, size, split int) (result, error) {
	buf := make([]byte, size)
	done := make(chan error, 1)
	runtime.GC()
	cpu0, t0 := cpuTime(), time.Now()
	go func() {
		rb := make([]byte, 64<<10)
		var got int64
		for got < total {
			n, err := r.Read(rb)
			got += int64(n)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for sent := int64(0); sent < total; {
		k := int(min(int64(size), total-sent))
		if split > 0 {
			for off := 0; off < k; off += split {
				if _, err := w.Write(buf[off:min(off+split, k)]); err != nil {
					return result{}, err
				}
			}
		} else if _, err := w.Write(buf[:k]); err != nil {
			return result{}, err
		}
		sent += int64(k)
	}
	if err := <-done; err != nil {
		return result{}, err
	}
	el := time.Since(t0)
	return result{mbps: float64(total) / 1e6 / el.Seconds(), cpu: (cpuTime() - cpu0).Seconds()}, nil
}

// run measures one hv_sock transfer on a fresh connection.
func (b *bench) run(cfg hvsock.Config, g2h bool, total int64, size, split int) (result, error) {
	g, h, err := b.pair(cfg)
	if err != nil {
		return result{}, err
	}
	defer func() {
		h.Close()
		g.Close()
	}()
	before := g.Stats()
	var r result
	if g2h {
		r, err = transfer(g, h, total, size, split)
	} else {
		r, err = transfer(h, g, total, size, split)
	}
	after := g.Stats()
	r.sigs = after.Channel.TxSignals + after.Channel.RxSignals - before.Channel.TxSignals - before.Channel.RxSignals
	r.wake = after.Channel.Wakeups - before.Channel.Wakeups
	return r, err
}

func (b *bench) sendLoop(total int64, iters int) error {
	fmt.Printf("## Send loop (seed 000)\n\nTotal data transfer: %s per iteration; guest writer, host reader; write size 64 KiB; 24 KiB rings (Linux's default, as in the seed); %d iterations.\n", sizeString(total), iters)
	fmt.Printf("CPU = process user+sys seconds for the whole transfer (guest, simulated host and reader).\n")
	fmt.Printf("before = one chunk per Write call (pre-2019 hvs_stream_enqueue); after = the send loop.\n\n")
	modes := []struct {
		name  string
		split int
	}{{"one chunk per call (before)", wire.DefaultChunk}, {"send loop (after)", 0}}
	var cols [2][]result
	for i := range iters {
		for m, mode := range modes {
			cfg := hvsock.Config{SendRingSize: hvsock.MinRingSize, RecvRingSize: hvsock.MinRingSize}
			r, err := b.run(cfg, true, total, 64<<10, mode.split)
			if err != nil {
				return fmt.Errorf("sendloop %s: %w", mode.name, err)
			}
			cols[m] = append(cols[m], r)
			fmt.Fprintf(os.Stderr, "sendloop %d/%d %s: %.0f MB/s, %.3f CPU s, %.1f signals/GB, %.1f wake-ups/GB\n", i+1, iters, mode.name,
				r.mbps, r.cpu, float64(r.sigs)/(float64(total)/1e9), float64(r.wake)/(float64(total)/1e9))
		}
	}
	fmt.Printf("|        | %-15s | %-15s | %-15s | %-15s |\n", "before: MB/s", "before: CPU s", "after: MB/s", "after: CPU s")
	fmt.Printf("|--------|-----------------|-----------------|-----------------|-----------------|\n")
	for _, st := range []string{"Min", "Max", "Avg", "Median"} {
		fmt.Printf("| %-6s |", st)
		for m := range modes {
			fmt.Printf(" %15.0f | %15.3f |", stat(st, mbpsOf(cols[m])), stat(st, cpuOf(cols[m])))
		}
		fmt.Println()
	}
	fmt.Println()
	return nil
}

func (b *bench) ringSize(total int64, iters int, rings, writes []int64) error {
	fmt.Printf("## Ring sizes (seed 002, second patch)\n\nTotal data transfer: %s per cell; single writer, single reader; %d iterations; throughput in MB/s, min/max/avg/median.\n", sizeString(total), iters)
	fmt.Printf("Ring sizes include the 4 KiB header page and are clamped to 24..256 KiB (16K reads as 24K). Seed rows were SO_SNDBUF values, which Linux doubles: seed \"16KB\" = 32 KiB ring, \"32KB\" = 64 KiB, \"64KB\" = 128 KiB.\n\n")
	for _, dir := range []struct {
		g2h   bool
		title string
		knob  string
	}{{true, "Guest writer -> host reader (send ring set)", "send ring"}, {false, "Host writer -> guest reader (receive ring set)", "recv ring"}} {
		fmt.Printf("%s:\n\n| %-14s |", dir.title, dir.knob)
		for _, w := range writes {
			fmt.Printf(" %-23s |", sizeString(w))
		}
		fmt.Printf("\n|%s|", strings.Repeat("-", 16))
		for range writes {
			fmt.Printf("%s|", strings.Repeat("-", 25))
		}
		fmt.Println()
		for _, ring := range rings {
			cfg := hvsock.Config{}
			if dir.g2h {
				cfg.SendRingSize = int(ring)
			} else {
				cfg.RecvRingSize = int(ring)
			}
			label := fmt.Sprintf("default (%s)", b.ringLabel(ring))
			if ring > 0 {
				label = fmt.Sprintf("%s (%s)", sizeString(ring), b.ringLabel(ring))
			}
			fmt.Printf("| %-14s |", label)
			for _, w := range writes {
				var rs []result
				for range iters {
					r, err := b.run(cfg, dir.g2h, total, int(w), 0)
					if err != nil {
						return fmt.Errorf("ringsize %s ring %d write %d: %w", dir.knob, ring, w, err)
					}
					rs = append(rs, r)
				}
				m := mbpsOf(rs)
				fmt.Printf(" %-23s |", fmt.Sprintf("%.0f/%.0f/%.0f/%.0f", stat("Min", m), stat("Max", m), stat("Avg", m), stat("Median", m)))
			}
			fmt.Println()
		}
		fmt.Println()
	}
	return nil
}

func (b *bench) vsUnix(total int64, iters int, rings, writes []int64) error {
	fmt.Printf("## hv_sock vs a Unix stream socket pair\n\n")
	fmt.Printf("Total data transfer: %s per cell; guest writer, host reader (hv_sock) and one writer, one reader (Unix), same process; %d iterations, hv_sock then Unix in each. ", sizeString(total), iters)
	fmt.Printf("MB/s and CPU s/GB are medians; CPU = process user+sys seconds (hv_sock: guest, simulated host and reader). ")
	fmt.Printf("ratio = hv_sock MB/s / Unix MB/s and CPU ratio = hv_sock CPU s/GB / Unix CPU s/GB, taken per iteration: median (min-max). Throughput ratio above 1 and CPU ratio below 1 favour hv_sock.\n\n")
	fmt.Printf("| write  | rings          | hv_sock MB/s | unix MB/s | ratio               | hv_sock CPU s/GB | unix CPU s/GB | CPU ratio           | signals+wake-ups/MB |\n")
	fmt.Printf("|--------|----------------|-------------:|----------:|---------------------|-----------------:|--------------:|---------------------|--------------------:|\n")
	gb := float64(total) / 1e9
	for _, ring := range rings {
		for _, size := range writes {
			var hs, us []result
			var ratio, cpuRatio, sw []float64
			for i := range iters {
				cfg := hvsock.Config{SendRingSize: int(ring), RecvRingSize: int(ring)}
				h, err := b.run(cfg, true, total, int(size), 0)
				if err != nil {
					return fmt.Errorf("vsunix hv_sock ring %d write %d: %w", ring, size, err)
				}
				w, rd, err := unixPair()
				if err != nil {
					return err
				}
				u, err := transfer(w, rd, total, int(size), 0)
				w.Close()
				rd.Close()
				if err != nil {
					return fmt.Errorf("vsunix unix write %d: %w", size, err)
				}
				hs, us = append(hs, h), append(us, u)
				ratio = append(ratio, h.mbps/u.mbps)
				cpuRatio = append(cpuRatio, h.cpu/u.cpu)
				sw = append(sw, float64(h.sigs+h.wake)/(gb*1e3))
				fmt.Fprintf(os.Stderr, "vsunix %d/%d write %s rings %s: hv_sock %.0f MB/s %.3f CPU s/GB, unix %.0f MB/s %.3f CPU s/GB\n",
					i+1, iters, sizeString(size), b.ringLabel(ring), h.mbps, h.cpu/gb, u.mbps, u.cpu/gb)
			}
			label := b.ringLabel(ring)
			if ring == 0 {
				label += " (default)"
			}
			fmt.Printf("| %-6s | %-14s | %12.0f | %9.0f | %-19s | %16.3f | %13.3f | %-19s | %19.2f |\n",
				sizeString(size), label,
				stat("Median", mbpsOf(hs)), stat("Median", mbpsOf(us)), spread(ratio),
				stat("Median", cpuOf(hs))/gb, stat("Median", cpuOf(us))/gb, spread(cpuRatio),
				stat("Median", sw))
		}
	}
	fmt.Println()
	return nil
}

// spread prints the median of v and its range.
func spread(v []float64) string {
	return fmt.Sprintf("%.2f (%.2f-%.2f)", stat("Median", v), stat("Min", v), stat("Max", v))
}

// ringLabel names a ring size as the tables do: "default" or the size in
// use after clamping.
func (b *bench) ringLabel(ring int64) string {
	return sizeString(int64(hvsock.ClampRingSize(int(ring))))
}

// defaultRings describes the ring sizes a Config without sizes gets here.
func (b *bench) defaultRings() string {
	cfg := hvsock.Config{Root: b.root}
	snd, rcv := cfg.RingSizes()
	return fmt.Sprintf("%s send, %s receive", sizeString(int64(snd)), sizeString(int64(rcv)))
}

func (b *bench) chunk() string {
	if b.guestChunk > 0 {
		return fmt.Sprintf("%d B", b.guestChunk)
	}
	return fmt.Sprintf("by send ring (hvsock.AutoChunk: %d B on 24K, %d B on the default and 256K)",
		hvsock.AutoChunk(hvsock.MinRingSize-vmbus.DataOffset()), hvsock.AutoChunk(hvsock.DefaultRingSize-vmbus.DataOffset()))
}

func loadAvg() string {
	d, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(d))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func unixPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var cs [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
		cs[i] = c
	}
	return cs[0], cs[1], nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mbpsOf(rs []result) []float64 {
	var v []float64
	for _, r := range rs {
		v = append(v, r.mbps)
	}
	return v
}

func cpuOf(rs []result) []float64 {
	var v []float64
	for _, r := range rs {
		v = append(v, r.cpu)
	}
	return v
}

func stat(which string, v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	switch which {
	case "Min":
		return s[0]
	case "Max":
		return s[len(s)-1]
	case "Avg":
		var sum float64
		for _, x := range s {
			sum += x
		}
		return sum / float64(len(s))
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// parseSize reads a byte count with an optional K, M or G suffix (powers
// of 1024); "default" is 0.
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if t == "DEFAULT" || t == "" {
		return 0, nil
	}
	mult := int64(1)
	for suf, m := range map[string]int64{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30} {
		if strings.HasSuffix(t, suf) {
			t, mult = strings.TrimSuffix(t, suf), m
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 {
		return 0, errors.New("bad size " + s)
	}
	return v * mult, nil
}

func mustSize(s string) int64 {
	v, err := parseSize(s)
	if err != nil {
		log.Fatal(err)
	}
	return v
}

func mustSizes(s string) []int64 {
	var out []int64
	for _, p := range strings.Split(s, ",") {
		out = append(out, mustSize(p))
	}
	return out
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown CPU"
}
