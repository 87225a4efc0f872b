package tap

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// The raw read and write keep read(2) and write(2)'s results: bytes
// moved, EAGAIN on an empty non-blocking fd, the errno of a bad fd.
func TestRawReadWrite(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	buf := make([]byte, 64)
	if n, err := rawRead(p[0], buf); err != unix.EAGAIN || n != -1 {
		t.Fatalf("read of an empty pipe = %d, %v; want -1, EAGAIN", n, err)
	}
	msg := []byte("a frame for the kernel")
	if n, err := rawWrite(p[1], msg); err != nil || n != len(msg) {
		t.Fatalf("write = %d, %v; want %d, nil", n, err, len(msg))
	}
	if n, err := rawWrite(p[1], nil); err != nil || n != 0 {
		t.Fatalf("empty write = %d, %v; want 0, nil", n, err)
	}
	n, err := rawRead(p[0], buf)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("read = %q, %v; want %q", buf[:max(n, 0)], err, msg)
	}
	if n, err := rawRead(-1, buf); err != unix.EBADF || n != -1 {
		t.Fatalf("read of fd -1 = %d, %v; want -1, EBADF", n, err)
	}
	if n, err := rawWrite(-1, msg); err != unix.EBADF || n != -1 {
		t.Fatalf("write to fd -1 = %d, %v; want -1, EBADF", n, err)
	}
}
