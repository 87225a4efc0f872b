package ratelog

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Config tunes New.
type Config struct {
	// Lines per key per Interval; 0 (or less) passes everything.
	Lines    int
	Interval time.Duration
	// MaxKeys bounds the keys tracked at once (0: 1024).
	MaxKeys int
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// SuppressedMessage is the message of the summary records.
const SuppressedMessage = "log lines suppressed"

const overflowKey = "\x00overflow"

type limiter struct {
	cfg  Config
	mu   sync.Mutex
	keys map[string]*window
}

// window counts one key's records in the current interval.
type window struct {
	start      time.Time
	passed     int
	suppressed int
	h          slog.Handler // writes the summary, with the key's attributes
	msg        string
	level      slog.Level
}

// Handler is the rate-limiting slog.Handler.
type Handler struct {
	l      *limiter
	h      slog.Handler
	prefix string
}

// New returns a Handler passing records to h within cfg's limits.
func New(h slog.Handler, cfg Config) *Handler {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = 1024
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	return &Handler{l: &limiter{cfg: cfg, keys: map[string]*window{}}, h: h}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.h.Enabled(ctx, level)
}

// WithAttrs implements slog.Handler; the attributes become part of the key.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range as {
		b.WriteString(a.Key)
		b.WriteByte('=')
		b.WriteString(a.Value.String())
		b.WriteByte(' ')
	}
	return &Handler{l: h.l, h: h.h.WithAttrs(as), prefix: b.String()}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{l: h.l, h: h.h.WithGroup(name), prefix: h.prefix + name + "."}
}

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	ok, sum := h.l.admit(h.prefix+"\x00"+r.Message, h, r)
	var err error
	if sum != nil {
		err = sum.h.Handle(ctx, *sum.rec)
	}
	if ok {
		if e := h.h.Handle(ctx, r); e != nil {
			err = e
		}
	}
	return err
}

type summary struct {
	h   slog.Handler
	rec *slog.Record
}

func (l *limiter) admit(key string, h *Handler, r slog.Record) (bool, *summary) {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cfg.Lines <= 0 {
		return true, nil
	}
	w := l.keys[key]
	if w == nil {
		if len(l.keys) >= l.cfg.MaxKeys {
			key = overflowKey
			w = l.keys[key]
		}
		if w == nil {
			w = &window{start: now, h: h.h, msg: r.Message, level: r.Level}
			l.keys[key] = w
		}
	}
	var sum *summary
	if now.Sub(w.start) >= l.cfg.Interval {
		sum = w.summaryLocked(now, l.cfg.Interval)
		w.start, w.passed, w.suppressed = now, 0, 0
	}
	if w.passed < l.cfg.Lines {
		w.passed++
		return true, sum
	}
	w.suppressed++
	w.level = max(w.level, r.Level)
	return false, sum
}

// summaryLocked returns the record saying how many lines the window
// suppressed, nil when none.
func (w *window) summaryLocked(now time.Time, interval time.Duration) *summary {
	if w.suppressed == 0 {
		return nil
	}
	rec := slog.NewRecord(now, w.level, SuppressedMessage, 0)
	rec.AddAttrs(slog.String("message", w.msg), slog.Int("suppressed", w.suppressed),
		slog.Duration("interval", interval))
	return &summary{h: w.h, rec: &rec}
}

// Flush writes the summaries of intervals that are over and forgets keys
// that have gone quiet. Call it now and then (the daemon does, every
// second) so that a burst's summary does not wait for the next record.
func (h *Handler) Flush(ctx context.Context) {
	l := h.l
	now := l.cfg.Now()
	var out []*summary
	l.mu.Lock()
	interval := l.cfg.Interval
	for k, w := range l.keys {
		if now.Sub(w.start) < interval {
			continue
		}
		if s := w.summaryLocked(now, interval); s != nil {
			out = append(out, s)
			w.start, w.passed, w.suppressed = now, 0, 0
			continue
		}
		delete(l.keys, k)
	}
	l.mu.Unlock()
	for _, s := range out {
		s.h.Handle(ctx, *s.rec)
	}
}

// SetLimits changes the lines per key and the interval (a reload);
// interval <= 0 keeps the current one.
func (h *Handler) SetLimits(lines int, interval time.Duration) {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.l.cfg.Lines = lines
	if interval > 0 {
		h.l.cfg.Interval = interval
	}
}

// Keys returns how many keys are tracked.
func (h *Handler) Keys() int {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	return len(h.l.keys)
}
