package netvsp

// VF scenarios: the ways a real host takes an accelerated-networking VF
// away and brings it back, each one a sequence of the stand-in's steps
// (vf.go). Select them with VF.Run or `vmbusd sim --vf-scenario`.
//
//	scenario            what the host does
//	service             graceful servicing: SWITCH_DATA_PATH{0} to the guest (if it is on
//	                    the VF), VF_ASSOCIATION{0}, RemoveDelay later the VF goes; Away
//	                    later it returns in Config.Order and is offered again
//	surprise            the VF's netdev vanishes first; NoticeDelay later the host switches
//	                    the guest to synthetic and withdraws the association; Away later
//	                    the VF returns
//	slow-probe          graceful removal, then the return with the association first and the
//	                    netdev ProbeDelay later (at least 2 s)
//	flap                service 10 times, Away/10 apart
//	recovery            the VF's link goes down and comes back Away later, without removal
//	association-first   graceful removal, return with the association before the netdev
//	netdev-first        graceful removal, return with the netdev before the association

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// VFScenario names one of the scenarios above.
type VFScenario int

// The scenarios.
const (
	VFService VFScenario = iota + 1
	VFSurprise
	VFSlowProbe
	VFFlap
	VFRecovery
	VFAssocFirst
	VFNetdevFirstScenario
)

var vfScenarioNames = map[VFScenario]string{
	VFService:             "service",
	VFSurprise:            "surprise",
	VFSlowProbe:           "slow-probe",
	VFFlap:                "flap",
	VFRecovery:            "recovery",
	VFAssocFirst:          "association-first",
	VFNetdevFirstScenario: "netdev-first",
}

func (s VFScenario) String() string {
	if n, ok := vfScenarioNames[s]; ok {
		return n
	}
	return fmt.Sprintf("vfscenario(%d)", int(s))
}

// AllVFScenarios lists the scenarios.
func AllVFScenarios() []VFScenario {
	return []VFScenario{VFService, VFSurprise, VFSlowProbe, VFFlap, VFRecovery, VFAssocFirst, VFNetdevFirstScenario}
}

// ParseVFScenario takes a scenario's name as String prints it.
func ParseVFScenario(s string) (VFScenario, error) {
	var names []string
	for _, sc := range AllVFScenarios() {
		if sc.String() == s {
			return sc, nil
		}
		names = append(names, sc.String())
	}
	return 0, fmt.Errorf("sim: unknown VF scenario %q (valid: %s)", s, strings.Join(names, ", "))
}

// FlapCycles is how many remove/add cycles the flap scenario runs.
const FlapCycles = 10

// minSlowProbe is the least probe time of the slow-probe scenario.
const minSlowProbe = 2 * time.Second

// Run plays a scenario to its end (the VF present again, or its link up
// again), or until ctx ends.
func (v *VF) Run(ctx context.Context, sc VFScenario) error {
	away := v.cfg.Away
	var err error
	switch sc {
	case VFService:
		err = v.Service(ctx, away, v.cfg.Order)
	case VFSurprise:
		if err = v.Remove(ctx, true); err == nil {
			if err = sleepCtx(ctx, v.cfg.Clock, away); err == nil {
				err = v.Add(ctx, v.cfg.Order)
			}
		}
	case VFSlowProbe:
		err = v.service(ctx, away, VFAssociationFirst, max(v.cfg.ProbeDelay, minSlowProbe))
	case VFFlap:
		err = v.Flap(ctx, FlapCycles, away/FlapCycles)
	case VFRecovery:
		if err = v.SetLink(ctx, false); err == nil {
			if err = sleepCtx(ctx, v.cfg.Clock, away); err == nil {
				err = v.SetLink(ctx, true)
			}
		}
	case VFAssocFirst:
		err = v.Service(ctx, away, VFAssociationFirst)
	case VFNetdevFirstScenario:
		err = v.Service(ctx, away, VFNetdevFirst)
	default:
		return fmt.Errorf("sim: vf: unknown scenario %d", sc)
	}
	if err == nil {
		v.note(VFScenarioCompleted, sc.String())
	}
	return err
}

// Service removes the VF gracefully, keeps it away for away, and brings
// it back in the given order.
func (v *VF) Service(ctx context.Context, away time.Duration, order VFOrder) error {
	return v.service(ctx, away, order, v.cfg.ProbeDelay)
}

func (v *VF) service(ctx context.Context, away time.Duration, order VFOrder, probe time.Duration) error {
	if err := v.Remove(ctx, false); err != nil {
		return err
	}
	if err := sleepCtx(ctx, v.cfg.Clock, away); err != nil {
		return err
	}
	return v.add(ctx, order, probe)
}

// Flap runs cycles graceful remove/add cycles, the VF away for away each
// time.
func (v *VF) Flap(ctx context.Context, cycles int, away time.Duration) error {
	for i := 0; i < cycles; i++ {
		if err := v.Service(ctx, away, v.cfg.Order); err != nil {
			return fmt.Errorf("sim: vf: flap %d: %w", i+1, err)
		}
	}
	return nil
}

// Toggle is a servicing toggle (dpdk-guest's SERVICE_SIG): a present VF is
// withdrawn gracefully and taken away; an absent one comes back and is
// offered again. It reports whether the VF is present afterwards.
func (v *VF) Toggle(ctx context.Context) (bool, error) {
	if v.Present() {
		return false, v.Remove(ctx, false)
	}
	return true, v.Add(ctx, v.cfg.Order)
}
