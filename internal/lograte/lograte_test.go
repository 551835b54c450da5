package lograte

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func refused(addr string) error {
	return fmt.Errorf("sdk: take: %w", &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.ParseIP(addr), Port: 6379},
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
}

func TestErrorKind(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"refused", refused("10.0.0.1"), "connection refused"},
		{"deadline", fmt.Errorf("op: %w", context.DeadlineExceeded), "timeout"},
		{"net timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, "timeout"},
		{"canceled", fmt.Errorf("op: %w", context.Canceled), "canceled"},
		{"plain", fmt.Errorf("a: %w", errors.New("b")), "*errors.errorString"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ErrorKind(tc.err); got != tc.want {
				t.Errorf("ErrorKind(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

// TestLimiter: one line per key and error kind per interval, whatever
// the error's text (addresses differ); the next one carries the count.
func TestLimiter(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := New(clk.now, 10*time.Second)
	for i := range 20 {
		l.Log(log, slog.LevelWarn, "check", "check failed", "err", refused("10.0.0."+strconv.Itoa(i)))
		l.Log(log, slog.LevelWarn, "check", "check failed", "err", context.DeadlineExceeded)
		l.Log(log, slog.LevelError, "stats", "stats failed", "err", refused("10.0.0.1"))
		l.Log(log, slog.LevelWarn, "plain", "no error")
	}
	out := buf.String()
	if got := strings.Count(out, "\n"); got != 4 {
		t.Errorf("20 rounds of 4 kinds wrote %d lines, want 4:\n%s", got, out)
	}
	buf.Reset()
	clk.t = clk.t.Add(9 * time.Second)
	l.Log(log, slog.LevelWarn, "check", "check failed", "err", refused("10.0.0.1"))
	if buf.Len() != 0 {
		t.Errorf("a line 9s after the last of its kind was written:\n%s", buf.String())
	}
	clk.t = clk.t.Add(time.Second)
	l.Log(log, slog.LevelWarn, "check", "check failed", "err", refused("10.0.0.1"))
	if out := buf.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "suppressed=20") {
		t.Errorf("after the interval: want one line with suppressed=20 (19 held back, then 1 more):\n%s", out)
	}
}

// TestLimiterBounded: memory stays bounded whatever the number of keys.
func TestLimiterBounded(t *testing.T) {
	l := New(nil, time.Hour)
	for i := range maxKinds + 500 {
		l.Pass("key-"+strconv.Itoa(i), []any{"err", refused("10.0.0.1")})
	}
	if n := len(l.kinds); n > maxKinds+1 {
		t.Errorf("%d kinds tracked, want at most %d", n, maxKinds+1)
	}
	if ok, _ := l.Pass("another-new-key", nil); ok {
		t.Errorf("a new kind past the bound was let through: it must share the overflow's interval")
	}
}

// TestHandler: WARN and above are limited by message and error kind,
// attributes given to WithAttrs included; INFO passes.
func TestHandler(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewTextHandler(&buf, nil), New(clk.now, time.Minute)))
	for range 5 {
		log.Info("started")
		log.Warn("flush failed", "err", refused("10.0.0.1"))
		log.Warn("flush failed", "err", context.DeadlineExceeded)
		log.With("err", refused("10.0.0.2")).Error("other")
	}
	out := buf.String()
	if strings.Count(out, "msg=started") != 5 || strings.Count(out, `msg="flush failed"`) != 2 || strings.Count(out, "msg=other") != 1 {
		t.Errorf("handler output:\n%s", out)
	}
	clk.t = clk.t.Add(time.Minute)
	buf.Reset()
	log.With("err", refused("10.0.0.2")).Error("other")
	if !strings.Contains(buf.String(), "suppressed=4") {
		t.Errorf("after the interval: want suppressed=4:\n%s", buf.String())
	}
}

// TestPrinter: printf-style lines (go-redis's) become one slog line per
// format and error kind per interval, never the raw line.
func TestPrinter(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var buf bytes.Buffer
	p := Printer{Log: slog.New(slog.NewTextHandler(&buf, nil)), Lim: New(clk.now, time.Minute), Msg: "redis client"}
	for i := range 30 {
		p.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, refused("10.0.0."+strconv.Itoa(i)))
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `msg="redis client" detail="redis: connection pool: failed to dial after 5 attempts: sdk: take: dial tcp 10.0.0.0:6379: connect: connection refused"`) {
		t.Errorf("printer output:\n%s", out)
	}
}
