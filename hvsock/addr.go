package hvsock

import (
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Context ids (AF_VSOCK's VMADDR_CID_*). On Hyper-V the guest has no CID of
// its own: it binds and listens on CIDAny and reaches only CIDHost; the VM
// id is never carried over VMBus (docs/protocol/hvsock.md §1.1).
const (
	CIDHypervisor = wire.CIDHypervisor
	CIDLocal      = wire.CIDLocal
	CIDHost       = wire.CIDHost
	CIDAny        = wire.CIDAny
)

// PortAny asks Listen for a port of the transport's choosing
// (VMADDR_PORT_ANY).
const PortAny = wire.PortAny

// Addr is an hv_sock endpoint: a context id and a port. A port stands for
// the service GUID ServiceID(port). Transport says which transport the
// address belongs to: Network is "hvsock" for the user-space VMBus
// transport and "vsock" for the kernel's AF_VSOCK.
//
// Addr is a plain value, safe to copy and compare.
type Addr struct {
	ContextID uint32
	Port      uint32
	Transport Transport
}

// Network implements net.Addr.
func (a *Addr) Network() string {
	if a.Transport == TransportKernel {
		return "vsock"
	}
	return "hvsock"
}

// String returns "host(2):2761", "any(4294967295):1024" and the like, as
// mdlayher/vsock prints addresses.
func (a *Addr) String() string {
	return (&wire.Addr{ContextID: a.ContextID, Port: a.Port}).String()
}

// ServiceID returns the service GUID of the address's port.
func (a *Addr) ServiceID() vmbus.GUID { return ServiceID(a.Port) }

// ServiceID returns the hv_sock service GUID of a port: port 2761 is
// 00000ac9-facb-11e6-bd58-64006a7986d3 (wire.ServiceID).
func ServiceID(port uint32) vmbus.GUID { return wire.ServiceID(port) }

// ServicePort returns the port of a service GUID; ok is false when the GUID
// does not follow the template (Linux ignores such offers).
func ServicePort(g vmbus.GUID) (port uint32, ok bool) { return wire.ServicePort(g) }
