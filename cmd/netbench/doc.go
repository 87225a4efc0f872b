// Command netbench measures vmbusd's user-space netvsc data path against
// the simulated host running in a separate process (so the guest's CPU is
// its own): packet rates and CPU per million packets each way, the CPU of
// an idle attached port per wait mode, the send-buffer size sweep under
// bursty load, the TAP attachment against a plain veth pair between the
// same two network namespaces, and a transmit-only load like DPDK testpmd's
// txonly mode (txonly, which can drive a host started by `vmbusd sim
// --port sink`, so DPDK's guest and vmbusd's meet the same host).
//
//	netbench [-dur 3s] [-json] rate|idle|sweep|tapveth|txonly|latency|all ...
//
// rate measures each wait mode -pairs times per point, back to back in
// the order A B B A ..., so that hybrid ÷ poll can be taken pair by pair.
// It also times a cache line bounced between the first two CPUs before
// and after each measurement (xcore_ns_before/_after): the machine's state,
// which on a small virtual machine can change the rates more than the wait
// mode does (see xcore.go); and the CPU the rest of the machine took
// during it (other_cpu, cores).
//
// tapveth measures TCP both ways with iperf3 (when installed; -tcp go uses
// sockets in this process), a 1-byte TCP request/response and ping(8),
// with the TAP offloads on (-offloads=false for plain TAPs) and a GPA
// pool, as the daemon sets up by default (-gpa=false copies large sends
// into send sections); -v prints every layer's drop counters, -hold leaves
// both paths up for other tools, -cpuprofile/-hostprofile and
// -trace/-hosttrace profile the guest and the host.
//
// latency times UDP request/response round trips through the TAP
// attachment per wait mode against the veth pair, hop by hop (hoptrace),
// with the context switches and page faults per round trip of netbench
// and of the host next to the CPU figures.
//
// It re-executes itself as the host ("netbench host ...").
package main
