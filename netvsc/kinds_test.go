package netvsc

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

// ownKinds are the kinds this package's tests must provoke (the house rule:
// "a test for each kind"): KindDuplicateTID, which only the driver returns.
// The driver's other checks (rx.go, queue.go, control.go) return kinds the
// wire decoders return too; packages nvsp and rndis test each of those.
// TestMain checks, after a full run, that each was provoked.
var ownKinds = []protoerr.Kind{
	protoerr.KindDuplicateTID,
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
