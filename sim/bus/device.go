package bus

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/vmbusd/vmbusd/vmbus"
)

// A Service runs the host end of a device's protocol while a guest has the
// device open: the simulated NetVSP, hv_sock endpoint or test echo. Serve
// owns the session's channels until ctx ends (the guest closed the device,
// the host rescinded it) or it returns.
type Service interface {
	Serve(ctx context.Context, s *Session) error
}

// DeviceConfig describes a device to offer.
type DeviceConfig struct {
	Class    vmbus.GUID
	Instance vmbus.GUID // zero: a random one
	// NotMonitored offers the channel without a monitor id: the guest
	// signals it with write(1) on the uio fd (6.10+ kernels only).
	NotMonitored bool
	// RingSize is each direction's ring size, header page included
	// (uio_hv_generic gives 2 MiB; 0 means that).
	RingSize int
	// SubchannelRingSize is the ring size of sub-channels (uio opens them
	// with 2 MiB; 0 means that).
	SubchannelRingSize int
	// RecvBuffer and SendBuffer are the NIC receive and send buffer sizes
	// (31 MiB and 16 MiB on a real system), registered as GPADLs at probe
	// and shown as maps recv:<gpadl> and send:<gpadl>. Before 6.10 every
	// device got them; then only NICs. 0 = none.
	RecvBuffer, SendBuffer int
	// HvSock marks an hv_sock channel device whose opener chooses the ring
	// sizes (docs/uio-contract.md §7.3).
	HvSock bool
	// HvSockForGuestAccept is an hv_sock offer's is_for_guest_accept
	// (Linux: u.pipe.user_def[0]): set when the host initiated the
	// connection and a guest listener is to accept it.
	HvSockForGuestAccept bool
	// Admit, when not nil, runs at every open before the channel is set
	// up (the host accepting OPENCHANNEL); an error refuses the open: the
	// guest gets no hello.
	Admit func() error
	// Service runs the host end; nil means the device only echoes (Echo).
	Service Service
	// NUMANode is shown in numa_node.
	NUMANode int
	// Driver is the driver that has the device when it is offered:
	// DriverUIO ("" means that), DriverNetvsc (network class only: a
	// kernel NIC) or DriverNone (unbound). Sysfs writes move it later
	// (drivers.go).
	Driver string
	// IfName and MAC are the kernel netdev's name and address while
	// hv_netvsc has the device ("": the lowest free ethN; nil: derived
	// from the instance, see Device.MAC).
	IfName string
	MAC    net.HardwareAddr
}

// Device is one offered device. Safe for concurrent use.
type Device struct {
	host   *Host
	cfg    DeviceConfig
	path   string // R/sys/bus/vmbus/devices/<guid>
	relid  uint32
	mon    int
	uioN   int   // while bound to uio_hv_generic (under mu; drivers.go)
	node   *node // while bound to uio_hv_generic (under mu)
	faults Faults
	drv    devBinding // the driver that has the device (drivers.go)

	recvFile, sendFile   *os.File
	recvMem, sendMem     []byte
	recvGPADL, sendGPADL uint32

	mu        sync.Mutex
	sess      *Session
	rescinded bool
	gone      chan struct{} // closed when Rescind has finished
	opens     atomic.Uint64
}

// Standard sizes (docs/protocol/vmbus-ring.md §1.2-1.3).
const (
	DefaultRingSize   = 2 << 20
	DefaultRecvBuffer = 31 << 20
	DefaultSendBuffer = 16 << 20
)

// AddDevice offers a device bound to uio_hv_generic (or to cfg.Driver): its
// sysfs directory, uio node and R/dev/uioN socket appear.
func (h *Host) AddDevice(cfg DeviceConfig) (*Device, error) {
	if cfg.Instance.IsZero() {
		rand.Read(cfg.Instance[:])
		cfg.Instance[6] = cfg.Instance[6]&0x0f | 0x40
		cfg.Instance[8] = cfg.Instance[8]&0x3f | 0x80
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.SubchannelRingSize == 0 {
		cfg.SubchannelRingSize = DefaultRingSize
	}
	if cfg.RingSize%4096 != 0 || cfg.RingSize < 2*4096 {
		return nil, fmt.Errorf("sim: ring size %d: want a multiple of 4096, at least 8192", cfg.RingSize)
	}
	if cfg.Service == nil {
		cfg.Service = Echo{}
	}
	if err := cfg.fillDriver(); err != nil {
		return nil, err
	}
	if cfg.NotMonitored && cfg.Driver == DriverUIO && h.cfg.Profile.RequiresMonitor() {
		return nil, fmt.Errorf("sim: kernel profile %s: uio_hv_generic refuses a channel without a monitor id", h.cfg.Profile)
	}
	if !h.cfg.Profile.NICBuffersOnly() && cfg.RecvBuffer == 0 {
		cfg.RecvBuffer, cfg.SendBuffer = DefaultRecvBuffer, DefaultSendBuffer
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, fmt.Errorf("sim: host closed")
	}
	if _, dup := h.devs[cfg.Instance]; dup {
		h.mu.Unlock()
		return nil, fmt.Errorf("sim: device %s already offered", cfg.Instance)
	}
	d := &Device{host: h, cfg: cfg, relid: h.nextRelID, mon: -1, uioN: -1, gone: make(chan struct{})}
	h.nextRelID++
	if !cfg.NotMonitored {
		if d.mon = h.allocMonitorLocked(); d.mon < 0 {
			h.mu.Unlock()
			return nil, fmt.Errorf("sim: out of monitor ids")
		}
	}
	if cfg.RecvBuffer > 0 {
		d.recvGPADL, d.sendGPADL = h.nextGPADL, h.nextGPADL+1
		h.nextGPADL += 2
	}
	h.devs[cfg.Instance] = d
	h.mu.Unlock()
	for _, f := range h.cfg.Faults {
		d.SetFault(f, true) // before the offer: the first open sees it
	}
	if err := d.offer(); err != nil {
		h.mu.Lock()
		delete(h.devs, cfg.Instance)
		h.mu.Unlock()
		h.freeMonitor(d.mon)
		d.releaseBuffers()
		return nil, err
	}
	return d, nil
}

func (d *Device) offer() error {
	h := d.host
	var err error
	if d.cfg.RecvBuffer > 0 {
		// The NIC's host reads and writes its buffers on the data path, so
		// it maps them in full now (47 MiB at the standard sizes: tens of
		// milliseconds); other devices' buffers (every bound device has
		// them on kernels before 6.10) no protocol uses, and they stay
		// lazy rather than hold memory nothing touches.
		nic := d.cfg.Class == vmbus.ClassNetwork
		if d.recvFile, d.recvMem, err = newMemFile("recv", d.cfg.RecvBuffer, nic); err != nil {
			return err
		}
		if d.sendFile, d.sendMem, err = newMemFile("send", d.cfg.SendBuffer, nic); err != nil {
			return err
		}
	}
	d.path, err = writeDevice(h.cfg.Root, devAttrs{Class: d.cfg.Class, Instance: d.cfg.Instance,
		RelID: d.relid, MonitorID: d.mon, NUMANode: d.cfg.NUMANode,
		HvSock: d.cfg.HvSock, ForGuestAccept: d.cfg.HvSockForGuestAccept})
	if err != nil {
		return err
	}
	if err := writeChannel(d.path, chanAttrs{RelID: d.relid, MonitorID: d.mon}); err != nil {
		return err
	}
	// The device appears on the bus and its driver probes it (drivers.go).
	return d.probeOffered()
}

// Instance returns the device's instance GUID; Path its sysfs directory;
// RelID its primary channel's relid; MonitorID its monitor id or -1.
func (d *Device) Instance() vmbus.GUID { return d.cfg.Instance }
func (d *Device) Path() string         { return d.path }
func (d *Device) RelID() uint32        { return d.relid }
func (d *Device) MonitorID() int       { return d.mon }

// UIONode returns the path of the device's R/dev/uioN socket, or "" while
// uio_hv_generic does not have the device.
func (d *Device) UIONode() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.node == nil {
		return ""
	}
	return filepath.Join(d.host.cfg.Root, "dev", fmt.Sprintf("uio%d", d.uioN))
}

// Faults returns the device's fault switches.
func (d *Device) Faults() *Faults { return &d.faults }

// Session returns the guest's current open of the device, or nil.
func (d *Device) Session() *Session {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sess
}

// Opens counts how many times a guest opened the device.
func (d *Device) Opens() uint64 { return d.opens.Load() }

// Buffers returns the NIC receive and send buffers (host mappings) and
// their GPADL handles; nil when the device has none.
func (d *Device) Buffers() (recv, send []byte, recvGPADL, sendGPADL uint32) {
	return d.recvMem, d.sendMem, d.recvGPADL, d.sendGPADL
}

// open is the uio node's Open: a fresh channel with zeroed rings, as the
// kernel's first open() does (hv_uio_open -> vmbus_connect_ring).
func (d *Device) open(c *nodeConn, outSize, inSize uint32) ([]*os.File, error) {
	h := d.host
	if d.cfg.Admit != nil {
		if err := d.cfg.Admit(); err != nil {
			return nil, err
		}
	}
	out, in := d.cfg.RingSize, d.cfg.RingSize
	if d.cfg.HvSock {
		out, in = vmbus.ClampHvSockRing(outSize), vmbus.ClampHvSockRing(inSize)
		size := filepath.Join(d.path, "uio", fmt.Sprintf("uio%d", d.uioN), "maps", "map0", "size")
		if err := updateAttr(size, fmt.Sprintf("0x%016x\n", out+in)); err != nil {
			return nil, err
		}
	}
	s, err := newSession(d, c, out, in)
	if err != nil {
		return nil, err
	}
	files := []*os.File{s.ringFile, h.intFile, h.monFile}
	if d.recvFile != nil {
		files = append(files, d.recvFile, d.sendFile)
	}
	d.mu.Lock()
	d.sess = s
	d.mu.Unlock()
	d.opens.Add(1)
	s.start()
	return files, nil
}

// control is an irqcontrol write from the guest, applied per kernel profile
// (docs/protocol/vmbus-ring.md §1.4).
func (d *Device) control(c *nodeConn, v uint32) {
	s := d.Session()
	if s == nil || s.conn != c {
		return
	}
	s.irqControl(v != 0)
}

// closed is the last close() of the device: the channel and its
// sub-channels close (hv_uio_release -> vmbus_disconnect_ring).
func (d *Device) closed(c *nodeConn) {
	d.mu.Lock()
	s := d.sess
	if s != nil && s.conn == c {
		d.sess = nil
	}
	d.mu.Unlock()
	if s != nil && s.conn == c {
		s.stop()
	}
}

// Rescind takes the device away: the guest's uio fd reports the rescind,
// the host stops serving, and the device leaves the sysfs tree (6.16+
// unregisters it; older kernels keep it unbound).
func (d *Device) Rescind() error {
	d.mu.Lock()
	if d.rescinded {
		d.mu.Unlock()
		<-d.gone // a concurrent Rescind: return once the device is gone
		return nil
	}
	d.rescinded = true
	offered := d.drv.offered
	d.mu.Unlock()
	defer close(d.gone)
	if !offered {
		return nil // still being offered: the offer sees the flag and undoes itself
	}
	h := d.host
	// Unbind first: a guest holding the uio node sees EOF and its session
	// stops; a kernel NIC's netdev goes (drivers.go).
	err := d.detachForRescind()
	if e := removeDevice(h.cfg.Root, d.path); e != nil && err == nil {
		err = e
	}
	h.mu.Lock()
	delete(h.devs, d.cfg.Instance)
	h.mu.Unlock()
	h.freeMonitor(d.mon)
	d.releaseBuffers()
	h.log.Info("device rescinded", "instance", d.cfg.Instance.String())
	return err
}

func (d *Device) releaseBuffers() {
	if d.recvFile != nil {
		unmapMem(d.recvMem)
		unmapMem(d.sendMem)
		d.recvFile.Close()
		d.sendFile.Close()
		d.recvFile, d.sendFile = nil, nil
	}
}
