package sim

import (
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/sim/hvsockhost"
	"github.com/vmbusd/vmbusd/sim/netvsp"
)

// Host is a simulated Hyper-V host: the bus of package sim/bus (devices,
// channels, sysfs, the uio device nodes) with the services this package
// assembles on it, the NetVSP behind synthetic NICs and the hv_sock host.
// A Host is safe for concurrent use.
type Host struct {
	*bus.Host
}

// New creates the tree under cfg.Root and returns a host with no devices.
func New(cfg Config) (*Host, error) {
	h, err := bus.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Host{h}, nil
}

// NewTemp is New with a fresh root directory of its own, which Close
// removes (bus.NewTemp).
func NewTemp(cfg Config) (*Host, error) {
	h, err := bus.NewTemp(cfg)
	if err != nil {
		return nil, err
	}
	return &Host{h}, nil
}

// AddNIC offers a synthetic NIC whose NetVSP runs on this host.
func (h *Host) AddNIC(cfg NICConfig) (*NIC, error) { return netvsp.AddNIC(h.Host, cfg) }

// StartHvSock starts the hv_sock host: its transport and front sockets
// under the root, and an hv_sock channel device for every connection.
func (h *Host) StartHvSock(cfg HvSockConfig) (*HvSock, error) { return hvsockhost.Start(h.Host, cfg) }

// The hv_sock host's names, as the callers of package sim know them
// (package sim/hvsockhost documents each under its own name).
type (
	HvSock         = hvsockhost.Host
	HvSockConfig   = hvsockhost.Config
	HvSockStats    = hvsockhost.Stats
	HvSockConn     = hvsockhost.Conn
	HvSockListener = hvsockhost.Listener
)

// HvSockMalformed is hvsockhost.Malformed.
var HvSockMalformed = hvsockhost.Malformed
