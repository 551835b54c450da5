// Package lograte keeps an outage from flooding a log: during one, every
// request fails the same way, and one line with a count says as much as
// thousands. A Limiter lets through at most one line of each kind every
// interval and counts the others; the next line of that kind written
// carries "suppressed": how many were held back since the last one.
//
// A kind is a log site (a key its caller names, or a message) plus the
// kind of error the line reports: its innermost type, or for a system
// call its errno (connection refused, reset …), or a timeout. A refused
// dial and a timeout at one site are two kinds; the same refusal from a
// thousand requests is one.
package lograte

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"
)

// Every is the interval freqcap uses between two lines of one kind.
const Every = 10 * time.Second

// maxKinds bounds the kinds tracked. Keys are call sites and error kinds
// are types, so a program has few; past this many, a new kind is
// tracked under its key alone if that is known, else with every other
// new one.
const maxKinds = 1024

const overflow = "\x00overflow"

// A Limiter decides which lines to write. It is safe for concurrent use
// and reads time only from now.
type Limiter struct {
	now   func() time.Time
	every time.Duration

	mu    sync.Mutex
	kinds map[string]*state
}

type state struct {
	last       time.Time
	suppressed int
}

// New returns a Limiter that lets through one line of a kind every
// `every`, reading the time from now (nil means time.Now).
func New(now func() time.Time, every time.Duration) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, every: every, kinds: map[string]*state{}}
}

// Pass reports whether a line of the kind of key and args (slog-style
// key-value pairs or slog.Attrs; the first error among them gives the
// error kind) may be written now, and how many of that kind were held
// back since the last one written.
func (l *Limiter) Pass(key string, args []any) (ok bool, suppressed int) {
	kind := key
	if err := firstError(args); err != nil {
		kind += "\x00" + ErrorKind(err)
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st, seen := l.kinds[kind]
	if !seen && len(l.kinds) >= maxKinds {
		// Full: track the line under its key, or when that is new too,
		// with every other such line.
		if st, seen = l.kinds[key]; !seen {
			st, seen = l.kinds[overflow]
			kind = overflow
		}
	}
	if !seen {
		st = &state{}
		l.kinds[kind] = st
	}
	if seen && now.Sub(st.last) < l.every {
		st.suppressed++
		return false, 0
	}
	n := st.suppressed
	st.last, st.suppressed = now, 0
	return true, n
}

// Log writes msg with args at level to log unless l holds it back; a
// line that follows held-back ones gets "suppressed" with their number.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	ok, n := l.Pass(key, args)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args[:len(args):len(args)], "suppressed", n)
	}
	log.Log(context.Background(), level, msg, args...)
}

// ErrorKind names the kind of err for grouping log lines: "timeout"
// for a deadline or a network timeout, the errno's text for a failed
// system call ("connection refused"), else the type of the innermost
// error it wraps.
func ErrorKind(err error) string {
	var errno syscall.Errno
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &errno):
		return errno.Error()
	}
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return fmt.Sprintf("%T", err)
		}
		err = u
	}
}

func firstError(args []any) error {
	for _, a := range args {
		switch v := a.(type) {
		case error:
			return v
		case slog.Attr:
			if err, ok := v.Value.Any().(error); ok {
				return err
			}
		}
	}
	return nil
}

// Handler is a slog.Handler that passes records at WARN and above
// through a Limiter, keyed by their message, before handing them to
// another handler; lower levels pass unlimited.
type Handler struct {
	next  slog.Handler
	lim   *Limiter
	attrs []any // WithAttrs', for the error kind
}

// NewHandler returns a Handler writing to next through lim.
func NewHandler(next slog.Handler, lim *Limiter) *Handler {
	return &Handler{next: next, lim: lim}
}

// Enabled reports whether next handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle writes r unless the Limiter holds it back.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	args := append([]any(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		args = append(args, a)
		return true
	})
	ok, n := h.lim.Pass(r.Message, args)
	if !ok {
		return nil
	}
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", n))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a Handler with attrs, sharing the Limiter.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := &Handler{next: h.next.WithAttrs(attrs), lim: h.lim, attrs: append([]any(nil), h.attrs...)}
	for _, a := range attrs {
		c.attrs = append(c.attrs, a)
	}
	return c
}

// WithGroup returns a Handler with the group, sharing the Limiter.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), lim: h.lim, attrs: h.attrs}
}

// Printer writes lines given as Printf(ctx, format, args) — go-redis's
// own log lines, for instance: redis.SetLogger takes any value with this
// method — to Log at WARN through Lim, as message Msg with the line as
// "detail", one line per format and error kind every interval.
type Printer struct {
	Log *slog.Logger
	Lim *Limiter
	Msg string
}

// Printf formats the line and logs it unless the Limiter holds it back.
func (p Printer) Printf(_ context.Context, format string, v ...any) {
	ok, n := p.Lim.Pass(format, v)
	if !ok {
		return
	}
	args := []any{"detail", fmt.Sprintf(format, v...)}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	p.Log.Warn(p.Msg, args...)
}
