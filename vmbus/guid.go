package vmbus

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// GUID is a VMBus GUID held in canonical (RFC 4122 text) byte order: the
// bytes appear in the order the hex digits are printed. The VMBus wire and
// memory layout is Microsoft's mixed-endian form (first three fields
// little-endian; docs/protocol/vmbus-ring.md §4); use Wire/GUIDFromWire to convert.
//
// The zero value is the nil GUID. GUID is comparable and usable as a map key.
type GUID [16]byte

// ParseGUID accepts the canonical form ("f8615163-df3e-46c5-913f-f2d2f965ed0e"),
// the braced sysfs form ("{f8615163-...}") and surrounding whitespace, as read
// from a sysfs attribute.
func ParseGUID(s string) (GUID, error) {
	t := strings.TrimSpace(s)
	if len(t) != 36 && len(t) != 38 {
		return GUID{}, fmt.Errorf("vmbus: parse guid %q: want 36 characters or 38 with braces", s)
	}
	u, err := uuid.Parse(t)
	if err != nil {
		return GUID{}, fmt.Errorf("vmbus: parse guid %q: %w", s, err)
	}
	return GUID(u), nil
}

// MustParseGUID is ParseGUID for constants; it panics on malformed input.
func MustParseGUID(s string) GUID {
	g, err := ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// String returns the canonical lowercase form without braces.
func (g GUID) String() string { return uuid.UUID(g).String() }

// Braced returns the "{...}" form the kernel prints in class_id and device_id.
func (g GUID) Braced() string { return "{" + g.String() + "}" }

// IsZero reports whether g is the nil GUID.
func (g GUID) IsZero() bool { return g == GUID{} }

// Wire returns the 16-byte mixed-endian layout used in VMBus messages and
// shared memory (GUID_INIT: Data1 u32 LE, Data2 u16 LE, Data3 u16 LE, Data4 bytes).
func (g GUID) Wire() [16]byte {
	var w [16]byte
	binary.LittleEndian.PutUint32(w[0:4], binary.BigEndian.Uint32(g[0:4]))
	binary.LittleEndian.PutUint16(w[4:6], binary.BigEndian.Uint16(g[4:6]))
	binary.LittleEndian.PutUint16(w[6:8], binary.BigEndian.Uint16(g[6:8]))
	copy(w[8:], g[8:])
	return w
}

// PutWire stores the wire layout of g into b, which must hold 16 bytes.
func (g GUID) PutWire(b []byte) {
	w := g.Wire()
	copy(b[:16], w[:])
}

// GUIDFromWire decodes the mixed-endian wire layout in b[:16].
func GUIDFromWire(b []byte) GUID {
	var g GUID
	binary.BigEndian.PutUint32(g[0:4], binary.LittleEndian.Uint32(b[0:4]))
	binary.BigEndian.PutUint16(g[4:6], binary.LittleEndian.Uint16(b[4:6]))
	binary.BigEndian.PutUint16(g[6:8], binary.LittleEndian.Uint16(b[6:8]))
	copy(g[8:], b[8:16])
	return g
}

// MarshalText implements encoding.TextMarshaler (canonical form).
func (g GUID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (canonical or braced form).
func (g *GUID) UnmarshalText(b []byte) error {
	v, err := ParseGUID(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// Well-known device class GUIDs (include/linux/hyperv.h; docs/protocol/vmbus-ring.md §4).
var (
	ClassNetwork       = MustParseGUID("f8615163-df3e-46c5-913f-f2d2f965ed0e")
	ClassSCSI          = MustParseGUID("ba6163d9-04a1-4d29-b605-72e2ffb1dc7f")
	ClassIDE           = MustParseGUID("32412632-86cb-44a2-9b5c-50d1417354f5")
	ClassFC            = MustParseGUID("2f9bcc4a-0069-4af3-b76b-6fd0be528cda")
	ClassNetworkDirect = MustParseGUID("8c2eaf3d-32a7-4b09-ab99-bd1f1c86b501")
	ClassPCIe          = MustParseGUID("44c4f61d-4444-4400-9d52-802e27ede19f")
	ClassFCopy         = MustParseGUID("34d14be3-dee4-41c8-9ae7-6b174977c192")
	ClassKVP           = MustParseGUID("a9a0f4e7-5a45-4d96-b827-8a841e8c03e6")
	ClassVSS           = MustParseGUID("35fa2e29-ea23-4236-96ae-3a6ebacba440")
	ClassShutdown      = MustParseGUID("0e0b6031-5213-4934-818b-38d90ced39db")
	ClassTimeSync      = MustParseGUID("9527e630-d0ae-497b-adce-e80ab0175caf")
	ClassHeartbeat     = MustParseGUID("57164f39-9115-4e78-ab55-382f3bd5422d")
	ClassDynMem        = MustParseGUID("525074dc-8985-46e2-8057-a307dc18a502")
	ClassVideo         = MustParseGUID("da0a7802-e377-4aac-8e77-0558eb1073f8")
	ClassKeyboard      = MustParseGUID("f912ad6d-2b17-48ea-bd65-f927a61c7684")
	ClassMouse         = MustParseGUID("cfa8b69e-5b4a-4cc0-b98b-8ba1a1f3f95a")

	// ClassTest is vmbusd's own test device class, offered only by the
	// simulated host: the host echoes inband packets and completes requests.
	ClassTest = MustParseGUID("6a2d0bba-7d1c-4c0e-9e37-5bd1a0c4e2f1")
)

var classNames = map[GUID]string{
	ClassNetwork:       "netvsc",
	ClassSCSI:          "storvsc",
	ClassIDE:           "ide",
	ClassFC:            "synthfc",
	ClassNetworkDirect: "nd",
	ClassPCIe:          "pci",
	ClassFCopy:         "fcopy",
	ClassKVP:           "kvp",
	ClassVSS:           "vss",
	ClassShutdown:      "shutdown",
	ClassTimeSync:      "timesync",
	ClassHeartbeat:     "heartbeat",
	ClassDynMem:        "balloon",
	ClassVideo:         "video",
	ClassKeyboard:      "keyboard",
	ClassMouse:         "mouse",
	ClassTest:          "vmbusd-test",
}

// ClassName returns a short name for a known device class GUID, "hv_sock"
// for an hv_sock service id (see IsHvSockServiceID), or "unknown".
func ClassName(class GUID) string {
	if n, ok := classNames[class]; ok {
		return n
	}
	if IsHvSockServiceID(class) {
		return "hv_sock"
	}
	return "unknown"
}

// hvSockTemplate is the service-id template for hv_sock ports:
// <port:u32>-facb-11e6-bd58-64006a7986d3 (hyperv_transport.c; docs/protocol/hvsock.md).
var hvSockTemplate = MustParseGUID("00000000-facb-11e6-bd58-64006a7986d3")

// HvSockServiceID returns the service GUID for an hv_sock port.
func HvSockServiceID(port uint32) GUID {
	g := hvSockTemplate
	binary.BigEndian.PutUint32(g[0:4], port)
	return g
}

// IsHvSockServiceID reports whether g follows the hv_sock port template.
func IsHvSockServiceID(g GUID) bool { return [12]byte(g[4:]) == [12]byte(hvSockTemplate[4:]) }

// HvSockPort returns the port of an hv_sock service GUID; ok is false when
// g does not follow the template.
func HvSockPort(g GUID) (port uint32, ok bool) {
	if !IsHvSockServiceID(g) {
		return 0, false
	}
	return binary.BigEndian.Uint32(g[0:4]), true
}
