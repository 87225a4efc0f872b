// Package wiretest holds what the tests of the wire-format packages
// (netvsc/nvsp, netvsc/rndis, hvsock/wire) share, so that each check is
// written once:
//
//   - Hex and Golden: byte layouts written as hex, one group a field, and
//     compared with what an encoder produced.
//   - Kinds: a decoder's protocol errors checked by kind, with a record
//     of the kinds provoked, so that TestMain can fail a package one of
//     whose kinds no test provokes.
//   - Append and DecodesTo: an encoder appends to its buffer, and a
//     decoder gives back the value encoded.
//   - ProtocolError, RoundTrip and Reencodes: what a fuzz target asks of
//     every decoder (an error is a *protoerr.Error of a listed kind;
//     what decodes encodes back to the same value, or the same bytes).
//   - Seed: a fuzz target's seed messages, each with its truncations and
//     bit flips, where a hostile host's malformed messages start.
//
// It is for tests only: no non-test package may import it (testutil's
// import check covers it).
package wiretest
