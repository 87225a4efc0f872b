package main

// The NIC flags of `vmbusd sim`: synthetic NICs served by the simulated
// NetVSP, their vSwitch ports, guest-memory model and faults.

import (
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

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
	vf           *uint
	controlDelay *time.Duration
	recvSection  *int
	notMonitored *bool
	faults       *string
	genRate      *float64
	genSize      *int
	genFlows     *int
	ring         *string
}

func addNICFlags(fs *flag.FlagSet) *nicFlags {
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
		vf:           fs.Uint("vf", 0, "offer accelerated networking: VF serial number (0: none)"),
		controlDelay: fs.Duration("control-delay", 0, "delay every RNDIS control completion (a slow VSP)"),
		recvSection:  fs.Int("recv-section", sim.DefaultRecvSectionSize, "receive sub-allocation size (-1: openvmm's 256+MTU+36)"),
		notMonitored: fs.Bool("nic-not-monitored", false, "offer the NICs' channels without a monitor id"),
		faults:       fs.String("nic-fault", "", "comma-separated NIC faults to switch on: "+nicFaultNames()),
		genRate:      fs.Float64("gen-rate", 0, "--port gen: frames per second to the guest (0: as fast as it takes them)"),
		genSize:      fs.Int("gen-size", 64, "--port gen: frame size in bytes"),
		genFlows:     fs.Int("gen-flows", 64, "--port gen: distinct UDP flows"),
		ring:         fs.String("nic-ring", "2M", "NIC ring size per direction, header page included, for the primary and sub-channels (K/M suffixes)"),
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
		cfg := sim.NICConfig{Driver: *f.driver, MaxQueues: *f.queues, MTU: *f.mtu, LinkDown: *f.linkDown, VF: uint32(*f.vf),
			ControlDelay: *f.controlDelay, RecvSectionSize: *f.recvSection, Memory: mem,
			NotMonitored: *f.notMonitored, Faults: faults, RingSize: int(ring), SubchannelRingSize: int(ring)}
		if *f.driver == sim.DriverNetvsc {
			cfg.IfName = fmt.Sprintf("eth%d", i+1)
		}
		if mac != nil {
			cfg.MAC = append(net.HardwareAddr(nil), mac...)
			cfg.MAC[5] += byte(i)
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
		}
		for i, g := range gens {
			gs := g.Stats()
			fmt.Fprintf(out, "generator %d sent %d accepted %d received %d frames %d bytes\n", i, gs.Sent, gs.Accepted, gs.Received, gs.ReceivedBytes)
		}
		cleanup()
	}, nil
}
