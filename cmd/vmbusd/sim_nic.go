package main

// The NIC flags of `vmbusd sim`: synthetic NICs served by the simulated
// NetVSP, their vSwitch ports, guest-memory model and faults.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/vmbusd/vmbusd/sim"
)

type nicFlags struct {
	count        *int
	driver       *string
	port         *string
	memory       *string
	queues       *int
	mtu          *int
	mac          *string
	linkDown     *bool
	vf           vfFlags
	controlDelay *time.Duration
	recvSection  *int
	notMonitored *bool
	faults       *string
	genRate      *float64
	genSize      *int
	genFlows     *int
	ring         *string
}

func addNICFlags(fs *pflag.FlagSet) *nicFlags {
	return &nicFlags{
		count: fs.Int("nic", 0, "number of synthetic NICs to offer (served by the simulated NetVSP)"),
		driver: fs.String("nic-driver", sim.DriverUIO, "driver that has the NICs when offered: uio_hv_generic (ready for a user-space guest), "+
			"hv_netvsc (kernel NICs eth1, eth2, ...: try `vmbusd bind` or the scripts), or none"),
		port: fs.String("port", "reflect", "what each NIC's vSwitch port connects to: reflect (frames come back, MACs swapped), "+
			"peer (NICs 2k and 2k+1 patched together), sink (count and drop), gen (generator + sink), "+
			"tap:NETNS or veth:NETNS (a kernel TAP or veth in network namespace NETNS, created if missing), none"),
		memory:       fs.String("memory", "file", "where GPA-direct ranges are read: file (R/dev/guestmem) or proc (/proc/<guest pid>/mem, for a guest with IOVA = VA)"),
		queues:       fs.Int("queues", sim.DefaultMaxQueues, "channels a NIC grants at most (primary included); a larger request gets a partial grant"),
		mtu:          fs.Int("mtu", 1500, "largest MTU the vSwitch port allows"),
		mac:          fs.String("mac", "", "MAC of the first NIC (others count up); default random 00:15:5d:xx:xx:xx"),
		linkDown:     fs.Bool("link-down", false, "offer NICs with the link down"),
		controlDelay: fs.Duration("control-delay", 0, "delay every RNDIS control completion (a slow VSP)"),
		recvSection:  fs.Int("recv-section", sim.DefaultRecvSectionSize, "receive sub-allocation size (-1: openvmm's 256+MTU+36)"),
		notMonitored: fs.Bool("nic-not-monitored", false, "offer the NICs' channels without a monitor id"),
		faults:       fs.String("nic-fault", "", "comma-separated NIC faults to switch on: "+nicFaultNames()),
		genRate:      fs.Float64("gen-rate", 0, "--port gen: frames per second to the guest (0: as fast as it takes them)"),
		genSize:      fs.Int("gen-size", 64, "--port gen: frame size in bytes"),
		genFlows:     fs.Int("gen-flows", 64, "--port gen: distinct UDP flows"),
		ring:         fs.String("nic-ring", "2M", "NIC ring size per direction, header page included, for the primary and sub-channels (K/M suffixes)"),
		vf:           addVFFlags(fs),
	}
}

func nicFaultNames() string {
	var names []string
	for _, f := range sim.AllNICFaults() {
		names = append(names, f.String())
	}
	return strings.Join(names, ", ")
}

// offer adds the NICs and attaches their ports. The returned function
// prints the NICs' counters and closes the ports.
func (f *nicFlags) offer(h *sim.Host, out io.Writer) (func(), error) {
	if *f.count < 0 {
		return nil, fmt.Errorf("%w: --nic must not be negative", errUsage)
	}
	if *f.count == 0 {
		return func() {}, nil
	}
	mem, err := sim.ParseMemoryModel(*f.memory)
	if err != nil {
		return nil, fmt.Errorf("%w: --memory: %v", errUsage, err)
	}
	var faults []sim.NICFault
	for _, name := range splitList(*f.faults) {
		x, err := sim.ParseNICFault(name)
		if err != nil {
			return nil, fmt.Errorf("%w: --nic-fault: %v", errUsage, err)
		}
		faults = append(faults, x)
	}
	var mac net.HardwareAddr
	if *f.mac != "" {
		if mac, err = net.ParseMAC(*f.mac); err != nil || len(mac) != 6 {
			return nil, fmt.Errorf("%w: --mac %q", errUsage, *f.mac)
		}
	}
	ring, err := parseSize(*f.ring)
	if err != nil {
		return nil, fmt.Errorf("%w: --nic-ring: %v", errUsage, err)
	}
	serial, stand, err := f.vf.config()
	if err != nil {
		return nil, err
	}
	kind, ns, _ := strings.Cut(*f.port, ":")
	switch kind {
	case "reflect", "peer", "sink", "gen", "none":
	case "tap", "veth":
		if ns == "" {
			return nil, fmt.Errorf("%w: --port %s needs a network namespace: %s:NETNS", errUsage, kind, kind)
		}
	default:
		return nil, fmt.Errorf("%w: --port %q", errUsage, *f.port)
	}
	var nics []*sim.NIC
	var ports []sim.Port
	var gens []*sim.Generator
	cleanup := func() {
		for _, p := range ports {
			p.Close()
		}
	}
	for i := 0; i < *f.count; i++ {
		cfg := sim.NICConfig{Driver: *f.driver, MaxQueues: *f.queues, MTU: *f.mtu, LinkDown: *f.linkDown, VF: serial,
			ControlDelay: *f.controlDelay, RecvSectionSize: *f.recvSection, Memory: mem,
			NotMonitored: *f.notMonitored, Faults: faults, RingSize: int(ring), SubchannelRingSize: int(ring)}
		if *f.driver == sim.DriverNetvsc {
			cfg.IfName = fmt.Sprintf("eth%d", i+1)
		}
		if mac != nil {
			cfg.MAC = append(net.HardwareAddr(nil), mac...)
			cfg.MAC[5] += byte(i)
		}
		if stand != nil {
			cfg.VFStandIn = stand.forNIC(i)
			cfg.VF = serial + uint32(i)
		}
		n, err := h.AddNIC(cfg)
		if err != nil {
			cleanup()
			return nil, err
		}
		nics = append(nics, n)
		var p sim.Port
		switch kind {
		case "reflect":
			p = sim.NewReflector()
		case "sink", "gen":
			g := sim.NewGenerator(sim.GeneratorConfig{Rate: *f.genRate, Sizes: []int{*f.genSize}, Flows: *f.genFlows, Idle: kind == "sink"})
			gens = append(gens, g)
			p = g
		case "tap", "veth":
			p, err = sim.NewTAP(sim.TAPConfig{Netns: ns, Name: fmt.Sprintf("vmbusd%d", i), Veth: kind == "veth"})
			if err != nil {
				cleanup()
				return nil, err
			}
		case "peer":
			if i%2 == 1 {
				if err := sim.Patch(nics[i-1], n); err != nil {
					cleanup()
					return nil, err
				}
			}
		}
		if p != nil {
			ports = append(ports, p)
			if err := n.Attach(p); err != nil {
				cleanup()
				return nil, err
			}
		}
		fmt.Fprintf(out, "nic %s mac %s uio %s port %s\n", n.Device().Instance(), n.MAC(), n.Device().UIONode(), *f.port)
		if v := n.VF(); v != nil {
			f.vf.vfs = append(f.vf.vfs, v)
			c := v.Config()
			fmt.Fprintf(out, "vf %s serial %d pci %s host-if %s guest-if %s netns %q kind %s external %v\n",
				n.MAC(), n.Config().VF, v.BDF(), c.HostIf, c.GuestIf, c.GuestNetns, c.Kind, v.External())
		}
	}
	return func() {
		for _, n := range nics {
			st := n.Stats()
			var unacked []string
			for i, c := range st.PerChannel {
				unacked = append(unacked, fmt.Sprintf("ch%d:%d", i, c.UnackedAtClose))
			}
			fmt.Fprintf(out, "nic %s opens %d tx %d frames %d bytes sends %d (section %d, gpa-direct %d; dropped %d, errors %d) rx %d frames %d bytes (dropped %d, filtered %d) missed-wakeups %d unacked-at-close %s\n",
				n.MAC(), st.Opens, st.TxPackets, st.TxBytes, st.TxSends, st.TxSectionSends, st.TxGPASends, st.TxDropped, st.TxErrors,
				st.RxPackets, st.RxBytes, st.RxDropped, st.RxFiltered, st.MissedWakeups, strings.Join(unacked, ","))
			if n.VF() != nil {
				v := st.VF
				fmt.Fprintf(out, "nic %s vf rx %d frames %d bytes (exceptions kept synthetic %d, errors %d) tx %d frames %d bytes; synthetic rx %d tx %d\n",
					n.MAC(), v.RxPackets, v.RxBytes, v.Exceptions, v.RxErrors, v.TxPackets, v.TxBytes, st.RxPackets, st.TxPackets)
			}
		}
		for i, g := range gens {
			gs := g.Stats()
			fmt.Fprintf(out, "generator %d sent %d accepted %d received %d frames %d bytes\n", i, gs.Sent, gs.Accepted, gs.Received, gs.ReceivedBytes)
		}
		cleanup()
	}, nil
}

// vfFlags are the accelerated-networking flags: the VF stand-in of each
// NIC (a veth pair with its PCI picture under R), its scenarios, and the
// servicing toggle on SIGUSR2 that dpdk-guest's run-vf.sh sends.
type vfFlags struct {
	spec        *string
	serial      *uint
	guestIf     *string
	netns       *string
	kind        *string
	queues      *int
	order       *string
	probe       *time.Duration
	remove      *time.Duration
	notice      *time.Duration
	away        *time.Duration
	offline     *bool
	scenario    *string
	scenarioAt  *time.Duration
	scenarioRep *time.Duration

	vfs []*sim.VF
}

func addVFFlags(fs *pflag.FlagSet) vfFlags {
	var names []string
	for _, s := range sim.AllVFScenarios() {
		names = append(names, s.String())
	}
	return vfFlags{
		spec: fs.String("vf", "", "accelerated networking: the host end of the VF stand-in's veth pair (used as it is when it exists, "+
			"else created with --vf-guest-if), or a bare number: a VF serial offered without a stand-in"),
		serial:  fs.Uint("vf-serial", 1, "--vf: the VF's serial (its PCI slot name; the first NIC's, others count up)"),
		guestIf: fs.String("vf-guest-if", os.Getenv("VF_IF"), "--vf: the guest end, the VF's netdev (env VF_IF)"),
		netns:   fs.String("vf-netns", os.Getenv("VF_NETNS"), "--vf: network namespace of the guest end, created if missing (env VF_NETNS; empty: this one)"),
		kind:    fs.String("vf-kind", "mlx5", "--vf: PCI identity: mlx5 (15b3:1016, mlx5_core) or mana (1414:00ba, mana)"),
		queues:  fs.Int("vf-queues", 1, "--vf: RX/TX queues of the veth pair the simulator creates"),
		order:   fs.String("vf-order", "netdev-first", "--vf: how a returning VF shows itself: netdev-first or association-first"),
		probe:   fs.Duration("vf-probe-delay", 0, "--vf: from the PCI device to its netdev (a slow driver probe)"),
		remove:  fs.Duration("vf-remove-delay", sim.DefaultVFRemoveDelay, "--vf: graceful servicing: from the guest leaving the VF to its removal"),
		notice:  fs.Duration("vf-notice-delay", sim.DefaultVFNoticeDelay, "--vf: surprise removal: from the netdev's disappearance to the host's switch and withdrawal"),
		away:    fs.Duration("vf-away", sim.DefaultVFAway, "--vf: how long scenarios keep the VF away"),
		offline: fs.Bool("vf-offline", false, "--vf: start without the VF (hot-add it with SIGUSR2)"),
		scenario: fs.String("vf-scenario", "", "--vf: a scenario to run on every NIC's VF: "+strings.Join(names, ", ")+
			" (SIGUSR2 toggles servicing at any time: withdraw and remove, or bring back)"),
		scenarioAt:  fs.Duration("vf-scenario-at", 5*time.Second, "--vf-scenario: when to start it"),
		scenarioRep: fs.Duration("vf-scenario-every", 0, "--vf-scenario: run it again this long after each end (0: once)"),
	}
}

// vfStandIn is a stand-in configuration, per NIC.
type vfStandIn struct{ sim.VFConfig }

// forNIC returns NIC i's stand-in: names get the NIC's index from the
// second NIC on.
func (s *vfStandIn) forNIC(i int) *sim.VFConfig {
	c := s.VFConfig
	if i > 0 {
		c.HostIf += strconv.Itoa(i)
		if c.GuestIf != "" {
			c.GuestIf += strconv.Itoa(i)
		}
	}
	return &c
}

// config returns the first NIC's VF serial and stand-in (nil without one).
func (f *vfFlags) config() (uint32, *vfStandIn, error) {
	spec := strings.TrimSpace(*f.spec)
	if spec == "" {
		return 0, nil, nil
	}
	if n, err := strconv.ParseUint(spec, 10, 32); err == nil {
		return uint32(n), nil, nil // an association without a stand-in
	}
	if *f.serial == 0 || *f.serial > 1<<31 {
		return 0, nil, fmt.Errorf("%w: --vf-serial %d", errUsage, *f.serial)
	}
	kind, err := sim.ParseVFKind(*f.kind)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: --vf-kind: %v", errUsage, err)
	}
	order := sim.VFNetdevFirst
	switch *f.order {
	case "netdev-first":
	case "association-first":
		order = sim.VFAssociationFirst
	default:
		return 0, nil, fmt.Errorf("%w: --vf-order %q (netdev-first, association-first)", errUsage, *f.order)
	}
	if *f.scenario != "" {
		if _, err := sim.ParseVFScenario(*f.scenario); err != nil {
			return 0, nil, fmt.Errorf("%w: --vf-scenario: %v", errUsage, err)
		}
	}
	return uint32(*f.serial), &vfStandIn{sim.VFConfig{HostIf: spec, GuestIf: *f.guestIf, GuestNetns: *f.netns, Kind: kind,
		Queues: *f.queues, Order: order, ProbeDelay: *f.probe, RemoveDelay: *f.remove, NoticeDelay: *f.notice,
		Away: *f.away, Offline: *f.offline}}, nil
}

// serve toggles servicing on SIGUSR2 (always caught, so a stray signal
// never kills the host) and runs the scenario; the returned function
// stops both and waits for what is in progress.
func (f *vfFlags) serve(ctx context.Context, out io.Writer, log *slog.Logger) func() {
	ctx, cancel := context.WithCancel(ctx)
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR2)
	var wg sync.WaitGroup
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format, a...)
		outMu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
			}
			if len(f.vfs) == 0 {
				log.Info("SIGUSR2: no VF to service")
				continue
			}
			for _, v := range f.vfs {
				present, err := v.Toggle(ctx)
				if err != nil {
					log.Warn("VF servicing", "vf", v.Config().HostIf, "err", err)
					continue
				}
				say("vf %s servicing: present %v at %s\n", v.Config().HostIf, present, time.Now().Format("15:04:05.000000"))
			}
		}
	}()
	if sc, err := sim.ParseVFScenario(*f.scenario); err == nil {
		for _, v := range f.vfs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTimer(*f.scenarioAt)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
					}
					start := time.Now()
					err := v.Run(ctx, sc)
					if ctx.Err() != nil {
						return
					}
					say("vf %s scenario %s: %v in %v\n", v.Config().HostIf, sc, errOrOK(err), time.Since(start).Round(time.Millisecond))
					if *f.scenarioRep <= 0 {
						return
					}
					t.Reset(*f.scenarioRep)
				}
			}()
		}
	}
	return func() {
		cancel()
		signal.Stop(sig)
		wg.Wait()
	}
}

func errOrOK(err error) string {
	if err == nil {
		return "done"
	}
	return err.Error()
}
