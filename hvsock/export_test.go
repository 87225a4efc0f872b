package hvsock

import (
	"github.com/vmbusd/vmbusd/vmbus"
	"github.com/vmbusd/vmbusd/vmbus/vmbustest"
)

// A vmbustest pair stands where the stream expects its device.
var _ channelDevice = (*vmbustest.Pair)(nil)

// ConnOverPair returns a VMBus-transport Conn on the guest end of p, as
// Dial returns one once its channel is open, for unit tests that drive
// the host end of the channel themselves. Closing the Conn closes p. The
// ring sizes are p's; port is the host's.
func ConnOverPair(p *vmbustest.Pair, cfg Config, port uint32) *Conn {
	snd := p.Guest.Out().DataSize() + vmbus.DataOffset()
	rcv := p.Guest.In().DataSize() + vmbus.DataOffset()
	return &Conn{s: newVMBusStream(p, "vmbustest", &cfg, snd, rcv),
		local:  &Addr{ContextID: CIDAny, Port: 49152, Transport: TransportVMBus},
		remote: &Addr{ContextID: CIDHost, Port: port, Transport: TransportVMBus}}
}

// GuestChannel returns the VMBus channel under a VMBus-transport Conn, for
// tests that put packets on it the stream would never write.
func GuestChannel(c *Conn) *vmbus.Channel { return c.s.(*vmbusStream).ch }
