package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/sdk/driver"
)

// ErrNotRun is wrapped by the error of a decision (or Commit, Cancel,
// Reset) that the server refused without running its script, when the
// backend could not send it again: the caller's deadline (or, without
// one, the resend budget: see the package doc) left no time for another try, the
// caller's ctx ended while it paused, or, in a batch, a later request on
// the same subject had already run. Nothing was counted: the call may be
// retried as it is. The refusal (TRYAGAIN, MOVED, ASK, CLUSTERDOWN or
// NOSCRIPT) is wrapped too.
var ErrNotRun = errors.New("the server refused the script without running it")

// errNoTime says why a refused script was not sent again.
var errNoTime = errors.New("no time left to send it again before the deadline")

// refusal is what a Redis error reply proves about the script command
// it answered.
type refusal uint8

const (
	// mayHaveRun: no refusal. A reply of the script itself, an error
	// it raised, or no reply at all (a timeout, a broken connection):
	// it may have run, and it is never sent again.
	mayHaveRun refusal = iota
	// noScript: NOSCRIPT, the server's script cache lacks it: the
	// command was refused before anything ran; send it with EVAL (or
	// after SCRIPT LOAD), at once.
	noScript
	// clusterRefused: the cluster refused the command before running
	// it (getNodeByQuery, before the call): TRYAGAIN (a multi-key command
	// during a slot's migration whose keys are not all on this node),
	// MOVED or ASK (the slot is, or is being moved, elsewhere: go-redis
	// follows those up to MaxRedirects, so one reaches the backend only
	// past them), CLUSTERDOWN (the cluster is down, or the slot is
	// served by no master: a failover's election, or a slot between
	// owners). Each is a moment of a resharding or failover: send it
	// again after a pause, within the caller's deadline.
	clusterRefused
)

// refusalOf owns the fact "this Redis error reply proves the script did
// not run". Only error replies count (Redis sends them as text, so this
// is where their words are read); a script's own errors never start with
// these words (Redis prefixes the errors raised inside a script, and
// a script is never partly refused: a refusal comes before it starts).
// Not included, though they too come before a command runs: LOADING,
// BUSY, MASTERDOWN, OOM, and READONLY (go-redis already follows
// READONLY on a cluster): they are not moments of a resharding, and the
// caller learns of them at once.
func refusalOf(err error) refusal {
	if err == nil { // the common case, without errors.As's allocation
		return mayHaveRun
	}
	var re goredis.Error
	if !errors.As(err, &re) {
		return mayHaveRun
	}
	switch {
	case goredis.HasErrorPrefix(err, "NOSCRIPT"):
		return noScript
	case goredis.HasErrorPrefix(err, "TRYAGAIN "),
		goredis.HasErrorPrefix(err, "MOVED "),
		goredis.HasErrorPrefix(err, "ASK "),
		goredis.HasErrorPrefix(err, "CLUSTERDOWN "):
		return clusterRefused
	}
	return mayHaveRun
}

func isNoScript(err error) bool { return refusalOf(err) == noScript }

// Pauses between the sends of a refused script: the first is about
// resendFirst, each next one twice the last, at most resendMost, each
// drawn at random between half and all of that (so that the callers a
// migration refused together do not all come back together).
const (
	resendFirst = 2 * time.Millisecond
	resendMost  = 100 * time.Millisecond
	// resendBudget bounds the re-sends of a call whose ctx has no
	// deadline (or a later one): a resharding refuses a slot's
	// multi-key commands for as long as that slot's keys take to move.
	resendBudget = 2 * time.Second
	// resendSlack is the margin a re-send keeps before the deadline
	// beyond twice the latest round trip (resender.wait).
	resendSlack = 5 * time.Millisecond
)

// resends is a Backend's record of its re-sends (Backend.resends).
type resends struct {
	count atomic.Uint64 // scripts sent again after a cluster refusal
	// budget replaces resendBudget when > 0 (tests).
	budget time.Duration
}

// resender paces the re-sends of one call's refused scripts (one
// decision's, or one batch's units).
type resender struct {
	b     *Backend
	n     int       // re-sends so far
	start time.Time // first send
	sent  time.Time // latest send
}

func (b *Backend) resender() resender {
	now := time.Now()
	return resender{b: b, start: now, sent: now}
}

// wait pauses before the next send of a script the cluster refused
// (clusterRefused), and returns nil when it may be sent. It returns at
// once with errNoTime when the pause plus twice the latest send's round
// trip, plus resendSlack, would end past ctx's deadline or the resend
// budget (so a try is never sent only to time out: a timeout would leave
// the caller not knowing whether it ran; round trips vary on a loaded
// machine, hence the margin), or with ctx's error when ctx ends while it
// pauses.
func (r *resender) wait(ctx context.Context) error {
	d := resendFirst << min(r.n, 10)
	d = min(d, resendMost)
	d = d/2 + rand.N(d/2+1)
	now := time.Now()
	budget := resendBudget
	if r.b.resends.budget > 0 {
		budget = r.b.resends.budget
	}
	end := r.start.Add(budget)
	if dl, ok := ctx.Deadline(); ok && dl.Before(end) {
		end = dl
	}
	if !now.Add(d + 2*now.Sub(r.sent) + resendSlack).Before(end) {
		return errNoTime
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.n++
	r.b.resends.count.Add(1)
	r.sent = time.Now()
	return nil
}

// giveUp returns the error of a script refused with refused that is not
// sent again, for why.
func (r *resender) giveUp(refused, why error) error {
	return fmt.Errorf("%w (sent %d times; %w): %w", ErrNotRun, r.n+1, why, refused)
}

// run sends a script as runOnce does (EVALSHA, EVAL on NOSCRIPT) and,
// while the cluster refuses it without running it (clusterRefused:
// TRYAGAIN, MOVED, ASK, CLUSTERDOWN), sends it again after a pause
// (resender), within ctx's deadline. Any other outcome, a timeout or a
// broken connection included, is returned as it is: it may have run.
func (b *Backend) run(ctx context.Context, s *goredis.Script, src string, evalOnly bool, keys []string, args []any) (any, error) {
	r := b.resender()
	for {
		v, err := b.runOnce(ctx, s, src, evalOnly, keys, args)
		if refusalOf(err) != clusterRefused {
			return v, err
		}
		if why := r.wait(ctx); why != nil {
			return nil, r.giveUp(err, why)
		}
	}
}

// resendNote is Describe's word on refused scripts.
const resendNote = "a decision the cluster refuses without running it (TRYAGAIN or ASK/MOVED while a slot moves, CLUSTERDOWN) is sent again after a pause, within the call's deadline; refused past it, the error wraps redis.ErrNotRun (nothing counted)"

// unitRefusals says which refusals a batch's pass met among the units
// it sends again (Backend.unitReplies).
type unitRefusals struct {
	noScript bool // NOSCRIPT: load the scripts first
	cluster  bool // clusterRefused: pause first (pauseRefused)
}

// pauseRefused pauses before the next pass of a batch (or coalesced
// group) whose units in again include some the cluster refused (their
// unit.refused), and returns again. When no time is left for another
// pass (resender.wait), those units fail instead, with ErrNotRun, and
// the rest of again is returned: only refused units, which did not run,
// are ever sent again.
func (b *Backend) pauseRefused(ctx context.Context, rs *resender, again []unit, out []driver.BatchResult) []unit {
	why := rs.wait(ctx)
	if why == nil {
		return again
	}
	kept := again[:0]
	for _, u := range again {
		if u.refused == nil {
			kept = append(kept, u)
			continue
		}
		err := rs.giveUp(u.refused, why)
		for _, i := range u.idx {
			out[i].Err = err
		}
	}
	return kept
}
