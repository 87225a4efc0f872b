package vmbus_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// A device that has been handed to uio_hv_generic, driven from user space:
// find it in sysfs, open its channel, send a packet and read the answer.
//
// On a Hyper-V or Azure VM the root is "/" and the device is one that
// `vmbusd bind` (or a driver_override write) gave to uio_hv_generic, which
// needs root. Here a simulated host builds the same sysfs tree and device
// nodes in a temporary directory and answers the test device class by
// echoing every packet, so the example runs anywhere, as any user.
func Example() {
	host, err := sim.NewTemp(sim.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()
	if _, err := host.AddDevice(sim.DeviceConfig{
		Class:    vmbus.ClassTest,
		Instance: vmbus.MustParseGUID("d34b2567-b9b6-42b9-8778-0a4ec0b955bf"),
	}); err != nil {
		log.Fatal(err)
	}

	// Discovery reads sysfs under the root, as it would under "/".
	devs, err := vmbus.ScanDevices(host.Root())
	if err != nil {
		log.Fatal(err)
	}
	var dev vmbus.Device
	for _, d := range devs {
		if d.Class == vmbus.ClassTest {
			dev = d
		}
	}
	fmt.Printf("found %s device %s, driver %s\n", dev.ClassName(), dev.Instance, dev.Driver)

	// Open maps the rings through the device's uio node and opens the
	// primary channel.
	h, err := vmbus.Open(dev, vmbus.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	ch := h.Primary()

	// Sends are batched: nothing reaches the host before Flush, which
	// publishes them and signals the host only if the ring rules ask.
	msg := []byte("hello, host")
	if err := ch.SendInband(1, msg); err != nil {
		log.Fatal(err)
	}
	if err := ch.Flush(); err != nil {
		log.Fatal(err)
	}

	// Recv never blocks: ErrRingEmpty means wait for the host's interrupt
	// (or the channel's death, or the deadline) and try again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		p, err := ch.Recv()
		if err == vmbus.ErrRingEmpty {
			if err := ch.WaitReadable(ctx); err != nil {
				log.Fatal(err)
			}
			continue
		}
		if err != nil {
			log.Fatal(err) // a *vmbus.CorruptError: the host broke the ring rules
		}
		// VMBus pads every packet to 8 bytes; protocols on top of it
		// (NVSP, hv_sock) carry their exact lengths.
		fmt.Printf("%s packet %d: %q, %d bytes with padding\n",
			p.Type, p.TransID, p.Payload()[:len(msg)], len(p.Payload()))
		break
	}
	// Hand the space back to the host once the packet is consumed.
	if err := ch.CommitRecv(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// found vmbusd-test device d34b2567-b9b6-42b9-8778-0a4ec0b955bf, driver uio_hv_generic
	// inband packet 1: "hello, host", 16 bytes with padding
}
