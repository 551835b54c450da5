package console

import (
	"log/slog"
	"sync"
	"time"
)

// rateLog writes at most one line per key every `every`: during an
// outage every failed request fails the same way, and one line with a
// count says as much as thousands. A line that follows suppressed ones
// carries "suppressed": their number. Keys are a fixed set of call
// sites, so its memory is bounded. It is safe for concurrent use.
type rateLog struct {
	log   *slog.Logger
	now   func() time.Time
	every time.Duration

	mu   sync.Mutex
	keys map[string]*rateState
}

type rateState struct {
	last       time.Time
	suppressed int
}

// logEvery is the console's interval between two lines of one kind.
const logEvery = 10 * time.Second

func newRateLog(log *slog.Logger, now func() time.Time, every time.Duration) *rateLog {
	return &rateLog{log: log, now: now, every: every, keys: map[string]*rateState{}}
}

// Warn logs msg with args at level WARN unless a line of key was written
// less than r.every ago; then it only counts it.
func (r *rateLog) Warn(key, msg string, args ...any) {
	now := r.now()
	r.mu.Lock()
	st, ok := r.keys[key]
	if !ok {
		st = &rateState{}
		r.keys[key] = st
	}
	if ok && now.Sub(st.last) < r.every {
		st.suppressed++
		r.mu.Unlock()
		return
	}
	n := st.suppressed
	st.last, st.suppressed = now, 0
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	r.log.Warn(msg, args...)
}
