// Package ratelog bounds what a misbehaving host or client can write into
// the log. Its Handler wraps a slog.Handler and passes at most Lines
// records per key per Interval; the key is the record's message plus the
// attributes the logger was made With (so one NIC's resets never hide
// another's). Records beyond that are counted, and one "log lines
// suppressed" record with the count follows when the interval is over: at
// the next record with that key, or at Flush, whichever comes first. The
// number of keys is bounded too; keys beyond MaxKeys share one.
//
// A Handler is safe for concurrent use. The handlers derived from it with
// WithAttrs and WithGroup share its limits.
package ratelog
