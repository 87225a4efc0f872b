package wire_test

import (
	"net"
	"testing"

	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/vmbus"
)

func TestServiceIDsAndPorts(t *testing.T) {
	for _, tc := range []struct {
		port uint32
		guid string
	}{
		{2761, "00000ac9-facb-11e6-bd58-64006a7986d3"},
		{0x3049197c, "3049197c-facb-11e6-bd58-64006a7986d3"},
		{22099, "00005653-facb-11e6-bd58-64006a7986d3"},
		{0, "00000000-facb-11e6-bd58-64006a7986d3"},
	} {
		if got := wire.ServiceID(tc.port).String(); got != tc.guid {
			t.Errorf("ServiceID(%d) = %s, want %s", tc.port, got, tc.guid)
		}
		p, ok := wire.ServicePort(vmbus.MustParseGUID(tc.guid))
		if !ok || p != tc.port {
			t.Errorf("ServicePort(%s) = %d, %v; want %d", tc.guid, p, ok, tc.port)
		}
	}
	// Data1 is little-endian on the wire: port 2761 is c9 0a 00 00 there.
	if w := wire.ServiceID(2761).Wire(); w[0] != 0xc9 || w[1] != 0x0a || w[2] != 0 || w[3] != 0 {
		t.Errorf("wire form % x", w)
	}
	if _, ok := wire.ServicePort(vmbus.ClassNetwork); ok {
		t.Error("a non-template GUID gave a port")
	}
}

func TestAddr(t *testing.T) {
	var _ net.Addr = &wire.Addr{}
	for _, tc := range []struct {
		a   wire.Addr
		str string
	}{
		{wire.Addr{ContextID: wire.CIDHost, Port: 2761}, "host(2):2761"},
		{wire.Addr{ContextID: wire.CIDAny, Port: 1024}, "any(4294967295):1024"},
		{wire.Addr{ContextID: wire.CIDLocal, Port: 1}, "local(1):1"},
		{wire.Addr{ContextID: wire.CIDHypervisor, Port: 7}, "hypervisor(0):7"},
		{wire.Addr{ContextID: 3, Port: 5}, "vm(3):5"},
	} {
		if tc.a.Network() != "hvsock" || tc.a.String() != tc.str {
			t.Errorf("%+v: %s %s, want hvsock %s", tc.a, tc.a.Network(), tc.a.String(), tc.str)
		}
	}
	a := wire.Addr{Port: 2761}
	if a.ServiceID() != wire.ServiceID(2761) {
		t.Error("Addr.ServiceID")
	}
}
