package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/alg"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Bare mode: servers that refuse scripting (Alibaba Tair ESSD/SSD
// instances have no Lua; some proxies refuse EVAL) but have TairHash or
// redis-cell. GCRA rules then run as CL.THROTTLE commands, consumed after
// every TairHash rule; their units cannot be given back, so a GCRA rule
// consumed before another one refused keeps them: under-admission, never
// over-admission (barecell.go). Sliding-window rules run as plain
// TairHash commands:
//
//  1. one pipeline: TIME, then EXHGETALL of every rule's key (a snapshot);
//  2. every rule is evaluated on the snapshot exactly as take.lua does;
//     a peek, an inspection or a denial writes no state;
//  3. otherwise each rule in turn: MULTI, EXHINCRBY k i c MAX (limit -
//     other counted cells), EXHPEXPIREAT k i ⌈(i+K+1)·s⌉ ms + 1 s, EXEC. MAX makes the
//     increment fail, changing nothing, if concurrent writers filled the
//     rule since the snapshot: a rule can never over-admit (except across
//     a cell boundary, where the other cells' sum only shrinks);
//  4. when a rule's EXHINCRBY fails, the rules already incremented get a
//     compensating EXHINCRBY k i -c MIN 0 (and EXHPEXPIREAT again: a bare
//     EXHINCRBY drops the TTL) and the request is denied. Between 3 and 4
//     other clients may see the units of the earlier rules: the decision
//     is not atomic, and its Result says NonAtomic.
//
// The denial trail and idempotency records are written with plain
// commands after the decision (not in the same atomic step), in
// take.lua's formats: a record is the one storage.go describes, and bare
// mode replays take.lua's records as take.lua replays its own, legacy
// text records included (parseTake decodes both modes' replies and
// replays). Reservations
// need scripting and are refused (errors.ErrUnsupported), as are rules of
// other algorithms, quiet hours (driver.Request.Quiet), headroom
// (driver.Rule.Keep) and exempt rules (driver.Rule.Exempt): refused before
// anything is read or written.

// errOverflow is the exact reply of EXHINCRBY … MAX (or MIN) when the
// result would fall outside the bound, or int64 would overflow; nothing
// was changed (docs/MODULES.md, module bugs).
const errOverflow = "ERR increment or decrement would overflow"

// isOverflow reports whether err is TairHash's MAX/MIN refusal. It is the
// one place bare mode reads an error text: the reply is the protocol's
// only signal of a bounded increment that did not happen.
func isOverflow(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && re.Error() == errOverflow
}

// bareExpirySlack is how long a cell's field outlives the cell's count
// (incr): longer than any delay between a snapshot's TIME and its
// EXHGETALL.
const bareExpirySlack = lua.FieldSlackMs * time.Millisecond

// bareRule is one rule's state in bare mode.
type bareRule struct {
	r     *driver.Rule
	key   string
	sp    driver.CellSpan // in µs
	i     int64           // current cell
	empty bool            // EXHGETALL found no field
	other int64           // the counted cells other than i
	res   []int64
	// shadowDenied: a shadow rule whose increment failed (not consumed).
	shadowDenied bool
	// cell: a GCRA rule on CL.THROTTLE (barecell.go), with CL.THROTTLE's
	// count and period (cellArgs).
	cell          bool
	count, period int64
}

// takeBare carries out req with bare TairHash and CL.THROTTLE commands
// (see above).
func (b *Backend) takeBare(ctx context.Context, o op, req driver.Request, rep *capability.Report) (driver.Result, error) {
	bq, err := newBareReq(o, req, rep)
	if err != nil {
		return driver.Result{}, err
	}
	// 1. The snapshot (and a stored decision, for a retry).
	kvs, now, stored, err := b.bareSnapshot(ctx, bq)
	if err != nil {
		return driver.Result{}, err
	}
	if stored != nil {
		return replayRecord(*stored, req.Rules)
	}
	// 2. Evaluate.
	allowed, err := bq.evalAll(kvs, now)
	if err != nil {
		return driver.Result{}, err
	}
	// 3. Consume, rule by rule, bounded by MAX; 4. compensate on failure.
	if allowed && o == opTake {
		if allowed, err = b.bareConsume(ctx, bq.rules, now, bq.c); err != nil {
			return driver.Result{}, err
		}
	}
	// The trail and the idempotency record, after the decision.
	rec := bareRecord(bq.rules, now, allowed)
	trail, err := b.bareAfter(ctx, bq, rec, allowed)
	if err != nil {
		return driver.Result{}, err
	}
	v := make([]any, 0, 3+len(trail))
	v = append(v, rec.first, rec.now, rec.rules)
	for _, e := range trail {
		v = append(v, e)
	}
	return bareResult(v, req.Rules)
}

// bareRecord returns the decision of rules (evaluated and consumed) at
// now as take.lua's reply holds it, and its idempotency record stores it.
func bareRecord(rules []bareRule, now int64, allowed bool) record {
	rec := record{now: now}
	if allowed {
		rec.first = lua.ReplyAllowed
	}
	bin := make([]byte, 0, len(rules)*perRuleBytes)
	for k := range rules {
		bin = appendRule(bin, [perRuleReply]int64(rules[k].res))
	}
	rec.rules = string(bin)
	return rec
}

// bareReq is a request checked for bare mode: its op, cost and rules, and
// whether it writes the trail and an idempotency record.
type bareReq struct {
	o           op
	req         driver.Request
	c           int64
	rules       []bareRule
	trail, idem bool
}

// newBareReq checks req for bare mode: sliding-window rules only, no
// reservations, seeds, epochs or overrides (they need scripting).
func newBareReq(o op, req driver.Request, rep *capability.Report) (*bareReq, error) {
	switch o {
	case opTake, opPeek, opInspect:
	case opReserve:
		return nil, fmt.Errorf("%w: reservations need scripting (EVAL runs on %s)", errors.ErrUnsupported, rep.Scripting)
	default:
		return nil, fmt.Errorf("unknown op %d", o)
	}
	bq := &bareReq{o: o, req: req, c: req.Cost}
	if o == opInspect {
		bq.c = 1
	} else if bq.c < 1 {
		return nil, fmt.Errorf("cost must be >= 1, got %d", bq.c)
	}
	bq.rules = make([]bareRule, len(req.Rules))
	for k := range req.Rules {
		br, err := newBareRule(&req.Rules[k], rep)
		if err != nil {
			return nil, err
		}
		bq.rules[k] = br
	}
	if req.OverrideKey != "" {
		return nil, fmt.Errorf("%w: overrides need scripting (EVAL runs on %s)", errors.ErrUnsupported, rep.Scripting)
	}
	if len(req.Quiet) > 0 {
		return nil, fmt.Errorf("%w: quiet hours need scripting (EVAL runs on %s)", errors.ErrUnsupported, rep.Scripting)
	}
	bq.trail = req.TrailKey != "" && (o == opInspect || (req.TrailMax > 0 && o == opTake))
	bq.idem = req.IdempotencyKey != "" && o == opTake
	if len(bq.rules) == 0 && !bq.trail {
		return nil, errNoKeys
	}
	if bq.idem && req.IdempotencyTTL <= 0 {
		return nil, fmt.Errorf("idempotency TTL must be > 0, got %v", req.IdempotencyTTL)
	}
	return bq, nil
}

// newBareRule checks that bare mode can decide r under rep's choices: a
// sliding window on TairHash, or a GCRA rule on CL.THROTTLE that
// CL.THROTTLE expresses exactly (cellArgs; no other strategy is left to
// take the others).
func newBareRule(r *driver.Rule, rep *capability.Report) (bareRule, error) {
	if err := validRule(r); err != nil {
		return bareRule{}, err
	}
	var br bareRule
	switch ch := rep.Choice(r.Algorithm); {
	case r.Algorithm == driver.SlidingWindow && ch.Strategy == capability.TairHashBare:
		br = bareRule{r: r, key: r.Key + suffixTairHash, sp: r.Span(time.Microsecond)}
	case r.Algorithm == driver.GCRA && ch.Strategy == capability.CellBare:
		count, period, why := cellArgs(r)
		if why != "" {
			return bareRule{}, fmt.Errorf("rule %q: %w: without scripting GCRA runs on CL.THROTTLE, which cannot express this rule exactly: %s", r.Name, errors.ErrUnsupported, why)
		}
		br = bareRule{r: r, key: r.Key + suffixCell, cell: true, count: count, period: period}
	default:
		return bareRule{}, fmt.Errorf("rule %q: %w", r.Name, unsupported(r.Algorithm, ch))
	}
	if r.Seed > 0 || r.Epoch > 0 {
		return bareRule{}, fmt.Errorf("rule %q: %w: rules of a policy store (epochs, seeds) need scripting (EVAL runs on %s)", r.Name, errors.ErrUnsupported, rep.Scripting)
	}
	if r.Keep > 0 || r.Exempt != driver.NotExempt {
		return bareRule{}, fmt.Errorf("rule %q: %w: headroom and exempt message classes need scripting (EVAL runs on %s)", r.Name, errors.ErrUnsupported, rep.Scripting)
	}
	return br, nil
}

// bareSnapshot reads, in one pipeline, the server's TIME (µs), the stored
// decision of an idempotent retry (its record, nil when none) and every
// rule's state: its fields (EXHGETALL), or a CL.THROTTLE rule's TAT (GET).
func (b *Backend) bareSnapshot(ctx context.Context, bq *bareReq) (kvs []*goredis.Cmd, now int64, stored *string, err error) {
	pipe := b.c.Pipeline()
	tm := pipe.Time(ctx)
	var rc *goredis.StringCmd
	if bq.idem {
		rc = pipe.Get(ctx, bq.req.IdempotencyKey)
	}
	kvs = make([]*goredis.Cmd, len(bq.rules))
	for k := range bq.rules {
		cmd := "exhgetall"
		if bq.rules[k].cell {
			cmd = "get"
		}
		kvs[k] = pipe.Do(ctx, cmd, bq.rules[k].key)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	if err := tm.Err(); err != nil {
		return nil, 0, nil, err
	}
	if rc != nil {
		switch v, err := rc.Result(); {
		case err == nil:
			return nil, 0, &v, nil
		case !errors.Is(err, goredis.Nil):
			return nil, 0, nil, err
		}
	}
	return kvs, tm.Val().UnixMicro(), nil, nil
}

// evalAll evaluates every rule on its snapshot: allowed unless an
// enforced rule denies.
func (bq *bareReq) evalAll(kvs []*goredis.Cmd, now int64) (allowed bool, err error) {
	allowed = true
	for k := range bq.rules {
		br := &bq.rules[k]
		if br.cell {
			if err := br.evalCell(kvs[k], now, bq.c); err != nil {
				return false, err
			}
		} else if err := br.evalTairHash(kvs[k], now, bq.c); err != nil {
			return false, err
		}
		if br.res[0] != 1 && !br.r.Shadow {
			allowed = false
		}
	}
	return allowed, nil
}

// bareConsume increments every admitting TairHash rule in turn, bounded
// by MAX; when one fails (concurrent writers filled it since the
// snapshot), it compensates the rules already incremented and reports that
// rule's state as it is now: allowed false. Then the CL.THROTTLE rules
// consume (throttleAll), last because they cannot be given back. Allowed
// rules' results then count c.
func (b *Backend) bareConsume(ctx context.Context, rules []bareRule, now, c int64) (allowed bool, err error) {
	for k := range rules {
		br := &rules[k]
		if br.cell || (br.r.Shadow && br.res[0] != 1) {
			continue // a CL.THROTTLE rule, or a shadow rule that denied
		}
		err := br.incr(ctx, b.c, c, br.r.Limit-br.other)
		if err == nil {
			continue
		}
		if br.r.Shadow {
			// A shadow rule filled since the snapshot: it denies now,
			// never the request.
			br.res[0], br.res[3] = 0, 1
			br.shadowDenied = true
			continue
		}
		if cerr := b.compensate(ctx, rules[:k], br, c, err); cerr != nil {
			return false, cerr
		}
		if !isOverflow(err) {
			return false, fmt.Errorf("rule %q: EXHINCRBY: %w", br.r.Name, err)
		}
		return false, b.refilled(ctx, br, now, c)
	}
	if ok, err := b.throttleAll(ctx, rules, now, c); !ok || err != nil {
		return false, err
	}
	for k := range rules {
		br := &rules[k]
		if br.cell || br.res[0] != 1 {
			continue // CL.THROTTLE's results are set; a shadow rule that denied
		}
		br.res[1] += c
		br.res[2] = br.sp.Leaves(br.i) - now
	}
	return true, nil
}

// compensate gives c back to the TairHash rules of done (already
// incremented) after br failed to consume (failed: why); it returns only
// a failure to give back.
func (b *Backend) compensate(ctx context.Context, done []bareRule, br *bareRule, c int64, failed error) error {
	for q := len(done) - 1; q >= 0; q-- {
		if done[q].cell || (done[q].r.Shadow && (done[q].res[0] != 1 || done[q].shadowDenied)) {
			continue // CL.THROTTLE (never given back), or not incremented
		}
		cerr := done[q].incr(ctx, b.c, -c, 0)
		if isOverflow(cerr) {
			// The cell is gone (expired): nothing to give back.
			cerr = b.sweep(ctx, &done[q])
		}
		if cerr != nil {
			return fmt.Errorf("rule %q: compensating decrement after rule %q denied (%v): %w", done[q].r.Name, br.r.Name, failed, cerr)
		}
	}
	return nil
}

// refilled reports br, which concurrent writers filled since the
// snapshot, as it is now: denied.
func (b *Backend) refilled(ctx context.Context, br *bareRule, now, c int64) error {
	if br.empty {
		if err := b.sweep(ctx, br); err != nil {
			return fmt.Errorf("rule %q: %w", br.r.Name, err)
		}
	}
	kv, err := b.c.Do(ctx, "exhgetall", br.key).Slice()
	if err != nil {
		return fmt.Errorf("rule %q: EXHGETALL: %w", br.r.Name, err)
	}
	i := br.i
	if err := br.eval(kv, now, c); err != nil {
		return fmt.Errorf("rule %q: %w", br.r.Name, err)
	}
	br.i = i
	if br.res[0] == 1 { // freed again meanwhile: it may admit now
		br.res[0], br.res[3] = 0, 1
	}
	return nil
}

// bareAfter writes the trail entries and the idempotency record rec of a
// decided request with plain commands, and returns the trail of an
// inspection.
func (b *Backend) bareAfter(ctx context.Context, bq *bareReq, rec record, allowed bool) ([]string, error) {
	if !bq.trail && !bq.idem {
		return nil, nil
	}
	req, now := bq.req, rec.now
	var stored string
	if bq.idem {
		var err error
		if stored, err = rec.encode(); err != nil {
			return nil, err
		}
	}
	p := b.c.Pipeline()
	var ent []any
	if bq.trail && bq.o == opTake {
		for k := len(bq.rules) - 1; k >= 0; k-- {
			br := &bq.rules[k]
			if br.res[0] == 1 || (allowed && !br.r.Shadow) {
				continue
			}
			e := formatDenial(now, req.Policy, br.r.Name, br.res[1], br.r.Limit, bq.c, br.res[3], br.res[0] == 2, br.r.Shadow, req.TrailValues)
			ent = append(ent, e)
		}
	}
	if len(ent) > 0 {
		p.LPush(ctx, req.TrailKey, ent...)
		p.LTrim(ctx, req.TrailKey, 0, int64(req.TrailMax)-1)
		p.PExpire(ctx, req.TrailKey, time.Duration(ceilMillis(req.TrailTTL))*time.Millisecond)
	}
	if bq.idem {
		p.Set(ctx, req.IdempotencyKey, stored, time.Duration(ceilMillis(req.IdempotencyTTL))*time.Millisecond)
	}
	var tr *goredis.StringSliceCmd
	if bq.o == opInspect {
		tr = p.LRange(ctx, req.TrailKey, 0, int64(req.TrailMax)-1)
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	if tr == nil {
		return nil, nil
	}
	return tr.Val(), nil
}

// eval computes the rule's reply entry (flags, used, reset µs, retry µs)
// from its fields kv (EXHGETALL: name, value, …) at now with internal/alg's
// sliding window, as take.lua's does: cells are counted by index,
// j >= i-K (driver.CellSpan), never by expiry.
func (br *bareRule) eval(kv []any, now, c int64) error {
	cells, err := bareCells(kv)
	if err != nil {
		return err
	}
	br.empty = len(kv) == 0
	s := alg.NewSliding(br.sp, time.Microsecond, cells, now)
	br.i = s.I
	br.other = s.Used - s.Current()
	flags, retry := replyFlags(s.Decide(br.r.Limit, c))
	br.res = []int64{flags, s.Used, s.ResetAfter().Microseconds(), retry}
	return nil
}

// evalTairHash is eval of the rule's EXHGETALL reply in the snapshot.
func (br *bareRule) evalTairHash(cmd *goredis.Cmd, now, c int64) error {
	kv, err := cmd.Slice()
	if err != nil {
		return fmt.Errorf("rule %q: EXHGETALL: %w", br.r.Name, err)
	}
	if err := br.eval(kv, now, c); err != nil {
		return fmt.Errorf("rule %q: %w", br.r.Name, err)
	}
	return nil
}

// replyFlags is a verdict as a rule's reply numbers: flags
// (lua.RuleFlag*) and the retry in µs, rounded up.
func replyFlags(v alg.Verdict) (flags, retry int64) {
	switch {
	case v.Allowed:
		return lua.RuleFlagAllowed, 0
	case v.CostTooHigh:
		return lua.RuleFlagTooHigh, 0
	}
	return lua.RuleFlagDenied, ceilMicros(v.RetryAfter)
}

// bareCells reads a rule's cells from EXHGETALL's reply (name, value, …),
// oldest first; fields that are not cell indexes are skipped.
func bareCells(kv []any) ([]alg.Cell, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("EXHGETALL: odd reply length %d", len(kv))
	}
	cells := make([]alg.Cell, 0, len(kv)/2)
	for k := 0; k < len(kv); k += 2 {
		fs, _ := kv[k].(string)
		j, err := strconv.ParseInt(fs, 10, 64)
		if err != nil {
			continue // not a cell
		}
		v, err := replyInt(kv[k+1])
		if err != nil {
			return nil, fmt.Errorf("cell %d: %w", j, err)
		}
		cells = append(cells, alg.Cell{Idx: j, N: v})
	}
	slices.SortFunc(cells, func(a, b alg.Cell) int { return cmp.Compare(a.Idx, b.Idx) })
	return cells, nil
}

// sweep removes the empty TairHash key a failed EXHINCRBY … MAX/MIN
// leaves behind when the key did not exist (it never expires): EXHGET of
// the key does (docs/MODULES.md, module bugs). On a key with fields it only
// reads.
func (b *Backend) sweep(ctx context.Context, br *bareRule) error {
	if err := b.c.Do(ctx, "exhget", br.key, strconv.FormatInt(br.i, 10)).Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return fmt.Errorf("EXHGET: %w", err)
	}
	return nil
}

// incr adds delta to the rule's current cell in one MULTI/EXEC, bounded by
// MAX bound (delta > 0) or MIN 0 (delta < 0), and sets the cell's expiry
// bareExpirySlack past the first millisecond at or after the cell stops
// counting, ⌈(i+K+1)·s⌉ ms. TairHash hides a field from the start of its
// expiry millisecond by its own wall clock (measured on the SORT_MODE
// build: gone at now >= expireAt), read when each command runs, while the
// snapshot is evaluated at the pipeline's TIME, read before: a field
// expiring when the cell stops counting can be gone from EXHGETALL while
// the evaluation still counts the cell. Cells are counted by index, so
// the slack costs memory only. EXHINCRBY takes no TTL option here, since
// EX/PX/PXAT replicate a wrong TTL and a bare EXHINCRBY drops the field's
// TTL.
func (br *bareRule) incr(ctx context.Context, c goredis.UniversalClient, delta, bound int64) error {
	f := strconv.FormatInt(br.i, 10)
	opt, lim := "max", bound
	if delta < 0 {
		opt, lim = "min", 0
	}
	expireAt := (br.sp.Leaves(br.i)+999)/1000 + bareExpirySlack.Milliseconds()
	var inc *goredis.Cmd
	_, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		inc = p.Do(ctx, "exhincrby", br.key, f, delta, opt, lim)
		p.Do(ctx, "exhpexpireat", br.key, f, expireAt)
		return nil
	})
	if inc != nil && inc.Err() != nil {
		return inc.Err()
	}
	return err
}

// replayRecord decodes an idempotency record (storage.go: take.lua's or bare
// mode's, or the legacy text) into the replayed Result.
func replayRecord(rec string, rules []driver.Rule) (driver.Result, error) {
	r, err := decodeRecord(rec)
	if err != nil {
		return driver.Result{}, err
	}
	return bareResult(r.replay(), rules)
}

// bareResult decodes a reply in take.lua's shape (parseTake), for rules:
// NonAtomic, sliding windows on the bare TairHash strategy, GCRA rules on
// bare CL.THROTTLE.
func bareResult(v []any, rules []driver.Rule) (driver.Result, error) {
	res, err := parseTake(v, rules)
	if err != nil {
		return driver.Result{}, err
	}
	res.NonAtomic = true
	for i := range res.Rules {
		st := capability.TairHashBare
		if rules[i].Algorithm == driver.GCRA {
			st = capability.CellBare
		}
		res.Rules[i].Strategy = st.String()
	}
	return res, nil
}
