package console

import (
	"bytes"
	"io"
	"log/slog"
	"time"

	"github.com/freqcap/freqcap/internal/lograte"
)

// rateLog writes the console's failure lines: at most one line of a kind
// every `every`, where a kind is the call site's key and the kind of the
// error among the line's arguments (lograte.ErrorKind: a refused dial, a
// timeout …). During an outage every request fails the same way, and one
// line with a count says as much as thousands: a line that follows held
// back ones carries "suppressed", their number. Every line about a
// failure goes through it: handlers' backend errors, the central error
// handler's, the overview's and the HTTP server's own. Failed sign-ins
// do not (each is logged: the guard bounds them), nor do audit lines. It
// is safe for concurrent use.
type rateLog struct {
	log *slog.Logger
	lim *lograte.Limiter
}

// logEvery is the console's interval between two lines of one kind.
const logEvery = lograte.Every

func newRateLog(log *slog.Logger, now func() time.Time, every time.Duration) *rateLog {
	return &rateLog{log: log, lim: lograte.New(now, every)}
}

// Warn logs msg with args at level WARN unless a line of its kind was
// written less than the interval ago; then it only counts it.
func (r *rateLog) Warn(key, msg string, args ...any) {
	r.lim.Log(r.log, slog.LevelWarn, key, msg, args...)
}

// Error is Warn at level ERROR.
func (r *rateLog) Error(key, msg string, args ...any) {
	r.lim.Log(r.log, slog.LevelError, key, msg, args...)
}

// writer returns a writer for a log.Logger (http.Server.ErrorLog): each
// line written is logged as msg, with the line as "detail", under key.
func (r *rateLog) writer(key, msg string) io.Writer {
	return lineWriter(func(line string) { r.Warn(key, msg, "detail", line) })
}

type lineWriter func(string)

func (w lineWriter) Write(p []byte) (int, error) {
	w(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
