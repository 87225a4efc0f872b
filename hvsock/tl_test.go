package hvsock_test

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/vmbus"
)

func TestTLConnectRequestWireLayout(t *testing.T) {
	req := hvsock.TLConnectRequest{
		Endpoint: hvsock.ServiceID(0x12345678),
		Service:  hvsock.ServiceID(2761),
	}
	b := req.Marshal()
	want, _ := hex.DecodeString("15000000" + "00000000" +
		"78563412cbfae611bd5864006a7986d3" + // 12345678-facb-11e6-bd58-64006a7986d3, mixed-endian
		"c90a0000cbfae611bd5864006a7986d3") // 00000ac9-facb-...
	if !bytes.Equal(b, want) {
		t.Fatalf("request\n% x\nwant\n% x", b, want)
	}
	got, err := hvsock.ParseTLConnectRequest(b)
	if err != nil || got != req {
		t.Fatalf("parse: %+v, %v", got, err)
	}
	v2 := req
	v2.V2, v2.Silo = true, vmbus.MustParseGUID("11111111-2222-3333-4444-555555555555")
	b2 := v2.Marshal()
	if len(b2) != hvsock.TLConnectRequestV2Len {
		t.Fatalf("v2 is %d bytes", len(b2))
	}
	if got, err := hvsock.ParseTLConnectRequest(b2); err != nil || got != v2 {
		t.Fatalf("parse v2: %+v, %v", got, err)
	}
	for _, bad := range [][]byte{b[:39], append(bytes.Clone(b), 0), append([]byte{22}, b[1:]...)} {
		if _, err := hvsock.ParseTLConnectRequest(bad); err == nil {
			t.Errorf("accepted % x", bad)
		}
	}
}

func TestTLConnectResultWireLayout(t *testing.T) {
	res := hvsock.TLConnectResult{Endpoint: hvsock.ServiceID(5), Service: hvsock.ServiceID(6), Status: hvsock.StatusConnectionRefused}
	b := res.Marshal()
	if len(b) != 44 || b[0] != 23 || !bytes.Equal(b[40:], []byte{0x36, 0x02, 0x00, 0xc0}) {
		t.Fatalf("result % x", b)
	}
	if got, err := hvsock.ParseTLConnectResult(b); err != nil || got != res {
		t.Fatalf("parse: %+v, %v", got, err)
	}
	if _, err := hvsock.ParseTLConnectResult(b[:40]); err == nil {
		t.Fatal("accepted a short result")
	}
}
