package hvsock_test

import (
	"net"
	"testing"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/vmbus"
)

// The GUID template itself is tested in package wire; here only that the
// exported helpers are wire's.
func TestServiceIDsAreWires(t *testing.T) {
	for _, port := range []uint32{0, 2761, 0x3049197c} {
		if got, want := hvsock.ServiceID(port), wire.ServiceID(port); got != want {
			t.Errorf("ServiceID(%d) = %s, want wire's %s", port, got, want)
		}
		if p, ok := hvsock.ServicePort(wire.ServiceID(port)); !ok || p != port {
			t.Errorf("ServicePort(wire.ServiceID(%d)) = %d, %v", port, p, ok)
		}
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
