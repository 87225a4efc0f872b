package bus

import (
	"fmt"
	"strings"
)

// Profile selects which uio_hv_generic behaviour the simulated kernel has.
// The differences are listed in docs/protocol/vmbus-ring.md §1.1, §1.4 and §1.5;
// the methods below answer one question each so that the host logic never
// compares profiles directly.
//
// The zero value means "the default" (DefaultProfile, the newest): Config
// and the command line resolve it. Profile is a plain value, safe to copy
// and to use from any goroutine.
type Profile int

const (
	// ProfileLegacy is uio_hv_generic before 6.10 ("V-old"): the probe
	// needs a monitored channel, the kernel masks the inbound ring on
	// every interrupt, and write(1) only unmasks the primary (no host
	// signal).
	ProfileLegacy Profile = iota + 1
	// Profile6_10 is 6.10 up to "Set event for all channels" ("V-mid"):
	// write(1) also signals a non-monitored primary.
	Profile6_10
	// Profile6_16 is d062463edf17 up to the CVE-2025-40048 fix
	// ("V-allch"): write applies to the primary and every sub-channel,
	// and sub-channel interrupts arrive on the primary's uio device.
	Profile6_16
	// Profile6_18 is the CVE-2025-40048 fix ("V-6.18+"): user space owns
	// interrupt_mask; the kernel never writes it.
	Profile6_18
)

// DefaultProfile is the newest kernel (docs/uio-contract.md §1.2: the default is the newest).
const DefaultProfile = Profile6_18

// profileNames is indexed by Profile.
var profileNames = [...]string{
	ProfileLegacy: "legacy",
	Profile6_10:   "6.10",
	Profile6_16:   "6.16",
	Profile6_18:   "6.18",
}

// Profiles returns every profile, oldest first.
func Profiles() []Profile {
	return []Profile{ProfileLegacy, Profile6_10, Profile6_16, Profile6_18}
}

// ParseProfile parses a profile name as printed by String: "legacy", "6.10",
// "6.16" or "6.18".
func ParseProfile(s string) (Profile, error) {
	t := strings.TrimSpace(s)
	for p, name := range profileNames {
		if name != "" && t == name {
			return Profile(p), nil
		}
	}
	return 0, fmt.Errorf("sim: unknown kernel profile %q (valid: %s)", s, strings.Join(profileNames[ProfileLegacy:], ", "))
}

func (p Profile) valid() bool { return p >= ProfileLegacy && int(p) < len(profileNames) }

// orDefault resolves the zero Profile to DefaultProfile.
func (p Profile) orDefault() Profile {
	if p == 0 {
		return DefaultProfile
	}
	return p
}

// String returns the profile's name, as accepted by ParseProfile.
func (p Profile) String() string {
	if !p.valid() {
		return fmt.Sprintf("Profile(%d)", int(p))
	}
	return profileNames[p]
}

// MarshalText implements encoding.TextMarshaler.
func (p Profile) MarshalText() ([]byte, error) {
	if !p.valid() {
		return nil, fmt.Errorf("sim: invalid kernel profile %d", int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler (see ParseProfile).
func (p *Profile) UnmarshalText(b []byte) error {
	v, err := ParseProfile(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// OSRelease returns what R/proc/sys/kernel/osrelease says under this profile
// (without the trailing newline). The legacy profile reports a 5.15 kernel,
// the newest long-term release before 6.10.
func (p Profile) OSRelease() string {
	switch p {
	case ProfileLegacy:
		return "5.15.0-vmbusd-sim"
	case Profile6_10:
		return "6.10.0-vmbusd-sim"
	case Profile6_16:
		return "6.16.0-vmbusd-sim"
	default:
		return "6.18.0-vmbusd-sim"
	}
}

// MasksOnInterrupt reports whether the kernel writes the inbound ring's
// interrupt_mask = 1 after opening a channel and in the channel callback, so
// that every interrupt masks the ring until user space writes 1 again
// (hv_uio_open, hv_uio_new_channel, hv_uio_channel_cb before e29587c07537;
// docs/protocol/vmbus-ring.md §1.5). True for every profile but 6.18.
func (p Profile) MasksOnInterrupt() bool { return p < Profile6_18 }

// ControlSignalsHost reports whether an irqcontrol write(1) signals the host
// for a channel that is not monitored (hv_uio_irqcontrol: vmbus_setevent when
// !monitor_allocated, 6.10+; docs/protocol/vmbus-ring.md §1.4).
func (p Profile) ControlSignalsHost() bool { return p >= Profile6_10 }

// ControlAllChannels reports whether irqcontrol applies to the primary and
// every sub-channel of the device rather than to the primary only
// (d062463edf17 set_event(); docs/protocol/vmbus-ring.md §1.4).
func (p Profile) ControlAllChannels() bool { return p >= Profile6_16 }

// SubchannelInterrupts reports whether a sub-channel's interrupt is delivered
// on the primary's uio device (d062463edf17; docs/protocol/vmbus-ring.md §1.5). Before that
// the kernel has no uio device to notify for a sub-channel (and the 6.12.y
// backport without it oopsed), so such interrupts are simply not seen.
func (p Profile) SubchannelInterrupts() bool { return p >= Profile6_16 }

// RequiresMonitor reports whether uio_hv_generic's probe fails (-ENOTSUPP,
// "vmbus channel requires hypercall") for a channel without a monitor id
// (V-old; docs/protocol/vmbus-ring.md §1.1).
func (p Profile) RequiresMonitor() bool { return p == ProfileLegacy }

// NICBuffersOnly reports whether the recv:/send: maps exist only for the
// synthetic NIC; the legacy driver allocated them for every bound device
// (hv_uio_probe; docs/protocol/vmbus-ring.md §1.2).
func (p Profile) NICBuffersOnly() bool { return p >= Profile6_10 }

// UnregistersOnRescind reports whether a primary rescind unregisters the
// device, so that its sysfs directory and /dev/uioN disappear (hv_uio_rescind
// calls vmbus_device_unregister from 6.11; docs/protocol/vmbus-ring.md §1.9). On older
// kernels the device stays, its fd returning EIO.
func (p Profile) UnregistersOnRescind() bool { return p >= Profile6_16 }
