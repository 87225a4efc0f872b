// Package bind hands VMBus NICs to uio_hv_generic and gives them back to
// hv_netvsc: the Go side of `vmbusd bind|unbind|restore`, used by the daemon
// at start and stop, and by ExecStopPost after a crash. The bash scripts in
// scripts/ do the same with the same checks and the same state records, so
// either can undo what the other did.
//
// Everything works under a root directory R standing for "/": a real system
// (R = "/") or a simulated host's tree (sim/), whose kernel reacts to the
// same sysfs writes. Binding is per device, with driver_override
// (docs/protocol/ecosystem.md §1.2-1.3, §1.8; dpdk-devbind's and driverctl's flow):
//
//	Bind:   resolve -> checks (NIC, module, override attribute, not the
//	        default-route or SSH interface unless Force) -> record state ->
//	        [real root: link down] -> driver_override = uio_hv_generic ->
//	        unbind from the current driver, wait -> bind (drivers_probe as
//	        fallback) -> verify driver, uio/uioN and R/dev/uioN; on failure
//	        roll back and drop the record
//	Unbind: [refuse while a process holds R/dev/uioN, unless Force] ->
//	        unbind from uio_hv_generic, wait -> restore the override ->
//	        bind the original driver (drivers_probe as fallback) -> verify
//	        the driver and the netdev -> [real root: name, MTU, addresses,
//	        up] -> drop the record
//	Restore: Unbind every device that has a record (after a crash)
//
// The record (Record, one JSON file per device in the state directory,
// written atomically before anything changes) is the contract with the
// scripts. Steps that need netlink (link state, addresses, the SSH server
// address) run only on a real root; a simulated tree shows sysfs and
// /proc/net only (see sim/bus/drivers_net.go).
//
// It knows nothing of the data path: it never opens a device.
package bind
