package hvsock

import (
	"fmt"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Context ids (AF_VSOCK's VMADDR_CID_*). On Hyper-V the guest has no CID of
// its own: it binds and listens on CIDAny and reaches only CIDHost; the VM
// id is never carried over VMBus (hvsock.md §1.1).
const (
	CIDHypervisor = 0
	CIDLocal      = 1
	CIDHost       = 2
	CIDAny        = 0xFFFFFFFF
)

// PortAny asks Listen for a port of the transport's choosing
// (VMADDR_PORT_ANY).
const PortAny = 0xFFFFFFFF

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
	var name string
	switch a.ContextID {
	case CIDHypervisor:
		name = "hypervisor"
	case CIDLocal:
		name = "local"
	case CIDHost:
		name = "host"
	case CIDAny:
		name = "any"
	default:
		name = "vm"
	}
	return fmt.Sprintf("%s(%d):%d", name, a.ContextID, a.Port)
}

// ServiceID returns the service GUID of the address's port.
func (a *Addr) ServiceID() vmbus.GUID { return ServiceID(a.Port) }

// ServiceID returns the hv_sock service GUID of a port: the template
// 00000000-facb-11e6-bd58-64006a7986d3 with Data1 = port, so port 2761 is
// 00000ac9-facb-11e6-bd58-64006a7986d3 (hyperv_transport.c srv_id_template;
// the Windows registration rule of make-integration-service.md).
func ServiceID(port uint32) vmbus.GUID { return vmbus.HvSockServiceID(port) }

// ServicePort returns the port of a service GUID; ok is false when the GUID
// does not follow the template (Linux ignores such offers).
func ServicePort(g vmbus.GUID) (port uint32, ok bool) { return vmbus.HvSockPort(g) }
