package hoptrace

import (
	"path/filepath"
	"testing"
)

func newPage(t *testing.T) *Stamps {
	t.Helper()
	s, err := Create(filepath.Join(t.TempDir(), "page"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStampRules(t *testing.T) {
	type ev struct {
		st Stage
		at int64
	}
	tests := []struct {
		name string
		evs  []ev
		want map[Stage]int64 // stages not listed must read 0
	}{
		{"a hop before the one it follows is dropped",
			[]ev{{GuestSignal, 5}, {ClientSend, 10}, {GuestTAPRead, 20}, {GuestSignal, 30}},
			map[Stage]int64{ClientSend: 10, GuestTAPRead: 20, GuestSignal: 30}},
		{"only the first occurrence counts",
			[]ev{{ClientSend, 10}, {GuestTAPRead, 20}, {GuestTAPRead, 25}},
			map[Stage]int64{ClientSend: 10, GuestTAPRead: 20}},
		{"a signal after its leg closed is not the request's",
			[]ev{{ClientSend, 10}, {GuestTAPRead, 20}, {HostTAPWrite, 40}, {GuestSignal, 90}},
			map[Stage]int64{ClientSend: 10, GuestTAPRead: 20, HostTAPWrite: 40}},
		{"a server that answers inside the host's TAP write has no hop of its own",
			[]ev{{ClientSend, 10}, {GuestTAPRead, 20}, {ServerEcho, 35}, {HostTAPWrite, 40}, {HostTAPRead, 60}},
			map[Stage]int64{ClientSend: 10, GuestTAPRead: 20, HostTAPWrite: 40, HostTAPRead: 60}},
		{"the server's hop lies between the host's TAP write and read",
			[]ev{{ClientSend, 10}, {GuestTAPRead, 20}, {HostTAPWrite, 40}, {ServerEcho, 50}, {HostTAPRead, 60}},
			map[Stage]int64{ClientSend: 10, GuestTAPRead: 20, HostTAPWrite: 40, ServerEcho: 50, HostTAPRead: 60}},
		{"a server stamp after the host read the response is dropped",
			[]ev{{ClientSend, 10}, {GuestTAPRead, 20}, {HostTAPWrite, 40}, {HostTAPRead, 60}, {ServerEcho, 65}},
			map[Stage]int64{ClientSend: 10, GuestTAPRead: 20, HostTAPWrite: 40, HostTAPRead: 60}},
		{"the interrupt follows the host's signal only",
			[]ev{{ClientSend, 10}, {GuestTAPRead, 20}, {HostTAPWrite, 40}, {GuestWake, 45}, {HostTAPRead, 60}, {HostSignal, 65}, {GuestWake, 70}},
			map[Stage]int64{ClientSend: 10, GuestTAPRead: 20, HostTAPWrite: 40, HostTAPRead: 60, HostSignal: 65, GuestWake: 70}},
	}
	s := newPage(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.Reset()
			for _, e := range tt.evs {
				s.StampAt(e.st, e.at)
			}
			var page [NumStages]int64
			s.Read(&page)
			for k := range NumStages {
				if page[k] != tt.want[k] {
					t.Errorf("%v = %d, want %d", k, page[k], tt.want[k])
				}
			}
		})
	}
}

func TestLegsMeasureFromTheLatestEarlierHop(t *testing.T) {
	var page [NumStages]int64
	page[ClientSend], page[GuestTAPRead] = 100, 110
	page[GuestSignal], page[HostScan] = 140, 130 // a stale bit found before the signal
	page[HostTAPWrite], page[HostTAPRead], page[GuestRx], page[ClientRecv] = 200, 300, 320, 350
	page[ServerEcho] = 260
	legs, ok := Legs(&page)
	want := map[Stage]int64{GuestTAPRead: 10, GuestSignal: 30, HostScan: 20, HostTAPWrite: 60, ServerEcho: 60, HostTAPRead: 40, GuestRx: 20, ClientRecv: 30}
	for k := Stage(1); k < NumStages; k++ {
		w, has := want[k]
		if ok[k] != has || legs[k] != w {
			t.Errorf("%v: leg %d (%v), want %d (%v)", k, legs[k], ok[k], w, has)
		}
	}
}

func TestSharedBetweenMappings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "page")
	a, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.StampAt(ClientSend, 7)
	b.StampAt(GuestTAPRead, 9)
	var page [NumStages]int64
	a.Read(&page)
	if page[ClientSend] != 7 || page[GuestTAPRead] != 9 {
		t.Fatalf("page %v: the two mappings do not share it", page[:2])
	}
}

func TestStampAllocatesNothing(t *testing.T) {
	s := newPage(t)
	var nilStamps *Stamps
	if a := testing.AllocsPerRun(100, func() {
		s.Reset()
		s.Stamp(ClientSend)
		s.Stamp(GuestTAPRead)
		nilStamps.Stamp(GuestSignal)
	}); a != 0 {
		t.Fatalf("%v allocs per round, want 0", a)
	}
}

func BenchmarkStamp(b *testing.B) {
	s, err := Create(filepath.Join(b.TempDir(), "page"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		s.Reset()
		s.Stamp(ClientSend)
		s.Stamp(GuestTAPRead)
	}
}
