package netvsp

// The NetVSP's side of the VF stand-in (vf.go): offering and withdrawing
// the association on request, and the steps it reports to the stand-in's
// event log.

import (
	"context"
	"fmt"
)

// VF returns the NIC's VF stand-in, or nil when the NIC has none
// (NICConfig.VFStandIn).
func (n *NIC) VF() *VF { return n.vf }

// offerVF offers (present) or withdraws the VF's association and returns
// once the session's primary loop has done it: withdrawing switches a
// guest on the VF back to synthetic first (SWITCH_DATA_PATH{0}), then
// sends VF_ASSOCIATION{0}. Without a session (the guest has not opened the
// device) only the state changes; the next session's RNDIS initialisation
// offers it.
func (n *NIC) offerVF(ctx context.Context, present bool) error {
	if n.cfg.VF == 0 {
		return fmt.Errorf("sim: nic: no VF configured")
	}
	n.linkMu.Lock()
	n.vfPresent = present
	n.linkMu.Unlock()
	ss := n.sess.Load()
	if ss == nil {
		return nil
	}
	done := make(chan struct{})
	ss.post(ctlEvent{kind: evVF, up: present, done: done})
	select {
	case <-done:
		return nil
	case <-ss.ctx.Done():
		return nil // the session ended; the next one starts from the state
	case <-ctx.Done():
		return ctx.Err()
	}
}

// vfNote records a NetVSP step in the VF stand-in's event log.
func (n *NIC) vfNote(kind VFEventKind, detail string) {
	if n.vf != nil {
		n.vf.note(kind, detail)
	}
}
