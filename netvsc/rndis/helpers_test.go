package rndis

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// kindsSeen records every kind a test provoked through wantKind.
var kindsSeen sync.Map

// ownKinds are the kinds this package returns; TestMain checks, after a full
// run, that a test of this package provokes each of them (the house rule: "a
// test for each kind").
var ownKinds = []protoerr.Kind{
	protoerr.KindShort,
	protoerr.KindType,
	protoerr.KindLength,
	protoerr.KindOffset,
	protoerr.KindRange,
	protoerr.KindDataLength,
	protoerr.KindUnsupported,
	protoerr.KindPPISize,
	protoerr.KindPPIOffset,
	protoerr.KindPPIData,
	protoerr.KindNDISObject,
	protoerr.KindRSSTable,
	protoerr.KindRSSKey,
	protoerr.KindRSSEntry,
}

// TestMain runs the tests and then the ownKinds check.
func TestMain(m *testing.M) {
	code := m.Run()
	full := flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.fuzz").Value.String() == ""
	if code == 0 && full {
		for _, k := range ownKinds {
			if _, ok := kindsSeen.Load(k); !ok {
				fmt.Fprintf(os.Stderr, "no test provokes kind %q\n", k)
				code = 1
			}
		}
	}
	os.Exit(code)
}

// wantKind fails unless err is a *protoerr.Error of kind k.
func wantKind(t *testing.T, err error, k protoerr.Kind) {
	t.Helper()
	kindsSeen.Store(k, true)
	pe, ok := protoerr.As(err)
	if !ok {
		t.Fatalf("got error %v, want a *protoerr.Error of kind %q", err, k)
	}
	if pe.Kind != k {
		t.Fatalf("got kind %q (%v), want %q", pe.Kind, err, k)
	}
	if !strings.HasPrefix(err.Error(), "netvsc: ") {
		t.Fatalf("error %q lacks the package prefix", err)
	}
}

// hexBytes parses space-separated hex bytes, for golden layouts written as
// one u32 (4 bytes) per group.
func hexBytes(t testing.TB, s string) []byte {
	t.Helper()
	var out []byte
	for _, f := range strings.Fields(s) {
		if len(f)%2 != 0 {
			t.Fatalf("odd hex group %q", f)
		}
		for i := 0; i < len(f); i += 2 {
			var v byte
			for _, c := range f[i : i+2] {
				v <<= 4
				switch {
				case c >= '0' && c <= '9':
					v |= byte(c - '0')
				case c >= 'a' && c <= 'f':
					v |= byte(c - 'a' + 10)
				default:
					t.Fatalf("bad hex %q", f)
				}
			}
			out = append(out, v)
		}
	}
	return out
}

type marshaler interface{ Marshal([]byte) []byte }
type unmarshaler interface{ Unmarshal([]byte) error }
