package bind

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Tables as a real x86-64 guest shows them, with an unreachable IPv6
// default on lo (RTF_REJECT) that must not count.
const (
	testRoute4 = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT                                                       \n" +
		"eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0                                                                               \n" +
		"eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0                                                                               \n" +
		"eth1\t0000010A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0                                                                               \n" +
		"eth1\t0000A8C0\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0                                                                               \n"
	testRoute6 = "fd000001000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth1\n" +
		"fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n" +
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n" +
		"00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo\n"
)

func writeRoutes(t *testing.T, v4, v6 string) string {
	t.Helper()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "proc/net"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "proc/net/route"), []byte(v4), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/net/ipv6_route"), []byte(v6), 0o444); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestRoutesFromProcNet(t *testing.T) {
	rs, err := readRoutes(writeRoutes(t, testRoute4, testRoute6))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 8 {
		t.Fatalf("%d routes, want 8: %+v", len(rs), rs)
	}
	if got := defaultRouteIfaces(rs); !slices.Equal(got, []string{"eth0"}) {
		t.Errorf("default route via %v, want [eth0] (lo's unreachable default does not count)", got)
	}
	for addr, want := range map[string]string{
		"10.1.0.9":        "eth1",
		"10.0.0.7":        "eth0",
		"192.168.3.4":     "eth1",
		"8.8.8.8":         "eth0",
		"fd00:1::9":       "eth1",
		"fe80::5":         "eth0",
		"2001:db8::1":     "", // no IPv6 default
		"::ffff:10.1.0.9": "eth1",
	} {
		if got := routeIface(rs, netip.MustParseAddr(addr)); got != want {
			t.Errorf("route to %s via %q, want %q", addr, got, want)
		}
	}
	if _, err := readRoutes(writeRoutes(t, "Iface\tDestination\neth0\tzz\n", "")); err == nil {
		t.Error("malformed route table accepted")
	}
	if rs, err := readRoutes(t.TempDir()); err != nil || len(rs) != 0 {
		t.Errorf("missing tables: %v, %v", rs, err)
	}
}

func TestSSHEndpoints(t *testing.T) {
	c, s, ok := sshEndpoints("10.1.0.9 50000 10.1.0.4 22")
	if !ok || c != netip.MustParseAddr("10.1.0.9") || s != netip.MustParseAddr("10.1.0.4") {
		t.Errorf("got %v %v %v", c, s, ok)
	}
	c, _, ok = sshEndpoints("fe80::1%eth0 50000 fe80::2%eth0 22")
	if !ok || c != netip.MustParseAddr("fe80::1") {
		t.Errorf("zoned: %v %v", c, ok)
	}
	for _, bad := range []string{"", "10.1.0.9", "x 1 y 2"} {
		if _, _, ok := sshEndpoints(bad); ok {
			t.Errorf("sshEndpoints(%q) ok", bad)
		}
	}
}
