package rawio

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// The raw calls keep the system calls' results: bytes moved, EAGAIN on an
// empty non-blocking fd, the errno of a bad fd.
func TestReadWrite(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	buf := make([]byte, 64)
	if n, err := Read(p[0], buf); err != unix.EAGAIN || n != -1 {
		t.Fatalf("read of an empty pipe = %d, %v; want -1, EAGAIN", n, err)
	}
	msg := []byte("a frame for the kernel")
	if n, err := Write(p[1], msg); err != nil || n != len(msg) {
		t.Fatalf("write = %d, %v; want %d, nil", n, err, len(msg))
	}
	if n, err := Write(p[1], nil); err != nil || n != 0 {
		t.Fatalf("empty write = %d, %v; want 0, nil", n, err)
	}
	n, err := Read(p[0], buf)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("read = %q, %v; want %q", buf[:max(n, 0)], err, msg)
	}
	head, tail := []byte("header|"), []byte("payload")
	iov := make([]unix.Iovec, 2)
	iov[0].Base, iov[1].Base = &head[0], &tail[0]
	iov[0].SetLen(len(head))
	iov[1].SetLen(len(tail))
	if n, err := Writev(p[1], iov); err != nil || n != len(head)+len(tail) {
		t.Fatalf("writev = %d, %v; want %d, nil", n, err, len(head)+len(tail))
	}
	if n, err := Read(p[0], buf); err != nil || string(buf[:n]) != "header|payload" {
		t.Fatalf("read after writev = %q, %v", buf[:max(n, 0)], err)
	}
	if n, err := Read(-1, buf); err != unix.EBADF || n != -1 {
		t.Fatalf("read of fd -1 = %d, %v; want -1, EBADF", n, err)
	}
	if n, err := Write(-1, msg); err != unix.EBADF || n != -1 {
		t.Fatalf("write to fd -1 = %d, %v; want -1, EBADF", n, err)
	}
	if n, err := Writev(-1, iov); err != unix.EBADF || n != -1 {
		t.Fatalf("writev to fd -1 = %d, %v; want -1, EBADF", n, err)
	}
}
