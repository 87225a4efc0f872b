package bind

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// route is one entry of the kernel's routing table as R/proc/net/route and
// R/proc/net/ipv6_route show it.
type route struct {
	Iface  string
	Dst    netip.Prefix
	Flags  uint32
	Metric uint32
}

// Route flags (include/uapi/linux/route.h).
const (
	rtfUp     = 0x0001
	rtfReject = 0x0200 // unreachable/prohibit routes (ipv6_route lists them on lo)
)

// usable reports whether packets can leave through the route.
func (r route) usable() bool { return r.Flags&rtfUp != 0 && r.Flags&rtfReject == 0 && r.Iface != "lo" }

// readRoutes reads both tables under root. A missing file has no routes
// (a kernel without IPv6 has no ipv6_route).
func readRoutes(root string) ([]route, error) {
	v4, err := readRouteFile(filepath.Join(root, "proc/net/route"), parseRoute4)
	if err != nil {
		return nil, err
	}
	v6, err := readRouteFile(filepath.Join(root, "proc/net/ipv6_route"), parseRoute6)
	if err != nil {
		return nil, err
	}
	return append(v4, v6...), nil
}

func readRouteFile(path string, parse func(fields []string) (route, bool, error)) ([]route, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	defer f.Close()
	var rs []route
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		r, ok, err := parse(strings.Fields(sc.Text()))
		if err != nil {
			return nil, fmt.Errorf("bind: %s:%d: %w", path, n, err)
		}
		if ok {
			rs = append(rs, r)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bind: %s: %w", path, err)
	}
	return rs, nil
}

// parseRoute4 parses a line of /proc/net/route (fib_route_seq_show):
// Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT,
// addresses as the host-order print of a big-endian u32.
func parseRoute4(f []string) (route, bool, error) {
	if len(f) == 0 || f[0] == "Iface" {
		return route{}, false, nil
	}
	if len(f) < 8 {
		return route{}, false, fmt.Errorf("%d fields, want 11", len(f))
	}
	dst, err1 := parseHex4(f[1])
	flags, err2 := strconv.ParseUint(f[3], 16, 32)
	metric, err3 := strconv.ParseUint(f[6], 10, 32)
	mask, err4 := parseHex4(f[7])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return route{}, false, err
	}
	m := mask.As4()
	ones := bits.OnesCount32(binary.BigEndian.Uint32(m[:]))
	if binary.BigEndian.Uint32(m[:]) != ^uint32(0)<<(32-ones) {
		return route{}, false, fmt.Errorf("mask %s is not a prefix", f[7])
	}
	return route{Iface: f[0], Dst: netip.PrefixFrom(dst, ones).Masked(), Flags: uint32(flags), Metric: uint32(metric)}, true, nil
}

func parseHex4(s string) (netip.Addr, error) {
	v, err := strconv.ParseUint(s, 16, 32)
	if err != nil || len(s) != 8 {
		return netip.Addr{}, fmt.Errorf("bad address %q", s)
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], uint32(v))
	return netip.AddrFrom4(b), nil
}

// parseRoute6 parses a line of /proc/net/ipv6_route: dst plen src plen
// gateway metric refcnt use flags dev, addresses as 32 hex digits.
func parseRoute6(f []string) (route, bool, error) {
	if len(f) == 0 {
		return route{}, false, nil
	}
	if len(f) != 10 {
		return route{}, false, fmt.Errorf("%d fields, want 10", len(f))
	}
	b, err := hex.DecodeString(f[0])
	if err != nil || len(b) != 16 {
		return route{}, false, fmt.Errorf("bad address %q", f[0])
	}
	plen, err1 := strconv.ParseUint(f[1], 16, 8)
	metric, err2 := strconv.ParseUint(f[5], 16, 32)
	flags, err3 := strconv.ParseUint(f[8], 16, 32)
	if err := errors.Join(err1, err2, err3); err != nil || plen > 128 {
		return route{}, false, fmt.Errorf("bad route %q", strings.Join(f, " "))
	}
	dst := netip.PrefixFrom(netip.AddrFrom16([16]byte(b)), int(plen))
	return route{Iface: f[9], Dst: dst.Masked(), Flags: uint32(flags), Metric: uint32(metric)}, true, nil
}

// defaultRouteIfaces lists the interfaces that carry a default route, IPv4
// or IPv6, sorted.
func defaultRouteIfaces(rs []route) []string {
	var out []string
	for _, r := range rs {
		if r.usable() && r.Dst.Bits() == 0 && !slices.Contains(out, r.Iface) {
			out = append(out, r.Iface)
		}
	}
	slices.Sort(out)
	return out
}

// routeIface is the interface the kernel would send to addr through: the
// longest matching prefix, then the lowest metric. "" when none.
func routeIface(rs []route, addr netip.Addr) string {
	addr = addr.Unmap()
	best, bestBits, bestMetric := "", -1, uint32(0)
	for _, r := range rs {
		if !r.usable() || r.Dst.Addr().Is4() != addr.Is4() || !r.Dst.Contains(addr) {
			continue
		}
		if b := r.Dst.Bits(); b > bestBits || (b == bestBits && r.Metric < bestMetric) {
			best, bestBits, bestMetric = r.Iface, b, r.Metric
		}
	}
	return best
}

// sshEndpoints parses SSH_CONNECTION ("client-ip client-port server-ip
// server-port"); ok is false when it is unset or malformed.
func sshEndpoints(v string) (client, server netip.Addr, ok bool) {
	f := strings.Fields(v)
	if len(f) != 4 {
		return netip.Addr{}, netip.Addr{}, false
	}
	c, err1 := netip.ParseAddr(f[0])
	s, err2 := netip.ParseAddr(f[2])
	if err1 != nil || err2 != nil {
		return netip.Addr{}, netip.Addr{}, false
	}
	return c.WithZone(""), s.WithZone(""), true
}
