package hvsock

import (
	"math/rand/v2"
	"sync"
	"syscall"
)

// Ports of the VMBus transport are a per-root namespace of this process:
// the kernel would keep them per network namespace, and a listener or a
// connection's local port is its service or endpoint GUID on the bus.
var ports struct {
	mu   sync.Mutex
	used map[string]map[uint32]bool
}

// Ephemeral ports, as the vsock core allocates them: a random start above
// the reserved range, then upwards, wrapping (__vsock_bind_connectible).
const (
	lastReservedPort = 1023
	maxPort          = PortAny - 1
)

// reservePort takes port under root; syscall.EADDRINUSE if it is taken.
func reservePort(root string, port uint32) (release func(), err error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	m := ports.used[root]
	if m == nil {
		if ports.used == nil {
			ports.used = map[string]map[uint32]bool{}
		}
		m = map[uint32]bool{}
		ports.used[root] = m
	}
	if m[port] {
		return nil, syscall.EADDRINUSE
	}
	m[port] = true
	return releaser(root, port), nil
}

// ephemeralPort takes a free port above the reserved range.
func ephemeralPort(root string) (port uint32, release func(), err error) {
	start := lastReservedPort + 1 + rand.Uint32N(maxPort-lastReservedPort)
	p := start
	for {
		if rel, err := reservePort(root, p); err == nil {
			return p, rel, nil
		}
		p++
		if p > maxPort {
			p = lastReservedPort + 1
		}
		if p == start {
			return 0, nil, syscall.EADDRNOTAVAIL
		}
	}
}

func releaser(root string, port uint32) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			ports.mu.Lock()
			delete(ports.used[root], port)
			ports.mu.Unlock()
		})
	}
}
