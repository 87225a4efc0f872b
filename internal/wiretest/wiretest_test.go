package wiretest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// recorder keeps what a check reports instead of failing the test, so
// that the checks' failures can be tested.
type recorder struct{ fatals, errors []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(format, args...))
}
func (r *recorder) failed() bool { return len(r.fatals)+len(r.errors) > 0 }

var _ TB = (*testing.T)(nil)

func TestHex(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []byte
		ok   bool
	}{
		{"01000000 ea05", []byte{1, 0, 0, 0, 0xea, 5}, true},
		{"  0a0B\n0c ", []byte{0x0a, 0x0b, 0x0c}, true},
		{"", nil, true},
		{"010", nil, false},
		{"01 0g", nil, false},
	} {
		r := &recorder{}
		got := Hex(r, tc.in)
		if r.failed() == tc.ok || (tc.ok && !bytes.Equal(got, tc.want)) {
			t.Errorf("Hex(%q) = % x, failures %v; want % x, ok %v", tc.in, got, r.fatals, tc.want, tc.ok)
		}
	}
}

func TestGolden(t *testing.T) {
	r := &recorder{}
	Golden(r, "same", []byte{1, 0, 0, 0}, "01000000")
	if r.failed() {
		t.Fatalf("equal bytes failed: %v", r.errors)
	}
	Golden(r, "other", []byte{1, 0, 0, 0}, "01000001")
	if len(r.errors) != 1 || !bytes.Contains([]byte(r.errors[0]), []byte("01 00 00 01")) {
		t.Fatalf("different bytes: %v, want one error showing the wanted bytes", r.errors)
	}
}

func TestKindsWantAndMissing(t *testing.T) {
	ks := NewKinds(protoerr.KindShort, protoerr.KindType)
	short := protoerr.New("INIT", protoerr.KindShort, "length", 3)
	for _, tc := range []struct {
		name string
		err  error
		k    protoerr.Kind
		ok   bool
	}{
		{"the kind", short, protoerr.KindShort, true},
		{"wrapped", fmt.Errorf("x: %w", short), protoerr.KindShort, false}, // loses the prefix
		{"another kind", short, protoerr.KindLength, false},
		{"not a protocol error", errors.New("netvsc: x"), protoerr.KindShort, false},
		{"nil", nil, protoerr.KindShort, false},
	} {
		r := &recorder{}
		ks.Want(r, tc.err, tc.k)
		if r.failed() == tc.ok {
			t.Errorf("%s: failures %v, want ok %v", tc.name, r.fatals, tc.ok)
		}
	}
	// Every Want records its kind, passing or not; KindType never came.
	if got := ks.Missing(); !slices.Equal(got, []protoerr.Kind{protoerr.KindType}) {
		t.Fatalf("missing %v, want only %v", got, protoerr.KindType)
	}
}

func TestProtocolError(t *testing.T) {
	for _, tc := range []struct {
		err error
		ok  bool
	}{
		{protoerr.New("INIT", protoerr.KindShort, "length", 3), true},
		{fmt.Errorf("wrapped: %w", protoerr.New("INIT", protoerr.KindType, "type", 9)), true},
		{protoerr.New("INIT", protoerr.Kind(0), "length", 3), false},
		{errors.New("other"), false},
		{nil, false},
	} {
		r := &recorder{}
		ProtocolError(r, tc.err)
		if r.failed() == tc.ok {
			t.Errorf("%v: failures %v, want ok %v", tc.err, r.fatals, tc.ok)
		}
	}
}

// u32 is a message of one little-endian u32; lossy drops its top byte on
// decoding, so that its round trip differs.
type u32 struct{ V uint32 }

func (m u32) Marshal(dst []byte) []byte {
	return append(dst, byte(m.V), byte(m.V>>8), byte(m.V>>16), byte(m.V>>24))
}

func (m *u32) Unmarshal(b []byte) error {
	if len(b) < 4 {
		return protoerr.New("U32", protoerr.KindShort, "length", uint64(len(b)))
	}
	m.V = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	return nil
}

type lossy struct{ V uint32 }

func (m lossy) Marshal(dst []byte) []byte { return u32(m).Marshal(dst) }
func (m *lossy) Unmarshal(b []byte) error {
	var v u32
	err := v.Unmarshal(b)
	m.V = v.V &^ 0xff000000
	m.V |= 1 << 24 // a decoder that invents a bit
	return err
}

func TestRoundTrip(t *testing.T) {
	r := &recorder{}
	RoundTrip(r, "u32", &u32{0xdeadbeef}, nil)
	if r.failed() {
		t.Fatalf("a faithful codec failed: %v", r.fatals)
	}
	RoundTrip(r, "lossy", &lossy{0xdeadbeef}, nil)
	if len(r.fatals) != 1 {
		t.Fatalf("a lossy codec: failures %v, want one", r.fatals)
	}
	r = &recorder{}
	RoundTrip(r, "lossy, normalized", &lossy{0xdeadbeef}, func(any) any { return nil })
	if r.failed() {
		t.Fatalf("norm did not apply: %v", r.fatals)
	}
}

func TestReencodes(t *testing.T) {
	in := []byte{1, 2, 3, 4, 5, 6}
	for _, tc := range []struct {
		out     []byte
		ignored []Span
		ok      bool
	}{
		{[]byte{1, 2, 3, 4, 5, 6}, nil, true},
		{[]byte{1, 0, 0, 4, 5, 6}, []Span{{1, 2}}, true},
		{[]byte{1, 0, 0, 4, 5, 6}, nil, false},
		{[]byte{1, 2, 3, 4, 5}, nil, false},
	} {
		r := &recorder{}
		Reencodes(r, in, tc.out, "v", tc.ignored...)
		if r.failed() == tc.ok {
			t.Errorf("% x ignoring %v: failures %v, want ok %v", tc.out, tc.ignored, r.fatals, tc.ok)
		}
		if !bytes.Equal(in, []byte{1, 2, 3, 4, 5, 6}) {
			t.Fatal("Reencodes changed its input")
		}
	}
}

// TestSeedVariants: Seed's corpus is the message, its truncations and a
// bit flip in each word.
func TestSeedVariants(t *testing.T) {
	msg := []byte{0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90}
	got := variants(msg)
	// The message, cuts to 0, 1, 4 and 8 bytes, and a flip in each of the
	// three words.
	if len(got) != 1+4+3 {
		t.Fatalf("%d variants, want 8: % x", len(got), got)
	}
	if !bytes.Equal(got[0], msg) {
		t.Fatalf("first variant % x, want the message", got[0])
	}
	for i, n := range []int{0, 1, 4, 8} {
		if !bytes.Equal(got[1+i], msg[:n]) {
			t.Errorf("cut %d: % x, want % x", i, got[1+i], msg[:n])
		}
	}
	for w := range 3 {
		b := got[5+w]
		want := bytes.Clone(msg)
		want[4*w] ^= 1 << w
		if !bytes.Equal(b, want) {
			t.Errorf("flip in word %d: % x, want % x", w, b, want)
		}
	}
	if got := variants([]byte{1}); len(got) != 3 { // itself, cut to 0, one flip
		t.Errorf("1-byte message: %d variants % x, want 3", len(got), got)
	}
}

// clobber is an encoder that ignores its dst.
type clobber struct{}

func (clobber) Marshal([]byte) []byte { return []byte{1, 2} }

func TestAppend(t *testing.T) {
	r := &recorder{}
	if got := Append(r, u32{0x04030201}); r.failed() || !bytes.Equal(got, []byte{1, 2, 3, 4}) {
		t.Fatalf("Append = % x, failures %v", got, r.fatals)
	}
	Append(r, clobber{})
	if len(r.fatals) != 1 {
		t.Fatalf("an encoder that drops dst: failures %v, want one", r.fatals)
	}
}

func TestDecodesTo(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		out  Unmarshaler
		want any
		norm func(any) any
		ok   bool
	}{
		{"equal", []byte{1, 0, 0, 0}, &u32{}, u32{1}, nil, true},
		{"different", []byte{2, 0, 0, 0}, &u32{}, u32{1}, nil, false},
		{"short", []byte{1}, &u32{}, u32{1}, nil, false},
		{"normalized", []byte{2, 0, 0, 0}, &u32{}, u32{1}, func(any) any { return 0 }, true},
	} {
		r := &recorder{}
		DecodesTo(r, tc.b, tc.out, tc.want, tc.norm)
		if r.failed() == tc.ok {
			t.Errorf("%s: failures %v, want ok %v", tc.name, r.fatals, tc.ok)
		}
	}
}
