package uio

import (
	"errors"
	"net"
	"os"
)

// ErrRescinded reports that the device went away: the host rescinded the
// channel or the device was removed. On a real device it stands for EIO from
// read or write and EPOLLERR from poll (docs/protocol/vmbus-ring.md §1.9); on the
// simulator's socket for end-of-file, ECONNRESET and EPIPE. The mappings must
// not be used any more; Close the Device and wait for a new offer.
var ErrRescinded = errors.New("uio: device rescinded")

// ErrBadHello reports a malformed hello from the simulator's socket: wrong
// length, magic or version, a map count or file descriptor count that does
// not match sysfs, or a descriptor smaller than its map.
var ErrBadHello = errors.New("uio: bad simulator hello")

// errClosed is returned by a Device used after (or during) Close. It matches
// both os.ErrClosed and net.ErrClosed, whichever the caller tests for.
var errClosed error = closedError{}

type closedError struct{}

func (closedError) Error() string { return "uio: device closed" }

func (closedError) Is(target error) bool {
	return target == os.ErrClosed || target == net.ErrClosed
}
