// Command xdpbench drives vmbusd's AF_XDP data path (package afxdp) on one
// end of a veth pair, and the traffic around it, for scripts/bench-afxdp,
// which compares it with DPDK's net_af_xdp on the same pair.
//
//	xdpbench gen   -i IF [-size 64] [-dst MAC] [-seconds 5]   send flat out (AF_XDP, copy mode); print sent= elapsed=
//	xdpbench rx    -i IF                                     receive with a Port until SIGINT; print received=
//	xdpbench tx    -i IF [-size 64] [-dst MAC]               send flat out with a Socket until SIGINT; print sent=
//	xdpbench count -i IF [-seconds 5]                        count and drop every frame in XDP; print count= elapsed=
//
// rx and tx print "ready" once set up; every command prints the modes it
// got. -cpuprofile writes a pprof CPU profile of rx or tx.
package main
