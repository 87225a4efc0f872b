package rndis

import (
	"os"
	"testing"

	"github.com/vmbusd/vmbusd/internal/wiretest"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// kinds are the kinds this package returns; TestMain checks, after a
// full run, that a test of this package provokes each of them.
var kinds = wiretest.NewKinds(
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
)

func TestMain(m *testing.M) { os.Exit(kinds.Run(m)) }
