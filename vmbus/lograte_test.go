package vmbus

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLimitLoggerSuppressesAndReports(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	l := LimitLogger(base, 3, time.Minute)
	if LimitLogger(l, 5, time.Second) != l {
		t.Fatal("a limited logger was wrapped again")
	}
	h := l.With("nic", "x").Handler() // derivatives share the limits
	t0 := time.Unix(1000, 0)
	line := func(msg string, at time.Duration) {
		h.Handle(context.Background(), slog.NewRecord(t0.Add(at), slog.LevelWarn, msg, 0))
	}
	for i := range 10 {
		line("link", time.Duration(i)*time.Second) // 3 pass, 7 suppressed
	}
	line("other", 0) // another kind has its own budget
	line("link", 61*time.Second)
	out := buf.String()
	if n := strings.Count(out, "msg=link"); n != 4 {
		t.Errorf("%d link lines passed, want 3 then 1:\n%s", n, out)
	}
	if !strings.Contains(out, `msg="log lines suppressed" nic=x line=link suppressed=7`) {
		t.Errorf("no suppressed count before the next window's line:\n%s", out)
	}
	if strings.Count(out, "log lines suppressed") != 1 || strings.Count(out, "msg=other") != 1 {
		t.Errorf("unexpected lines:\n%s", out)
	}
	if i := strings.Index(out, "suppressed=7"); i < 0 || strings.LastIndex(out, "msg=link") < i {
		t.Errorf("the suppressed line must come before the line that follows it:\n%s", out)
	}
}

func TestLimitLoggerBoundsKinds(t *testing.T) {
	l := LimitLogger(slog.New(slog.DiscardHandler), 1, time.Minute).Handler().(*limitHandler)
	for i := range 10 * maxLogKinds {
		l.Handle(context.Background(), slog.NewRecord(time.Unix(0, 0), slog.LevelInfo, strings.Repeat("x", i%700), 0))
	}
	if n := len(l.lim.kinds); n > maxLogKinds {
		t.Fatalf("%d kinds tracked", n)
	}
}
