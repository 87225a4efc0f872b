package wire

import (
	"fmt"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Context ids (AF_VSOCK's VMADDR_CID_*). On Hyper-V the guest has no CID of
// its own: it binds and listens on CIDAny and reaches only CIDHost; the VM
// id is never carried over VMBus (docs/protocol/hvsock.md §1.1).
const (
	CIDHypervisor = 0
	CIDLocal      = 1
	CIDHost       = 2
	CIDAny        = 0xFFFFFFFF
)

// PortAny is VMADDR_PORT_ANY: a port of the transport's choosing.
const PortAny = 0xFFFFFFFF

// ServiceID returns the hv_sock service GUID of a port: the template
// 00000000-facb-11e6-bd58-64006a7986d3 with Data1 = port, so port 2761 is
// 00000ac9-facb-11e6-bd58-64006a7986d3 (docs/protocol/hvsock.md §1.1,
// srv_id_template). The template itself lives in package vmbus, which
// names device classes by it.
func ServiceID(port uint32) vmbus.GUID { return vmbus.HvSockServiceID(port) }

// ServicePort returns the port of a service GUID; ok is false when the GUID
// does not follow the template (Linux ignores such offers).
func ServicePort(g vmbus.GUID) (port uint32, ok bool) { return vmbus.HvSockPort(g) }

// Addr is one end of an hv_sock connection on the VMBus: a context id and
// a port, the port standing for the service GUID ServiceID(Port). It
// implements net.Addr with the network "hvsock"; a plain value, safe to
// copy and compare.
type Addr struct {
	ContextID uint32
	Port      uint32
}

// Network implements net.Addr.
func (a *Addr) Network() string { return "hvsock" }

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
