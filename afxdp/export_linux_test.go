//go:build linux

package afxdp

import "time"

// SetProbeInterval changes how often a sleeping Wait checks that the
// socket is still bound; negative: never, so only the netlink event can
// report a removed device.
func SetProbeInterval(s *Socket, d time.Duration) {
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	s.w.probe = d
}
