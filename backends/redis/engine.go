package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

// An engine carries out the backend's operations on the server as
// detected: scriptMode (take.lua and settle.lua: every strategy, each
// decision one EVALSHA) where every master runs scripts, bareMode
// (bare.go: sliding windows as TairHash commands, GCRA as CL.THROTTLE,
// NonAtomic) where one refuses them. Backend.engine chooses it once per capability report;
// nothing else asks whether the server runs scripts. Errors do not name
// the operation yet: the Backend's methods do.
type engine interface {
	decide(ctx context.Context, o op, req driver.Request) (driver.Result, error)
	// batch carries out reqs, writing each outcome to out (len(reqs)).
	batch(ctx context.Context, reqs []request, out []driver.BatchResult)
	settle(ctx context.Context, resKey, id string, commit bool) error
	// notes say how decisions run (Describe).
	notes() []string
}

// chosenEngine is the engine of one capability report, or why there is
// none (a replica: capability.Report.Writable).
type chosenEngine struct {
	rep *capability.Report
	e   engine
	err error
}

// engine returns the engine for the current capability report (detecting
// on first use), built once per report. A report of a replica has none:
// its error names the master (rather than READONLY at the first write).
func (b *Backend) engine(ctx context.Context) (engine, error) {
	rep, err := b.report(ctx)
	if err != nil {
		return nil, err
	}
	if c := b.eng.Load(); c != nil && c.rep == rep {
		return c.e, c.err
	}
	c := &chosenEngine{rep: rep}
	switch {
	case rep.Writable() != nil:
		c.err = fmt.Errorf("detect: %w", rep.Writable())
	case !rep.Scripting.All():
		c.e = bareMode{b: b, rep: rep}
	default:
		c.e = scriptMode{b: b, rep: rep}
	}
	b.eng.Store(c)
	return c.e, c.err
}

// scriptMode runs take.lua or a fast script (fast.go): one EVALSHA per decision (or per coalesced
// group, Options.Coalesce), up to batchAttempts per EVALSHA in a batch.
type scriptMode struct {
	b   *Backend
	rep *capability.Report
}

func (m scriptMode) decide(ctx context.Context, o op, req driver.Request) (driver.Result, error) {
	if m.b.co != nil {
		return m.b.co.do(ctx, m.b, m.rep, request{op: o, Request: req})
	}
	return m.b.decideOne(ctx, &request{op: o, Request: req}, m.rep)
}

// decideOne runs one decision in an EVALSHA of its own: of its fast
// script in the short form, or of take.lua.
func (b *Backend) decideOne(ctx context.Context, r *request, rep *capability.Report) (driver.Result, error) {
	o, req := r.op, r.Request
	var (
		v       any
		err     error
		a       ack // Options.Durability's wait
		choices []ruleChoice
	)
	f, fast := b.attempt(r, rep)
	if fast {
		v, a, err = b.runFor(ctx, o, rep, f.s.script, f.s.src, f.keys, f.args())
		choices = f.s.choices
	} else {
		var c call
		if c, err = b.encode(o, req, b.opts.Clock.Now(), rep); err != nil {
			return driver.Result{}, err
		}
		v, a, err = b.runFor(ctx, o, rep, takeScript, lua.Take, c.keys, c.args)
		choices = c.attempts[0]
	}
	if err != nil {
		return driver.Result{}, err
	}
	res, err := b.finish(o, req, choices, v)
	a.apply(&res, b.opts.Durability.Replicas)
	return res, err
}

// batch sends reqs through the coalescer, when on, if they fit in one
// script (a batch of up to batchAttempts, such as one call of a few
// attempts): they share a script with concurrent calls, in input order;
// a batch of one goes as a single decision.
// A larger batch goes in scripts of its own.
func (m scriptMode) batch(ctx context.Context, reqs []request, out []driver.BatchResult) {
	switch {
	case m.b.co != nil && len(reqs) == 1: // as a single decision (alone: the short form)
		out[0].Result, out[0].Err = m.b.co.do(ctx, m.b, m.rep, reqs[0])
		return
	case m.b.co != nil && len(reqs) <= batchAttempts:
		m.b.co.group(ctx, m.b, m.rep, reqs, out)
		return
	}
	m.b.scripts(ctx, reqs, m.rep, out)
}

// settle reads the reservation first to learn the keys its refund
// touches, then runs the settle script over exactly those keys (the
// script re-checks them).
func (m scriptMode) settle(ctx context.Context, resKey, id string, commit bool) error {
	b := m.b
	flag := "0"
	if commit {
		flag = "1"
	}
	for range b.opts.SettleAttempts {
		plan, err := b.c.HGet(ctx, resKey, id).Result()
		if errors.Is(err, goredis.Nil) {
			return driver.ErrReservationNotFound
		}
		if err != nil {
			return err
		}
		keys := append([]string{resKey}, reservationKeys(plan)...)
		args := append(keyArgs(keys, 2), id, flag)
		v, err := b.run(ctx, settleScript, lua.Settle, m.rep.EvalOnly, keys, args)
		if err != nil {
			return err
		}
		n, err := replyInt(v)
		if err != nil {
			return err
		}
		switch n {
		case 1:
			return nil
		case 0:
			return driver.ErrReservationNotFound
		case -1:
			continue // the reservation changed since it was read
		default:
			return fmt.Errorf("unexpected reply %d", n)
		}
	}
	return fmt.Errorf("reservation kept changing over %d attempts", b.opts.SettleAttempts)
}

func (m scriptMode) notes() []string {
	n := "decisions are one EVALSHA each and are never replayed by the client after a timeout"
	if m.rep.EvalOnly {
		n = "decisions are one EVAL each (EVALSHA is refused) and are never replayed by the client after a timeout"
	}
	out := []string{n}
	switch {
	case m.b.opts.Coalesce <= 0:
	case m.b.co == nil:
		out = append(out, "coalescing: not applied (Options.Coalesce needs a standalone or Sentinel client; this one is a cluster or ring client)")
	default:
		out = append(out, fmt.Sprintf("coalescing: concurrent single decisions share multi-attempt scripts of up to %d attempts, at most %d in flight (Options.Coalesce)", batchAttempts, m.b.opts.Coalesce))
	}
	if n := m.b.durabilityNote(true); n != "" {
		out = append(out, n)
	}
	return out
}

// bareMode runs sliding-window rules as bare TairHash commands and GCRA
// rules as bare CL.THROTTLE commands where scripting is refused (bare.go,
// barecell.go): NonAtomic decisions, one by one.
type bareMode struct {
	b   *Backend
	rep *capability.Report
}

func (m bareMode) decide(ctx context.Context, o op, req driver.Request) (driver.Result, error) {
	return m.b.takeBare(ctx, o, req, m.rep)
}

func (m bareMode) batch(ctx context.Context, reqs []request, out []driver.BatchResult) {
	for i, req := range reqs {
		out[i].Result, out[i].Err = m.decide(ctx, req.op, req.Request)
	}
}

func (m bareMode) settle(context.Context, string, string, bool) error {
	return fmt.Errorf("%w: reservations need scripting (EVAL runs on %s)", errors.ErrUnsupported, m.rep.Scripting)
}

func (m bareMode) notes() []string {
	n := "no scripting: "
	th, cell := m.rep.Choice(driver.SlidingWindow).Strategy == capability.TairHashBare, m.rep.Choice(driver.GCRA).Strategy == capability.CellBare
	if th {
		n += "sliding-window rules run as bare TairHash commands, rule by rule, compensated when a later rule denies; "
	}
	if cell {
		n += "GCRA rules run as bare CL.THROTTLE commands, after every other rule, and a GCRA rule consumed before another GCRA rule refused keeps its units (under-admission, never over-admission); "
	}
	n += "every decision says NonAtomic; other algorithms, reservations and batches in one round trip are unavailable"
	if !th && !cell {
		n = "no scripting, and neither TairHash nor redis-cell is usable: every algorithm is unavailable"
	}
	out := []string{n}
	if m.b.opts.Coalesce > 0 {
		out = append(out, "coalescing: not applied (no scripting: decisions run as bare commands)")
	}
	if n := m.b.durabilityNote(false); n != "" {
		out = append(out, n)
	}
	return out
}
