// Package jsonshape checks JSON documents against the Go types that
// produce them, for documents whose contract is "every key always
// present": Check fails on a missing key, an extra one, or a value of the
// wrong kind, and Paths lists every key a type can produce, so that tests
// can compare a document's keys with its documentation and with a golden
// list.
package jsonshape
