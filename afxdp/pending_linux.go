//go:build linux

package afxdp

// RxPending reports whether the RX ring holds frames Recv has not taken
// yet. It reads only the ring's two shared indices, takes none of the
// receive side's locks and makes no system call, so a loop polling many
// sockets (or one that also polls other rings) can call it from any
// goroutine while another one receives. On a closed socket it reports
// false.
func (s *Socket) RxPending() bool {
	s.fdMu.RLock()
	defer s.fdMu.RUnlock()
	if s.fd < 0 {
		return false // closed: the rings may be unmapped
	}
	r := &s.x.rx.m
	return r.producer.Load() != r.consumer.Load()
}
