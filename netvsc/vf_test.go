package netvsc

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
)

func TestVFModeNamesRoundTrip(t *testing.T) {
	for _, m := range []VFMode{VFOff, VFAuto, VFRequired} {
		got, err := ParseVFMode(m.String())
		if err != nil || got != m {
			t.Errorf("%v: %v %v", m, got, err)
		}
	}
	if _, err := ParseVFMode("on"); err == nil {
		t.Error("ParseVFMode(on) succeeded")
	}
}

// nlmsg builds one rtnetlink link message.
func nlmsg(typ uint16, family byte, index int32, flags uint32) []byte {
	b := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg+8) // with an attribute's worth of tail
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	m := b[unix.SizeofNlMsghdr:]
	m[0] = family
	binary.NativeEndian.PutUint32(m[4:], uint32(index))
	binary.NativeEndian.PutUint32(m[8:], flags)
	return b
}

func TestParseLinkEvents(t *testing.T) {
	up := uint32(unix.IFF_UP | unix.IFF_LOWER_UP)
	cases := []struct {
		name string
		b    []byte
		want []linkEvent
	}{
		{"new and usable", nlmsg(unix.RTM_NEWLINK, unix.AF_UNSPEC, 7, up), []linkEvent{{index: 7, flags: up}}},
		{"carrier lost", nlmsg(unix.RTM_NEWLINK, unix.AF_UNSPEC, 7, unix.IFF_UP), []linkEvent{{index: 7, flags: unix.IFF_UP}}},
		{"unregistered", nlmsg(unix.RTM_DELLINK, unix.AF_UNSPEC, 9, 0), []linkEvent{{index: 9, deleted: true}}},
		{"bridge port leaving is not an unregistration", nlmsg(unix.RTM_DELLINK, unix.AF_BRIDGE, 9, 0), nil},
		{"two in one datagram", append(nlmsg(unix.RTM_NEWLINK, 0, 1, up), nlmsg(unix.RTM_DELLINK, 0, 2, 0)...),
			[]linkEvent{{index: 1, flags: up}, {index: 2, deleted: true}}},
		{"other message types", nlmsg(unix.RTM_NEWADDR, 0, 3, 0), nil},
		{"truncated", nlmsg(unix.RTM_NEWLINK, 0, 3, up)[:20], nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := parseLinkEvents(c.b)
			if len(got) != len(c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("event %d: %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
	if !(linkEvent{flags: up}).usable() || (linkEvent{flags: unix.IFF_UP}).usable() || (linkEvent{deleted: true, flags: up}).usable() {
		t.Error("usable() wrong")
	}
}

func FuzzParseLinkEvents(f *testing.F) {
	f.Add(nlmsg(unix.RTM_NEWLINK, 0, 7, unix.IFF_UP))
	f.Add(append(nlmsg(unix.RTM_DELLINK, 0, 1, 0), nlmsg(unix.RTM_NEWLINK, 0, 2, 0)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, e := range parseLinkEvents(b) {
			if e.index <= 0 {
				t.Fatalf("event for index %d", e.index)
			}
		}
	})
}

// pciTree builds R/sys/bus/pci/{slots/<serial>/address, devices/<bdf>/net/<ifname>, driver link} for a
// netdev of this namespace.
func pciTree(t *testing.T, root string, serial int, bdf, ifname, driver string) {
	t.Helper()
	dev := filepath.Join(root, "sys/devices/pci7870:00", bdf)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dev, "net", ifname), 0o755))
	must(os.MkdirAll(filepath.Join(root, "sys/bus/pci/devices"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "sys/bus/pci/drivers", driver), 0o755))
	must(os.Symlink(dev, filepath.Join(root, "sys/bus/pci/devices", bdf)))
	must(os.Symlink(filepath.Join(root, "sys/bus/pci/drivers", driver), filepath.Join(dev, "driver")))
	if serial > 0 {
		slot := filepath.Join(root, "sys/bus/pci/slots", strconv.Itoa(serial))
		must(os.MkdirAll(slot, 0o755))
		must(os.WriteFile(filepath.Join(slot, "address"), []byte(bdf[:len(bdf)-2]+"\n"), 0o444))
	}
}

// TestFindVFBySerialThenMAC uses the loopback device, the one netdev
// every namespace has, as the VF's netdev (rtnetlink gives it no
// hardware address, so the NIC's MAC is empty here).
func TestFindVFBySerialThenMAC(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skip("no loopback device")
	}
	var zero net.HardwareAddr // lo's, as rtnetlink shows it
	other := net.HardwareAddr{0, 0x15, 0x5d, 1, 2, 3}

	root := t.TempDir()
	pciTree(t, root, 5, "7870:00:00.0", "lo", "mlx5_core")
	d, err := findVF(root, 5, zero)
	if err != nil || d.name != "lo" || d.index != lo.Index || d.matched != "serial" || d.bdf != "7870:00:00.0" || d.driver != "mlx5_core" {
		t.Errorf("by serial: %+v %v", d, err)
	}
	// Another serial: the slot is not there, the MAC still matches.
	d, err = findVF(root, 6, zero)
	if err != nil || d.matched != "mac" {
		t.Errorf("by MAC: %+v %v", d, err)
	}
	// The slot's netdev carries another MAC: no pairing at all.
	if d, err := findVF(root, 5, other); err != errVFNotFound {
		t.Errorf("MAC mismatch: %+v %v", d, err)
	}
	// A netdev that is not in this namespace is passed over.
	root2 := t.TempDir()
	pciTree(t, root2, 5, "7870:00:00.0", "vfnotHere0", "mana")
	if d, err := findVF(root2, 5, zero); err != errVFNotFound {
		t.Errorf("netdev elsewhere: %+v %v", d, err)
	}
	// No PCI tree at all.
	if _, err := findVF(t.TempDir(), 5, zero); err != errVFNotFound {
		t.Errorf("empty root: %v", err)
	}
}

// TestVFTxOffloadsComputeChecksums: frames that asked the host for
// checksums get them computed before they go to the VF.
func TestVFTxOffloadsComputeChecksums(t *testing.T) {
	pool, err := NewPool(4, 2048, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		v6    bool
		proto byte
		flags frame.MetaFlags
	}{
		{"tcp4", false, protoTCP, frame.MetaTxIPv4 | frame.MetaTxTCPChecksum | frame.MetaTxIPChecksum},
		{"udp4", false, 17, frame.MetaTxIPv4 | frame.MetaTxUDPChecksum},
		{"tcp6", true, protoTCP, frame.MetaTxIPv6 | frame.MetaTxTCPChecksum},
		{"udp6", true, 17, frame.MetaTxIPv6 | frame.MetaTxUDPChecksum},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := pool.Get()
			defer p.Free()
			f := p.SetLen(testL4Frame(p.Buffer(), c.v6, c.proto, 100))
			p.Meta.Flags, p.Meta.L3Off = c.flags, EthernetHeaderSize
			l4 := EthernetHeaderSize + 20
			if c.v6 {
				l4 = EthernetHeaderSize + 40
			}
			p.Meta.L4Off = uint16(l4)
			vfTxOffloads(p)
			if !l4ChecksumOK(f, c.v6, c.proto, l4) {
				t.Errorf("transport checksum wrong: % x", f[l4:l4+20])
			}
			if c.flags&frame.MetaTxIPChecksum != 0 && csum.Fold(csum.Add(0, f[14:34])) != 0xffff {
				t.Errorf("IPv4 header checksum wrong")
			}
			if p.Meta.Flags&(frame.MetaTxTCPChecksum|frame.MetaTxUDPChecksum|frame.MetaTxIPChecksum) != 0 {
				t.Errorf("offload flags left: %v", p.Meta.Flags)
			}
		})
	}
}

// testL4Frame writes an Ethernet/IP/TCP-or-UDP frame with payload bytes and
// zero checksums into b and returns its length.
func testL4Frame(b []byte, v6 bool, proto byte, payload int) int {
	l4len := 20 + payload
	if proto == 17 {
		l4len = 8 + payload
	}
	n := 14
	if v6 {
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv6)
		ip := b[14:54]
		clear(ip)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(l4len))
		ip[6], ip[7] = proto, 64
		for i := 8; i < 40; i++ {
			ip[i] = byte(i)
		}
		n += 40
	} else {
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv4)
		ip := b[14:34]
		clear(ip)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+l4len))
		ip[8], ip[9] = 64, proto
		copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		n += 20
	}
	l4 := b[n : n+l4len]
	clear(l4)
	binary.BigEndian.PutUint16(l4[0:], 1234)
	binary.BigEndian.PutUint16(l4[2:], 80)
	if proto == protoTCP {
		l4[12] = 5 << 4
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(l4len))
	}
	for i := range payload {
		l4[len(l4)-payload+i] = byte(i * 7)
	}
	return n + l4len
}

func l4ChecksumOK(f []byte, v6 bool, proto byte, l4 int) bool {
	var sum uint32
	if v6 {
		sum = csum.Add(sum, f[14+8:14+40])
	} else {
		sum = csum.Add(sum, f[14+12:14+20])
	}
	seg := f[l4:]
	sum += uint32(proto) + uint32(len(seg))
	return csum.Fold(csum.Add(sum, seg)) == 0xffff
}
