package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

func runSim(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet(out, "sim", "sim --root DIR [flags]")
	root := envString(fs, "root", "VMBUSD_ROOT", "", "directory to build the simulated system under (keep it on tmpfs, e.g. /dev/shm/vmbusd)")
	profile := fs.String("profile", sim.DefaultProfile.String(), "kernel profile: legacy, 6.10, 6.16, 6.18 (uio_hv_generic semantics)")
	tests := fs.Int("test", 1, "number of test (echo) devices to offer")
	ring := fs.String("ring", "2M", "ring size per direction, header page included (K/M suffixes)")
	notMonitored := fs.Bool("not-monitored", false, "offer channels without a monitor id (guests signal with write(1); 6.10+)")
	faults := fs.String("fault", "", "comma-separated ring faults to switch on for every device the host offers: the test devices (--test), "+
		"the NICs (--nic) and the channel of every hv_sock connection (--hvsock); one-shot faults fire once per device. "+
		"NIC protocol faults are --nic-fault. Faults: "+faultNames())
	hvsockBase := fs.String("hvsock", "", "serve hv_sock: R/dev/vmbus-tl takes guest connects, and this Unix socket is the host side's front end (write \"CONNECT <port>\\n\" to reach a guest listener; guest connects to port P reach a program listening on PATH_P); \"-\" for no front end")
	nicFl := addNICFlags(fs)
	absLinks := fs.Bool("abs-links", false, "write sysfs links with absolute targets inside the root (for guests that bind-mount only R/sys/bus and R/sys/class, like dpdk-guest)")
	mkLog := logFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := mkLog(os.Stderr)
	if err != nil {
		return err
	}
	if *root == "" {
		return fmt.Errorf("%w: --root is required (for example --root /dev/shm/vmbusd)", errUsage)
	}
	prof, err := sim.ParseProfile(*profile)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	ringSize, err := parseSize(*ring)
	if err != nil {
		return fmt.Errorf("%w: --ring: %v", errUsage, err)
	}
	var fl []sim.Fault
	for _, name := range splitList(*faults) {
		f, err := sim.ParseFault(name)
		if err != nil {
			return fmt.Errorf("%w: --fault: %v", errUsage, err)
		}
		fl = append(fl, f)
	}
	if *tests < 0 {
		return fmt.Errorf("%w: --test must not be negative", errUsage)
	}
	if err := os.MkdirAll(*root, 0o755); err != nil {
		return err
	}
	h, err := sim.New(sim.Config{Root: *root, Profile: prof, Logger: log, AbsoluteLinks: *absLinks, Faults: fl})
	if err != nil {
		return err
	}
	for i := 0; i < *tests; i++ {
		d, err := h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest, RingSize: int(ringSize), NotMonitored: *notMonitored})
		if err != nil {
			h.Close()
			return err
		}
		fmt.Fprintf(out, "device %s class %s uio %s\n", d.Instance(), vmbus.ClassName(vmbus.ClassTest), d.UIONode())
	}
	nicsDone, err := nicFl.offer(h, out)
	if err != nil {
		h.Close()
		return err
	}
	var hv *sim.HvSock
	if *hvsockBase != "" {
		cfg := sim.HvSockConfig{}
		if *hvsockBase != "-" {
			cfg.SocketBase = *hvsockBase
		}
		if hv, err = h.StartHvSock(cfg); err != nil {
			h.Close()
			nicsDone()
			return err
		}
		fmt.Fprintf(out, "hvsock connect %s front %s\n", filepath.Join(h.Root(), "dev", "vmbus-tl"), cfg.SocketBase)
	}
	stopVF := nicFl.vf.serve(ctx, out, log)
	fmt.Fprintf(out, "ready root %s profile %s\n", h.Root(), prof)
	<-ctx.Done()
	stopVF()
	if hv != nil {
		hv.Close()
	}
	err = h.Close()
	nicsDone()
	reportViolations(out, h.Violations())
	return err
}

// reportViolations prints the guest protocol violations the host counted,
// one line each, and a total line that scripts can check.
func reportViolations(w io.Writer, v map[string]uint64) {
	var total uint64
	for _, k := range slices.Sorted(maps.Keys(v)) {
		fmt.Fprintf(w, "violation %q %d\n", k, v[k])
		total += v[k]
	}
	fmt.Fprintf(w, "guest violations total %d\n", total)
}

func faultNames() string {
	var names []string
	for _, f := range sim.AllFaults() {
		names = append(names, f.String())
	}
	return strings.Join(names, ", ")
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseSize reads a byte count with an optional K, M or G suffix (powers of
// 1024).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, strings.TrimSuffix(t, "K")
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, strings.TrimSuffix(t, "M")
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, strings.TrimSuffix(t, "G")
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size (examples: 4096, 64K, 2M)", s)
	}
	return v * mult, nil
}
