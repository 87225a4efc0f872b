package netvsc

import (
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // "" valid
	}{
		{"zero value", Config{}, ""},
		{"largest MTU", Config{MTU: MaxMTU}, ""},
		{"MTU above the driver's maximum", Config{MTU: MaxMTU + 1}, "MTU 9203 outside 68..9202"},
		{"MTU below IPv4's minimum", Config{MTU: MinMTU - 1}, "MTU 67"},
		{"most queues", Config{Queues: nvsp.MaxSubchannels}, ""},
		{"too many queues", Config{Queues: nvsp.MaxSubchannels + 1}, "65 queues"},
		{"negative queues", Config{Queues: -1}, "-1 queues"},
		{"unknown mode", Config{Mode: Interrupt + 1}, "unknown mode(3)"},
		{"negative pool", Config{PoolPackets: -1}, "packet buffers -1"},
		{"short RSS key", Config{RSSKey: make([]byte, 39)}, "RSS key of 39 bytes"},
		{"VF auto with defaults", Config{VF: VFAuto}, ""},
		{"unknown VF mode", Config{VF: VFRequired + 1}, "unknown VF mode 3"},
		{"negative VF timeout", Config{VF: VFRequired, VFTimeout: -time.Second}, "VF timeout -1s"},
		{"VF frame size", Config{VF: VFAuto, VFXDP: afxdp.Config{FrameSize: 3000}}, "VF: afxdp: frame size 3000"},
		{"VF ring size", Config{VF: VFAuto, VFXDP: afxdp.Config{RingSize: 100}}, "ring size 100"},
		{"VF queue id", Config{VF: VFAuto, VFXDP: afxdp.Config{Queues: []int{0, -1}}}, "queue id -1"},
		{"VF bind mode", Config{VF: VFAuto, VFXDP: afxdp.Config{Bind: afxdp.BindCopy + 1}}, "unknown bind mode"},
		{"VF settings unused when off", Config{VFXDP: afxdp.Config{FrameSize: 3000}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
