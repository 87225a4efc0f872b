package hvsock_test

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/nettest"
)

// TestConnNettest runs x/net/nettest's conformance suite with the guest's
// Conn as the connection under test and the simulated host's end as its
// peer, for a guest-initiated and a host-initiated connection.
func TestConnNettest(t *testing.T) {
	e := newTestEnv(t, hvsockCfg())
	cfg := e.cfg
	// CloseTimeout closes the guest end while the host keeps its side
	// open until the test's stop: Close lingers that long.
	cfg.Linger = 200 * time.Millisecond
	port := uint32(4000)
	t.Run("GuestInitiated", func(t *testing.T) {
		nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
			port++
			g, h := e.pair(t, cfg, port)
			return g, h, func() { g.Close(); h.Close() }, nil
		})
	})
	t.Run("HostInitiated", func(t *testing.T) {
		l, err := cfg.Listen(5000)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
			g, h := e.acceptPair(t, l, 5000)
			return g, h, func() { g.Close(); h.Close() }, nil
		})
	})
	// The host end is a net.Conn too; running the suite on it checks the
	// simulator against the same contract.
	t.Run("HostEnd", func(t *testing.T) {
		nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
			port++
			g, h := e.pair(t, cfg, port)
			return h, g, func() { g.Close(); h.Close() }, nil
		})
	})
}

func hvsockCfg() (c simHvSockConfig) { return }
