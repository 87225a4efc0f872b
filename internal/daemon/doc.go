// Package daemon is vmbusd's long-running service: it claims the configured
// devices, runs their data paths (a NIC attached to a TAP or forwarded to
// another NIC; hv_sock forwards), serves metrics and health, answers the
// control socket and tells systemd how it is doing.
//
//	start:  take the state directory's owner lock (a second daemon stops
//	        here) -> restore devices a crashed run left bound -> resolve
//	        each NIC's identity -> listen (metrics, control) -> start a
//	        supervisor per NIC and per forward
//	run:    the supervisor loop: READY=1 once every device is up (or one,
//	        with ready = "any"), STATUS= whenever that changes, WATCHDOG=1
//	        while every NIC supervisor is alive. A NIC's supervisor resets
//	        it after a host fault (backoff), waits for the re-offer after a
//	        rescind, and leaves it failed after a configuration error.
//	        Reload (SIGHUP) applies an edited file: NICs and forwards are
//	        added, removed or restarted; the unchanged ones are not touched
//	stop:   STOPPING=1 -> stop forwards and data paths, close channels,
//	        give back the devices vmbusd bound, remove the control socket,
//	        release the lock -> exit 0
package daemon
