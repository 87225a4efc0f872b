package wire_test

import (
	"bytes"
	"testing"

	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/internal/wiretest"
	"github.com/vmbusd/vmbusd/vmbus"
)

func TestConnectRequestGolden(t *testing.T) {
	req := wire.ConnectRequest{
		Endpoint: wire.ServiceID(0x12345678),
		Service:  wire.ServiceID(2761),
	}
	b := req.Marshal()
	const want = "15000000 00000000 " +
		"78563412cbfae611bd5864006a7986d3 " + // 12345678-facb-11e6-bd58-64006a7986d3, mixed-endian
		"c90a0000cbfae611bd5864006a7986d3" // 00000ac9-facb-...
	wiretest.Golden(t, "request", b, want)
	got, err := wire.ParseConnectRequest(b)
	if err != nil || got != req {
		t.Fatalf("parse: %+v, %v", got, err)
	}
	v2 := req
	v2.V2, v2.Silo = true, vmbus.MustParseGUID("11111111-2222-3333-4444-555555555555")
	b2 := v2.Marshal()
	wiretest.Golden(t, "v2 request", b2, want+" 11111111 2222 3333 4444 555555555555")
	if len(b2) != wire.ConnectRequestV2Len {
		t.Fatalf("v2 request of %d bytes, want ConnectRequestV2Len %d", len(b2), wire.ConnectRequestV2Len)
	}
	if got, err := wire.ParseConnectRequest(b2); err != nil || got != v2 {
		t.Fatalf("parse v2: %+v, %v", got, err)
	}
}

func TestParseConnectRequestRejects(t *testing.T) {
	b := wire.ConnectRequest{Endpoint: wire.ServiceID(1), Service: wire.ServiceID(2)}.Marshal()
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"short", b[:39]},
		{"one byte long", append(bytes.Clone(b), 0)},
		{"empty", nil},
		{"wrong type", append([]byte{22}, b[1:]...)},
		{"result type", wire.ConnectResult{}.Marshal()[:40]},
	} {
		if _, err := wire.ParseConnectRequest(tc.b); err == nil {
			t.Errorf("%s: accepted % x", tc.name, tc.b)
		}
	}
}

func TestConnectResultGolden(t *testing.T) {
	res := wire.ConnectResult{Endpoint: wire.ServiceID(5), Service: wire.ServiceID(6), Status: wire.StatusConnectionRefused}
	b := res.Marshal()
	wiretest.Golden(t, "result", b, "17000000 00000000 "+
		"05000000cbfae611bd5864006a7986d3 "+
		"06000000cbfae611bd5864006a7986d3 "+
		"360200c0") // 0xC0000236, STATUS_CONNECTION_REFUSED
	if got, err := wire.ParseConnectResult(b); err != nil || got != res {
		t.Fatalf("parse: %+v, %v", got, err)
	}
	for _, bad := range [][]byte{b[:40], append(bytes.Clone(b), 0), append([]byte{21}, b[1:]...)} {
		if _, err := wire.ParseConnectResult(bad); err == nil {
			t.Errorf("accepted % x", bad)
		}
	}
}
