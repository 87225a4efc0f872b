package vmbus

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Rate-limited logging. A host can make a guest log the same line again
// and again at will (a flapping link or VF, failed sends, a sub-channel
// that never becomes usable, a device that fails at every reset), so the
// logs of vmbus and netvsc pass through LimitLogger: each kind of line
// (its message text) passes at most burst times per interval; the rest are
// counted, and the first line of that kind to pass afterwards is preceded
// by one "log lines suppressed" line with the count. Nothing is lost
// silently, and nothing a host does can flood the log.

// Defaults for LimitLogger, used by Open and by netvsc.
const (
	DefaultLogBurst    = 10
	DefaultLogInterval = time.Minute
)

// maxLogKinds bounds the kinds tracked at once; past it the oldest
// windows are forgotten (messages are constants, so this is never reached
// in practice).
const maxLogKinds = 256

// LimitLogger returns a logger that passes at most burst lines of each
// message per interval through l's handler (0 values take the defaults).
// A logger that is already limited is returned as it is, so an owner that
// wants the limits to hold across resets of a device wraps its logger once
// and passes the result every time. Safe for concurrent use; its
// derivatives (With, WithGroup) share its limits.
func LimitLogger(l *slog.Logger, burst int, interval time.Duration) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	if _, ok := l.Handler().(*limitHandler); ok {
		return l
	}
	if burst <= 0 {
		burst = DefaultLogBurst
	}
	if interval <= 0 {
		interval = DefaultLogInterval
	}
	return slog.New(&limitHandler{next: l.Handler(), lim: &logLimits{burst: burst, every: interval, kinds: map[string]*logWindow{}}})
}

type limitHandler struct {
	next slog.Handler
	lim  *logLimits
}

type logLimits struct {
	burst int
	every time.Duration
	mu    sync.Mutex
	kinds map[string]*logWindow
}

type logWindow struct {
	start      time.Time
	passed     int
	suppressed int
}

// admit decides whether a line of kind msg at t passes, and returns the
// lines of that kind suppressed since the last one that did.
func (l *logLimits) admit(msg string, t time.Time) (pass bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.kinds[msg]
	if w == nil {
		if len(l.kinds) >= maxLogKinds {
			clear(l.kinds)
		}
		w = &logWindow{start: t}
		l.kinds[msg] = w
	}
	if t.Sub(w.start) >= l.every || t.Before(w.start) {
		w.start, w.passed = t, 0
	}
	if w.passed >= l.burst {
		w.suppressed++
		return false, 0
	}
	w.passed++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}

func (h *limitHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *limitHandler) Handle(ctx context.Context, r slog.Record) error {
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	pass, suppressed := h.lim.admit(r.Message, t)
	if !pass {
		return nil
	}
	if suppressed > 0 {
		s := slog.NewRecord(r.Time, r.Level, "log lines suppressed", r.PC)
		s.AddAttrs(slog.String("line", r.Message), slog.Int("suppressed", suppressed), slog.Duration("interval", h.lim.every))
		if err := h.next.Handle(ctx, s); err != nil {
			return err
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *limitHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &limitHandler{next: h.next.WithAttrs(as), lim: h.lim}
}

func (h *limitHandler) WithGroup(name string) slog.Handler {
	return &limitHandler{next: h.next.WithGroup(name), lim: h.lim}
}
