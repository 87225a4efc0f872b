// Package rawio makes read(2), write(2) and writev(2) on non-blocking file
// descriptors as raw system calls.
//
// A TAP or packet-socket read or write never blocks on a non-blocking fd,
// but one of 64 KiB runs the kernel's receive path or copy for tens of
// microseconds. Made through syscall.Syscall, that is long enough for the
// runtime's monitor to take the P away and start another thread for it,
// and the goroutine then waits for a P when the call returns: two thread
// wake-ups per large frame on a busy machine. A raw system call keeps the
// P, as a Go function running as long would. Use it only where the call
// cannot block.
package rawio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read is read(2): the bytes read, or -1 and the errno.
func Read(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// Write is write(2): the bytes written, or -1 and the errno.
func Write(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// Writev is writev(2) of iov: the bytes written, or -1 and the errno.
func Writev(fd int, iov []unix.Iovec) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
