package netvsc_test

import (
	"context"
	"log"

	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/vmbus"
)

// A fast path owning one queue of a NIC that is bound to uio_hv_generic:
// frames come in bursts from pooled buffers, and Wait polls while traffic
// flows and sleeps on the interrupt fd when it stops.
func Example() {
	ctx := context.Background()
	instance := vmbus.MustParseGUID("00155d41-3fe3-0015-5d41-3fe300155d41")
	dev, err := vmbus.LookupDevice("/", instance)
	if err != nil {
		log.Fatal(err)
	}
	nic, err := netvsc.Open(ctx, dev, netvsc.Config{Queues: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer nic.Close()
	q := nic.Queues()[0]
	pkts := make([]*netvsc.Packet, 64)
	for ctx.Err() == nil {
		n := q.RxBurst(pkts)
		for _, p := range pkts[:n] {
			_ = p.Data() // process the frame
			p.Free()
		}
		if n == 0 {
			if err := q.Wait(ctx); err != nil {
				log.Fatal(err) // the NIC failed: close it and open it again
			}
		}
	}
}
