// Package sim is vmbusd's simulated Hyper-V host, together with the parts
// of the guest's kernel (uio_hv_generic, the vmbus driver) that user space
// sees. Every test, benchmark and demo runs against it; it follows the real
// host's rules as the references describe them, so that passing against it
// means working on Azure.
//
// It is split by role; the imports point down only:
//
//	sim               Host: the assembled host (New, NewTemp, AddNIC,
//	                  StartHvSock) and the other packages' names as
//	                  aliases, the API the tests, benchmarks and cmd/ use
//	sim/netvsp        the NetVSP behind synthetic NICs, and the
//	                  accelerated-networking VF stand-in
//	sim/hvsockhost    the hv_sock host: connect requests, listeners,
//	                  connections, the Unix socket front end
//	sim/vswitch       ports (patch, TAP, generator, reflector) and the
//	                  frame work of the switch port (VLAN, filter, RSS
//	                  flow, checksums, LSO)
//	sim/bus           the core: the sysfs tree, the uio contract of
//	                  docs/uio-contract.md (the R/dev/uioN socket), the
//	                  driver model and kernel profiles, device offers and
//	                  rescinds, sessions and the host end of every channel
//	                  (masked while draining, interrupts only on empty to
//	                  non-empty, pending_send_sz, the monitor page), guest
//	                  memory, ring faults and the test class's echo
//
// netvsp imports vswitch and bus; hvsockhost imports bus; vswitch and bus
// import neither the other roles nor sim. Each package's doc says what it
// models and which host rules it enforces.
//
// It knows nothing of the guest's internals: guest packages never import
// it outside tests, and no package under sim imports a driver
// (imports_test.go).
package sim
