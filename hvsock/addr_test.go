package hvsock_test

import (
	"net"
	"testing"

	"github.com/vmbusd/vmbusd/hvsock"
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
		if got := hvsock.ServiceID(tc.port).String(); got != tc.guid {
			t.Errorf("ServiceID(%d) = %s, want %s", tc.port, got, tc.guid)
		}
		p, ok := hvsock.ServicePort(vmbus.MustParseGUID(tc.guid))
		if !ok || p != tc.port {
			t.Errorf("ServicePort(%s) = %d, %v; want %d", tc.guid, p, ok, tc.port)
		}
	}
	// Data1 is little-endian on the wire: port 2761 is c9 0a 00 00 there.
	if w := hvsock.ServiceID(2761).Wire(); w[0] != 0xc9 || w[1] != 0x0a || w[2] != 0 || w[3] != 0 {
		t.Errorf("wire form % x", w)
	}
	if _, ok := hvsock.ServicePort(vmbus.ClassNetwork); ok {
		t.Error("a non-template GUID gave a port")
	}
}

func TestAddr(t *testing.T) {
	var _ net.Addr = &hvsock.Addr{}
	tests := []struct {
		a       hvsock.Addr
		network string
		str     string
	}{
		{hvsock.Addr{ContextID: hvsock.CIDHost, Port: 2761, Transport: hvsock.TransportVMBus}, "hvsock", "host(2):2761"},
		{hvsock.Addr{ContextID: hvsock.CIDAny, Port: 1024, Transport: hvsock.TransportKernel}, "vsock", "any(4294967295):1024"},
		{hvsock.Addr{ContextID: 3, Port: 5}, "hvsock", "vm(3):5"},
	}
	for _, tc := range tests {
		if tc.a.Network() != tc.network || tc.a.String() != tc.str {
			t.Errorf("%+v: %s %s, want %s %s", tc.a, tc.a.Network(), tc.a.String(), tc.network, tc.str)
		}
	}
	a := hvsock.Addr{Port: 2761}
	if a.ServiceID() != hvsock.ServiceID(2761) {
		t.Error("Addr.ServiceID")
	}
}
