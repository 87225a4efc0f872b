package wiretest

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// TB is the part of testing.TB the checks use, so that their own tests
// can hand them a recorder. A check returns after Fatalf.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Marshaler is a wire message's encoder: it appends the message to dst.
type Marshaler interface{ Marshal(dst []byte) []byte }

// Unmarshaler is a wire message's decoder.
type Unmarshaler interface{ Unmarshal(b []byte) error }

// Hex parses space-separated groups of hex digits (a layout written one
// field, often one u32, a group).
func Hex(t TB, s string) []byte {
	t.Helper()
	var out []byte
	for _, f := range strings.Fields(s) {
		if len(f)%2 != 0 {
			t.Fatalf("odd hex group %q", f)
			return nil
		}
		b, err := hex.DecodeString(f)
		if err != nil {
			t.Fatalf("bad hex %q: %v", f, err)
			return nil
		}
		out = append(out, b...)
	}
	return out
}

// Golden fails (and goes on) unless got is the layout written in want
// (Hex's form).
func Golden(t TB, name string, got []byte, want string) {
	t.Helper()
	if w := Hex(t, want); !bytes.Equal(got, w) {
		t.Errorf("%s:\n got % x\nwant % x", name, got, w)
	}
}

// Kinds records the protoerr kinds a package's tests provoke.
type Kinds struct {
	own  []protoerr.Kind
	seen sync.Map
}

// NewKinds is the record for a package that returns the kinds own.
func NewKinds(own ...protoerr.Kind) *Kinds { return &Kinds{own: own} }

// Want fails unless err is a *protoerr.Error of kind k, with the netvsc
// package prefix; it records k as provoked.
func (ks *Kinds) Want(t TB, err error, k protoerr.Kind) {
	t.Helper()
	ks.seen.Store(k, true)
	pe, ok := protoerr.As(err)
	if !ok {
		t.Fatalf("got error %v, want a *protoerr.Error of kind %q", err, k)
		return
	}
	if pe.Kind != k {
		t.Fatalf("got kind %q (%v), want %q", pe.Kind, err, k)
		return
	}
	if !strings.HasPrefix(err.Error(), "netvsc: ") {
		t.Fatalf("error %q lacks the package prefix", err)
	}
}

// Missing lists the package's kinds no Want has recorded.
func (ks *Kinds) Missing() []protoerr.Kind {
	var out []protoerr.Kind
	for _, k := range ks.own {
		if _, ok := ks.seen.Load(k); !ok {
			out = append(out, k)
		}
	}
	return out
}

// Run is a TestMain: it runs the tests and, after a full run (neither
// -run nor -fuzz) that passed, fails unless a test provoked each of the
// package's kinds (the house rule: a test for each kind). Use it as
// os.Exit(kinds.Run(m)).
func (ks *Kinds) Run(m *testing.M) int {
	code := m.Run()
	full := flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.fuzz").Value.String() == ""
	if code == 0 && full {
		for _, k := range ks.Missing() {
			fmt.Fprintf(os.Stderr, "no test provokes kind %q\n", k)
			code = 1
		}
	}
	return code
}

// ProtocolError fails unless err is a *protoerr.Error with a listed kind,
// the only error a decoder returns.
func ProtocolError(t TB, err error) {
	t.Helper()
	pe, ok := protoerr.As(err)
	if !ok || !pe.Kind.Valid() {
		t.Fatalf("decoder returned %v (%T), want a *protoerr.Error with a listed kind", err, err)
		return
	}
	_ = err.Error()
}

// RoundTrip re-encodes a decoded value (a pointer whose element has a
// Marshal method) and decodes that again into a fresh value; the two
// decodes must be equal (after norm, when given).
func RoundTrip(t TB, name string, got Unmarshaler, norm func(any) any) {
	t.Helper()
	b := got.(Marshaler).Marshal(nil) // *T has T's value-receiver Marshal
	again := reflect.New(reflect.TypeOf(got).Elem()).Interface().(Unmarshaler)
	if err := again.Unmarshal(b); err != nil {
		t.Fatalf("%s: re-decoding its own encoding: %v\n% x", name, err, b)
		return
	}
	a, c := reflect.ValueOf(got).Elem().Interface(), reflect.ValueOf(again).Elem().Interface()
	if norm != nil {
		a, c = norm(a), norm(c)
	}
	if !reflect.DeepEqual(a, c) {
		t.Fatalf("%s: round trip\n got %+v\nwant %+v", name, c, a)
	}
}

// Append encodes m after a byte already in the buffer, as a caller
// appending messages does, and fails unless that byte survived; it
// returns m's encoding.
func Append(t TB, m Marshaler) []byte {
	t.Helper()
	b := m.Marshal([]byte{0xee})
	if len(b) == 0 || b[0] != 0xee {
		t.Fatalf("%T.Marshal clobbered dst: % x", m, b)
		return nil
	}
	return b[1:]
}

// DecodesTo fails unless b decodes into out (a pointer) as want (after
// norm, when given).
func DecodesTo(t TB, b []byte, out Unmarshaler, want any, norm func(any) any) {
	t.Helper()
	if err := out.Unmarshal(b); err != nil {
		t.Fatalf("%T.Unmarshal: %v\n% x", out, err, b)
		return
	}
	got := reflect.ValueOf(out).Elem().Interface()
	a, w := got, want
	if norm != nil {
		a, w = norm(got), norm(want)
	}
	if !reflect.DeepEqual(a, w) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

// Span is the bytes [Off, Off+Len) of a message.
type Span struct{ Off, Len int }

// Reencodes fails unless out, the encoding of v as parsed from in, is in
// itself but for the ignored spans (fields the parser does not read and
// the encoder writes as zeros).
func Reencodes(t TB, in, out []byte, v any, ignored ...Span) {
	t.Helper()
	want := bytes.Clone(in)
	for _, s := range ignored {
		clear(want[s.Off : s.Off+s.Len])
	}
	if !bytes.Equal(out, want) {
		t.Fatalf("% x parsed to %+v, which encodes to % x", in, v, out)
	}
}

// Seed adds msg to f's corpus, and with it what a hostile peer makes of
// it: msg cut short (to nothing, one byte, half, one byte less) and msg
// with one bit flipped in each 32-bit word (a different bit each word).
// rest are the fuzz target's other arguments, the same for every entry.
func Seed(f *testing.F, msg []byte, rest ...any) {
	for _, b := range variants(msg) {
		f.Add(append([]any{b}, rest...)...)
	}
}

// variants is msg, its truncations and its bit flips, as Seed adds them.
func variants(msg []byte) [][]byte {
	out := [][]byte{bytes.Clone(msg)}
	cut := map[int]bool{}
	for _, n := range []int{0, 1, len(msg) / 2, len(msg) - 1} {
		if n >= 0 && n < len(msg) && !cut[n] {
			cut[n] = true
			out = append(out, bytes.Clone(msg[:n]))
		}
	}
	for i := 0; i < len(msg); i += 4 {
		b := bytes.Clone(msg)
		b[i] ^= 1 << (i / 4 % 8)
		out = append(out, b)
	}
	return out
}
