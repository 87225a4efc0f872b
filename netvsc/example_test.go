package netvsc_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// A fast path driving a synthetic NIC from user space: frames go out and
// come in by bursts of pooled buffers, and Wait polls while traffic flows
// and sleeps on the interrupt fd when it stops.
//
// On an Azure VM the NIC is one that `vmbusd bind` gave to uio_hv_generic
// (which needs root), found under "/" by its instance GUID, and the frames
// go to the vSwitch. Here a simulated host offers the NIC in a temporary
// root and plugs its vSwitch port into a reflector, which sends every frame
// back with its addresses swapped, so traffic flows without root, TAP
// devices or a network.
func Example() {
	host, err := sim.NewTemp(sim.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()
	mac, _ := net.ParseMAC("00:0d:3a:31:b5:38")
	snic, err := host.AddNIC(sim.NICConfig{MAC: mac})
	if err != nil {
		log.Fatal(err)
	}
	if err := snic.Attach(sim.NewReflector()); err != nil {
		log.Fatal(err)
	}

	// Azure derives the instance GUID from the MAC; discovery reads sysfs
	// under the root, as it would under "/".
	dev, err := vmbus.LookupDevice(host.Root(), snic.Device().Instance())
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Open does the NVSP and RNDIS handshakes; the zero Config is one
	// queue, MTU 1500, hybrid polling.
	nic, err := netvsc.Open(ctx, dev, netvsc.Config{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("NIC %s (instance %s): MTU %d, %d queue, link %s\n",
		nic.MAC(), dev.Instance, nic.MTU(), len(nic.Queues()), nic.Link())

	// Transmit: frames are written into buffers from the queue's pool;
	// TxBurst takes those it can and the rest stay ours.
	q := nic.Queues()[0]
	peer := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	tx := make([]*frame.Packet, 8)
	for i := range tx {
		p := q.Alloc()
		f := p.SetLen(60) // the shortest Ethernet frame without its FCS
		clear(f)
		copy(f[0:6], peer)
		copy(f[6:12], nic.MAC())
		binary.BigEndian.PutUint16(f[12:14], 0x88b5) // IEEE's EtherType for local experiments
		binary.BigEndian.PutUint32(f[14:18], uint32(i))
		tx[i] = p
	}
	sent := q.TxBurst(tx)
	for _, p := range tx[sent:] {
		p.Free()
	}

	// Receive: RxBurst never blocks; when it finds nothing, Wait.
	rx := make([]*frame.Packet, 32)
	received := 0
	for received < sent {
		n := q.RxBurst(rx)
		for _, p := range rx[:n] {
			f := p.Data()
			if received == 0 {
				fmt.Printf("frame %d came back from %s to %s\n",
					binary.BigEndian.Uint32(f[14:18]), net.HardwareAddr(f[6:12]), net.HardwareAddr(f[0:6]))
			}
			received++
			p.Free() // back to the pool
		}
		if n == 0 {
			if err := q.Wait(ctx); err != nil {
				log.Fatal(err) // the NIC failed: close it and open it again
			}
		}
	}
	fmt.Printf("sent %d frames, received %d\n", sent, received)
	st := nic.Stats().Queues[0]
	fmt.Printf("queue 0: tx %d packets, rx %d packets\n", st.TxPackets, st.RxPackets)

	// Close returns the device clean (buffers revoked, channel closed),
	// ready for the next owner.
	if err := nic.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// NIC 00:0d:3a:31:b5:38 (instance 000d3a31-b538-000d-3a31-b538000d3a31): MTU 1500, 1 queue, link up 10000 Mbit/s
	// frame 0 came back from 02:00:00:00:00:01 to 00:0d:3a:31:b5:38
	// sent 8 frames, received 8
	// queue 0: tx 8 packets, rx 8 packets
}
