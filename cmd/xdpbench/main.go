package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/vmbusd/vmbusd/afxdp"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: xdpbench gen|rx|tx|count -i IF [flags]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	ifname := fs.String("i", "", "interface")
	size := fs.Int("size", 64, "frame size in bytes, without FCS")
	dst := fs.String("dst", "02:00:00:00:00:02", "destination MAC of generated frames")
	seconds := fs.Float64("seconds", 5, "duration of gen and count")
	ring := fs.Int("ring", 2048, "ring size")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of rx or tx here")
	_ = fs.Parse(os.Args[2:])
	if *ifname == "" {
		fmt.Fprintln(os.Stderr, "xdpbench: -i is required")
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dur := time.Duration(*seconds * float64(time.Second))
	cfg := afxdp.Config{RingSize: *ring}
	switch cmd {
	case "gen":
		sock, err := afxdp.OpenSocket(*ifname, 0, cfg)
		check(err)
		defer sock.Close()
		ctx, cancel := context.WithTimeout(ctx, dur)
		defer cancel()
		sent, elapsed := sendLoop(ctx, sock, frame(*size, *dst, *ifname))
		fmt.Printf("sent=%d elapsed=%.6f mode=%v\n", sent, elapsed.Seconds(), sock.Mode())
	case "tx":
		sock, err := afxdp.OpenSocket(*ifname, 0, cfg)
		check(err)
		defer sock.Close()
		fmt.Printf("ready mode=%v\n", sock.Mode())
		sent, elapsed := sendLoop(ctx, sock, frame(*size, *dst, *ifname))
		st := sock.Stats()
		fmt.Printf("sent=%d elapsed=%.6f tx_wakeups=%d tx_ring_full=%d\n", sent, elapsed.Seconds(), st.TxWakeups, st.TxRingFull)
	case "rx":
		port, err := afxdp.Open(*ifname, afxdp.Config{RingSize: *ring, Queues: []int{0}})
		check(err)
		defer port.Close()
		fmt.Printf("ready attach=%v bind=%v\n", port.AttachMode(), port.BindMode())
		recvLoop(ctx, port.Sockets()[0])
	case "count":
		n, elapsed := count(ctx, *ifname, dur)
		fmt.Printf("count=%d elapsed=%.6f\n", n, elapsed.Seconds())
	default:
		fmt.Fprintf(os.Stderr, "xdpbench: unknown command %q\n", cmd)
		os.Exit(2)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "xdpbench:", err)
		os.Exit(1)
	}
}

// frame builds an Ethernet/IPv4/UDP frame of size bytes from ifname's MAC
// to dst.
func frame(size int, dst, ifname string) [][]byte {
	size = max(size, 60)
	d, err := net.ParseMAC(dst)
	check(err)
	ifi, err := net.InterfaceByName(ifname)
	check(err)
	b := make([]byte, size)
	copy(b, d)
	copy(b[6:], ifi.HardwareAddr)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	copy(ip[12:], []byte{198, 18, 0, 1})
	copy(ip[16:], []byte{198, 18, 0, 2})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	sum = sum>>16 + sum&0xffff
	sum += sum >> 16
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], 9)
	binary.BigEndian.PutUint16(udp[2:], 9)
	binary.BigEndian.PutUint16(udp[4:], uint16(size-34))
	frames := make([][]byte, 64)
	for i := range frames {
		frames[i] = b
	}
	return frames
}

func sendLoop(ctx context.Context, s *afxdp.Socket, frames [][]byte) (uint64, time.Duration) {
	var sent uint64
	start := time.Now()
	for i := 0; ; i++ {
		if i%64 == 0 && ctx.Err() != nil {
			break
		}
		n, err := s.Send(frames)
		check(err)
		if n == 0 {
			check(s.Flush())
		}
		sent += uint64(n)
	}
	return sent, time.Since(start)
}

func recvLoop(ctx context.Context, s *afxdp.Socket) {
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, s.MaxFrameLen())
	}
	sizes := make([]int, len(bufs))
	var got uint64
	for {
		if err := s.Wait(ctx); err != nil {
			if ctx.Err() == nil {
				check(err)
			}
			break
		}
		n, err := s.Recv(bufs, sizes)
		check(err)
		got += uint64(n)
	}
	st := s.Stats()
	fmt.Printf("received=%d waits=%d kernel_rx_dropped=%d kernel_rx_ring_full=%d kernel_fill_empty=%d\n",
		got, st.Waits, st.KernelRxDropped, st.KernelRxRingFull, st.KernelFillRingEmpty)
}

// count attaches an XDP program that counts frames in a per-CPU array and
// drops them, for dur, and returns the count.
func count(ctx context.Context, ifname string, dur time.Duration) (uint64, time.Duration) {
	ifi, err := net.InterfaceByName(ifname)
	check(err)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	check(err)
	defer m.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 1).WithSymbol("out"), // XDP_DROP
			asm.Return(),
		},
		License: "MIT",
	})
	check(err)
	defer prog.Close()
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifi.Index, Flags: link.XDPDriverMode})
	check(err)
	start := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(dur):
	}
	elapsed := time.Since(start)
	var per []uint64
	check(m.Lookup(uint32(0), &per))
	check(l.Close())
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, elapsed
}
