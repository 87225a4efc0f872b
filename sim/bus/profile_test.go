package bus

import (
	"strings"
	"testing"
)

func TestProfileBehaviourFollowsKernelTable(t *testing.T) {
	// docs/protocol/vmbus-ring.md §1.1, §1.4, §1.5, §1.9.
	for _, tc := range []struct {
		p                                                       Profile
		name, osrelease                                         string
		masks, signals, allCh, subIntr, monitor, nicBufs, unreg bool
	}{
		{ProfileLegacy, "legacy", "5.15.0-vmbusd-sim", true, false, false, false, true, false, false},
		{Profile6_10, "6.10", "6.10.0-vmbusd-sim", true, true, false, false, false, true, false},
		{Profile6_16, "6.16", "6.16.0-vmbusd-sim", true, true, true, true, false, true, true},
		{Profile6_18, "6.18", "6.18.0-vmbusd-sim", false, true, true, true, false, true, true},
	} {
		p := tc.p
		if p.String() != tc.name || p.OSRelease() != tc.osrelease {
			t.Errorf("%v: String %q OSRelease %q, want %q %q", p, p.String(), p.OSRelease(), tc.name, tc.osrelease)
		}
		got := []bool{p.MasksOnInterrupt(), p.ControlSignalsHost(), p.ControlAllChannels(), p.SubchannelInterrupts(), p.RequiresMonitor(), p.NICBuffersOnly(), p.UnregistersOnRescind()}
		want := []bool{tc.masks, tc.signals, tc.allCh, tc.subIntr, tc.monitor, tc.nicBufs, tc.unreg}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%v: behaviour %d = %v, want %v", p, i, got[i], want[i])
			}
		}
	}
	if DefaultProfile != Profile6_18 {
		t.Errorf("DefaultProfile = %v, want the newest", DefaultProfile)
	}
}

func TestParseProfileRoundTrip(t *testing.T) {
	ps := Profiles()
	if len(ps) != 4 {
		t.Fatalf("Profiles() = %v", ps)
	}
	for _, p := range ps {
		q, err := ParseProfile(p.String())
		if err != nil || q != p {
			t.Errorf("ParseProfile(%q) = %v, %v", p.String(), q, err)
		}
		var r Profile
		b, err := p.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.UnmarshalText(b); err != nil || r != p {
			t.Errorf("text round trip of %v: %v, %v", p, r, err)
		}
	}
}

func TestParseProfileErrorListsValidNames(t *testing.T) {
	for _, s := range []string{"", "6.12", "LEGACY", "6.18.1"} {
		_, err := ParseProfile(s)
		if err == nil {
			t.Errorf("ParseProfile(%q) succeeded", s)
			continue
		}
		if !strings.Contains(err.Error(), "legacy, 6.10, 6.16, 6.18") {
			t.Errorf("ParseProfile(%q) error %q does not list the valid names", s, err)
		}
	}
	if s := Profile(9).String(); s != "Profile(9)" {
		t.Errorf("String of an invalid profile: %q", s)
	}
}
