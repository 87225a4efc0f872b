package uio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The simulator's hello (docs/uio-contract.md §3.2):
// "VMBUSUIO", u32 version, u32 map count, little-endian, with one
// SCM_RIGHTS descriptor per map.
const (
	helloMagic   = "VMBUSUIO"
	helloVersion = 1
	helloLen     = len(helloMagic) + 4 + 4
)

// Open opens the device node of info, R/dev/uioN, and maps every map.
//
// On a real system the node is the kernel's character device: it is opened
// non-blocking and map K is mmapped at offset K pages (docs/protocol/vmbus-ring.md §1.2).
// In the simulator it is a SOCK_SEQPACKET socket: Open connects, sends
// opts.RingSizes if set, receives the hello with one descriptor per map and
// maps each from offset 0. Either way opening is what opens the channel.
func Open(info Info, opts Options) (*Device, error) {
	path := info.NodePath()
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("uio: open %s: %w", path, err)
	}
	switch fi.Mode().Type() {
	case fs.ModeDevice | fs.ModeCharDevice:
		return openChar(info, path, opts)
	case fs.ModeSocket:
		return openSocket(info, path, opts)
	}
	return nil, fmt.Errorf("uio: open %s: not a character device or socket (%v)", path, fi.Mode().Type())
}

// openChar opens the kernel's /dev/uioN.
func openChar(info Info, path string, opts Options) (*Device, error) {
	if opts.RingSizes != [2]uint32{} {
		return nil, fmt.Errorf("uio: open %s: ring sizes can only be sent to the simulator's socket", path)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("uio: open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		unix.Close(fd)
		if err == nil {
			err = errors.New("no longer a character device")
		}
		return nil, fmt.Errorf("uio: open %s: %w", path, err)
	}
	mems := make([][]byte, 0, len(info.Maps))
	for _, m := range info.Maps {
		mem, err := mmapShared(fd, charMapOffset(m.Index), m.Size)
		if err != nil {
			munmapAll(mems)
			unix.Close(fd)
			return nil, fmt.Errorf("uio: open %s: map%d %q: %w", path, m.Index, m.Name, err)
		}
		if opts.prefaults(m) {
			prefault(mem)
		}
		mems = append(mems, mem)
	}
	// Non-blocking, so os.NewFile registers it with the netpoller.
	return newDevice(info, path, os.NewFile(uintptr(fd), path), false, mems)
}

// openSocket connects to the simulator's socket and takes the hello.
func openSocket(info Info, path string, opts Options) (*Device, error) {
	timeout := opts.HelloTimeout
	if timeout <= 0 {
		timeout = DefaultHelloTimeout
	}
	deadline := time.Now().Add(timeout)
	c, err := (&net.Dialer{Deadline: deadline}).Dial("unixpacket", path)
	if err != nil {
		return nil, fmt.Errorf("uio: open %s: %w", path, err)
	}
	conn := c.(*net.UnixConn)
	mems, err := takeHello(conn, info, opts, deadline, timeout)
	if err != nil {
		conn.Close()
		if isRescind(err) {
			return nil, fmt.Errorf("uio: open %s: %w (%w)", path, ErrRescinded, err)
		}
		return nil, fmt.Errorf("uio: open %s: %w", path, err)
	}
	return newDevice(info, path, conn, true, mems)
}

// takeHello sends the ring sizes if any, reads the hello and maps its
// descriptors, which it closes before returning.
func takeHello(conn *net.UnixConn, info Info, opts Options, deadline time.Time, timeout time.Duration) ([][]byte, error) {
	if opts.RingSizes != [2]uint32{} {
		var b [8]byte
		binary.LittleEndian.PutUint32(b[0:], opts.RingSizes[0])
		binary.LittleEndian.PutUint32(b[4:], opts.RingSizes[1])
		conn.SetWriteDeadline(deadline)
		if _, err := conn.Write(b[:]); err != nil {
			return nil, fmt.Errorf("send ring sizes: %w", err)
		}
		conn.SetWriteDeadline(time.Time{})
	}
	conn.SetReadDeadline(deadline)
	defer conn.SetReadDeadline(time.Time{})

	want := len(info.Maps)
	var buf [helloLen + 1]byte                      // one spare byte to notice a long hello
	oob := make([]byte, unix.CmsgSpace(4*(want+8))) // room for surplus descriptors, to count them
	n, oobn, flags, _, err := conn.ReadMsgUnix(buf[:], oob)
	fds := rightsOf(oob[:oobn])
	defer closeAll(fds)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, fmt.Errorf("no hello within %v: %w", timeout, err)
	case err != nil:
		return nil, fmt.Errorf("read hello: %w", err)
	case n == 0 && oobn == 0:
		return nil, fmt.Errorf("closed before the hello: %w", io.EOF)
	}
	if err := checkHello(buf[:n], flags, len(fds), want); err != nil {
		return nil, err
	}
	mems := make([][]byte, 0, want)
	for i, m := range info.Maps {
		mem, err := mapHelloFD(fds[i], m)
		if err != nil {
			munmapAll(mems)
			return nil, err
		}
		if opts.prefaults(m) {
			prefault(mem)
		}
		mems = append(mems, mem)
	}
	return mems, nil
}

// checkHello validates the hello message b with the given recvmsg flags
// and descriptor count against want maps.
func checkHello(b []byte, flags, nfds, want int) error {
	switch {
	case flags&unix.MSG_TRUNC != 0 || len(b) != helloLen:
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadHello, len(b), helloLen)
	case string(b[:len(helloMagic)]) != helloMagic:
		return fmt.Errorf("%w: magic %q", ErrBadHello, b[:len(helloMagic)])
	}
	version := binary.LittleEndian.Uint32(b[8:])
	k := binary.LittleEndian.Uint32(b[12:])
	switch {
	case version != helloVersion:
		return fmt.Errorf("%w: version %d, want %d", ErrBadHello, version, helloVersion)
	case uint64(k) != uint64(want):
		return fmt.Errorf("%w: %d maps, sysfs has %d", ErrBadHello, k, want)
	case flags&unix.MSG_CTRUNC != 0:
		return fmt.Errorf("%w: too many descriptors", ErrBadHello)
	case nfds != want:
		return fmt.Errorf("%w: %d descriptors for %d maps", ErrBadHello, nfds, want)
	}
	return nil
}

// mapHelloFD maps the descriptor of map m from offset 0 for its sysfs size,
// after checking the object behind it is that large.
func mapHelloFD(fd int, m Map) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("map%d %q: %w", m.Index, m.Name, err)
	}
	if st.Size < 0 || uint64(st.Size) < m.Size {
		return nil, fmt.Errorf("%w: map%d %q: descriptor holds %d bytes, map is %d",
			ErrBadHello, m.Index, m.Name, st.Size, m.Size)
	}
	mem, err := mmapShared(fd, 0, m.Size)
	if err != nil {
		return nil, fmt.Errorf("map%d %q: %w", m.Index, m.Name, err)
	}
	return mem, nil
}

// rightsOf returns every descriptor passed in the control messages oob.
func rightsOf(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
