package redis

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The ARGV layout of take.lua: header fields (more for a reserve), then
// argsPerRule per rule.
const (
	headerArgs        = 8
	reserveHeaderArgs = 11
	argsPerRule       = 5
	// evalArgs are the placeholders run fills: command, script, key count.
	evalArgs = 3
)

var errNoKeys = errors.New("request names no key")

// op is the driver operation a call carries out: Take, Peek, Reserve or
// Inspect. All four run take.lua, one EVALSHA per decision; the op travels
// as take.lua's ARGV[1].
type op uint8

const (
	opTake op = iota
	opPeek
	opReserve
	opInspect
)

func (o op) String() string {
	switch o {
	case opTake:
		return "take"
	case opPeek:
		return "peek"
	case opReserve:
		return "reserve"
	case opInspect:
		return "inspect"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// request is one operation on one driver request: what Take, Peek,
// Reserve and Inspect carry out, and one entry of a batch.
type request struct {
	op op
	driver.Request
}

// opCode maps an op to take.lua's ARGV[1], boxed for the argument list
// (a constant boxes without allocating).
func opCode(o op) (any, error) {
	switch o {
	case opTake:
		return "t", nil
	case opPeek:
		return "p", nil
	case opReserve:
		return "r", nil
	case opInspect:
		return "i", nil
	}
	return nil, fmt.Errorf("unknown op %d", o)
}

// call is one run of take.lua: its KEYS, its EVALSHA argument list (with
// evalArgs leading placeholders, then the keys, then ARGV) and how each
// rule is run.
type call struct {
	keys  []string
	args  []any
	rules []ruleChoice
}

// encode builds the call of take.lua for req. now is the client's clock,
// used only to pick calendar boundaries around it. rep's choices pick each
// rule's algorithm code and key (chooseRule).
func (b *Backend) encode(o op, req driver.Request, now time.Time, rep *capability.Report) (call, error) {
	code, err := opCode(o)
	if err != nil {
		return call{}, err
	}
	cost := req.Cost
	if o == opInspect {
		cost = 1
	} else if cost < 1 {
		return call{}, fmt.Errorf("cost must be >= 1, got %d", cost)
	}
	n := len(req.Rules)
	nk := n
	tk, hk := 0, 0
	if req.TrailKey != "" && (o == opInspect || (req.TrailMax > 0 && o != opPeek)) {
		nk++
		tk = nk
	}
	if req.ReservationKey != "" {
		nk++
		hk = nk
	}
	ik := 0
	if req.IdemKey != "" && (o == opTake || o == opReserve) {
		if req.IdemTTL <= 0 {
			return call{}, fmt.Errorf("idempotency TTL must be > 0, got %v", req.IdemTTL)
		}
		nk++
		ik = nk
	}
	var resTTL, resKeyTTL int64
	if o == opReserve {
		if hk == 0 || req.ReservationID == "" {
			return call{}, errors.New("reserve needs a reservation key and a reservation id")
		}
		if req.ReservationTTL <= 0 {
			return call{}, fmt.Errorf("reservation TTL must be > 0, got %v", req.ReservationTTL)
		}
		resTTL = req.ReservationTTL.Microseconds()
		if resTTL < 1 {
			resTTL = 1
		}
		// The reservation hash outlives its newest reservation by the longest state
		// lifetime, after which no refund can matter any more (a sliding
		// window's cell counts for up to (K+1) cells).
		var longest time.Duration
		for _, r := range req.Rules {
			w := r.Window + r.Window/time.Duration(max(1, r.SubWindows))
			if r.Algorithm == driver.SlidingWindow {
				w = max(w, time.Duration(r.Span(time.Nanosecond).Leaves(0)))
			}
			longest = max(longest, w)
		}
		resKeyTTL = ceilMillis(req.ReservationTTL + longest + time.Second)
	}
	if nk == 0 {
		return call{}, errNoKeys
	}

	hdr := headerArgs
	if o == opReserve {
		hdr = reserveHeaderArgs
	}
	keys := make([]string, 0, nk)
	args := make([]any, evalArgs, evalArgs+nk+hdr+n*argsPerRule+3)
	choices := make([]ruleChoice, n)
	// The static part of each rule's ARGV, from the Backend's cache (nil
	// for a calendar rule, whose boundaries follow the clock).
	var specBuf [8]*ruleSpec
	specs := specBuf[:0]
	for i := range req.Rules {
		r := &req.Rules[i]
		if err := validRule(r); err != nil {
			return call{}, err
		}
		if r.Algorithm == driver.FixedWindow && r.Calendar != driver.NoCalendar {
			ch, err := chooseRule(rep, r)
			if err != nil {
				return call{}, fmt.Errorf("rule %q: %w", r.Name, err)
			}
			choices[i] = ch
			specs = append(specs, nil)
			keys = append(keys, ch.key)
			continue
		}
		sp, err := b.spec(rep, r)
		if err != nil {
			return call{}, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		key := r.Key
		if sp.suffix != "" {
			key += sp.suffix
		}
		choices[i] = ruleChoice{code: sp.code, key: key, cellCount: sp.cellCount, cellPeriod: sp.cellPeriod}
		specs = append(specs, sp)
		keys = append(keys, key)
	}
	if tk > 0 {
		keys = append(keys, req.TrailKey)
	}
	if hk > 0 {
		keys = append(keys, req.ReservationKey)
	}
	if ik > 0 {
		keys = append(keys, req.IdemKey)
	}
	// The keys go in as pointers into keys (go-redis writes *string, and
	// its cluster routing reads it), which boxes without allocating; keys
	// has its exact capacity, so its elements never move.
	for i := range keys {
		args = append(args, &keys[i])
	}
	args = append(args, code, cost, n, tk, hk, req.TrailMax, ceilMillis(req.TrailTTL), req.Policy)
	if o == opReserve {
		args = append(args, req.ReservationID, resTTL, resKeyTTL)
	}
	for i := range req.Rules {
		if sp := specs[i]; sp != nil {
			args = append(args, sp.args[:]...)
			continue
		}
		r := &req.Rules[i]
		bs, err := calendarBounds(now, r.Calendar, r.Location, b.opts.CalendarSpan)
		if err != nil {
			return call{}, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		args = append(args, "c", r.Name, r.Limit, bs, 0)
	}
	args = append(args, ik, ceilMillis(req.IdemTTL), req.TrailValues)
	return call{keys: keys, args: args, rules: choices}, nil
}

// staticArgs fills a with r's argsPerRule ARGV values under choice ch:
// everything take.lua reads of a rule that depends neither on the request
// nor on the clock. r is not a calendar rule.
func staticArgs(r *driver.Rule, ch ruleChoice, a *[argsPerRule]any) error {
	switch r.Algorithm {
	case driver.FixedWindow:
		*a = [argsPerRule]any{"f", r.Name, r.Limit, r.Window.Microseconds(), 0}
	case driver.SlidingWindow:
		sp := r.Span(time.Microsecond)
		code := ch.code // "t", "h" or plain
		if code == "" {
			code = "s"
		}
		*a = [argsPerRule]any{code, r.Name, r.Limit, sp.Back, sp.Size}
	case driver.SlidingLog:
		*a = [argsPerRule]any{"l", r.Name, r.Limit, r.Window.Microseconds(), 0}
	case driver.GCRA:
		// Whole µs: take.lua computes in exact integers.
		t, tol, limit := r.GCRAParams()
		if ch.code == "x" {
			*a = [argsPerRule]any{"x", r.Name, limit, t.Microseconds(), strconv.FormatInt(ch.cellCount, 10) + ":" + strconv.FormatInt(ch.cellPeriod, 10)}
		} else {
			*a = [argsPerRule]any{"g", r.Name, limit, t.Microseconds(), tol.Microseconds()}
		}
	default:
		return fmt.Errorf("unknown algorithm %d", r.Algorithm)
	}
	return nil
}

// maxTolerance bounds a GCRA rule's tolerance on Redis: take.lua's
// doubles hold its µs integers exactly (below 2^53) as long as a TAT, now
// plus at most the tolerance, stays below 2^53 µs (2^52 µs is 142 years,
// and now is below 2^52 µs until 2112).
const maxTolerance = time.Duration(1<<52) * time.Microsecond

// validRule validates what every strategy relies on: a key, a limit, a
// window, a GCRA rule's burst and tolerance. (redis-cell accepts negative
// and zero values that these checks keep from it.)
func validRule(r *driver.Rule) error {
	if r.Key == "" {
		return fmt.Errorf("rule %q: empty key", r.Name)
	}
	if r.Limit < 1 {
		return fmt.Errorf("rule %q: limit must be > 0, got %d", r.Name, r.Limit)
	}
	if r.Window < time.Millisecond && r.Calendar == driver.NoCalendar {
		return fmt.Errorf("rule %q: window must be >= 1ms, got %v", r.Name, r.Window)
	}
	if r.Algorithm == driver.GCRA {
		if r.Burst < 0 {
			return fmt.Errorf("rule %q: burst must be >= 0, got %d", r.Name, r.Burst)
		}
		if t, tol, _ := r.GCRAParams(); tol > maxTolerance {
			return fmt.Errorf("rule %q: GCRA tolerance %v × %d exceeds %v (2^52 µs)", r.Name, t, r.Burst+1, maxTolerance)
		}
	}
	return nil
}

func ceilMillis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return int64(ms)
}

// calendarBounds returns 2*span+2 consecutive calendar boundaries (local
// midnights or local hour starts in loc), in Unix ms, comma-separated: span
// units before the one containing now, that unit's start and end, and span
// units after. The script picks the pair around the server's clock, so
// client clock skew up to span units is tolerated. Days are 23 or 25 hours
// long across DST changes; a midnight that does not exist (DST at 00:00)
// is whatever instant time.Date normalises it to.
func calendarBounds(now time.Time, unit driver.CalendarUnit, loc *time.Location, span int) (string, error) {
	if loc == nil {
		loc = time.UTC
	}
	var start func(time.Time) time.Time
	switch unit {
	case driver.Day:
		start = func(t time.Time) time.Time {
			y, m, d := t.In(loc).Date()
			s := time.Date(y, m, d, 0, 0, 0, 0, loc)
			if s.After(t) { // a skipped midnight normalised forward
				s = time.Date(y, m, d-1, 24, 0, 0, 0, loc)
				if s.After(t) {
					s = t
				}
			}
			return s
		}
	case driver.Hour:
		start = func(t time.Time) time.Time {
			l := t.In(loc)
			return t.Add(-time.Duration(l.Minute())*time.Minute - time.Duration(l.Second())*time.Second - time.Duration(l.Nanosecond()))
		}
	default:
		return "", fmt.Errorf("unknown calendar unit %d", unit)
	}
	// next returns the first boundary after s (itself a boundary).
	next := func(s time.Time) time.Time {
		// A unit is at most 25 hours (Day) or 1 hour (Hour) long, and at
		// least 23 hours or 30 minutes: probe past the end and snap back.
		var probe time.Time
		if unit == driver.Day {
			l := s.In(loc)
			probe = time.Date(l.Year(), l.Month(), l.Day()+1, 12, 0, 0, 0, loc)
		} else {
			probe = s.Add(time.Hour + time.Minute)
		}
		n := start(probe)
		if !n.After(s) {
			n = s.Add(time.Hour)
		}
		return n
	}
	prev := func(s time.Time) time.Time {
		return start(s.Add(-time.Nanosecond))
	}
	cur := start(now)
	bs := make([]time.Time, 0, 2*span+2)
	p := cur
	for range span {
		p = prev(p)
		bs = append(bs, p)
	}
	for i, j := 0, len(bs)-1; i < j; i, j = i+1, j-1 {
		bs[i], bs[j] = bs[j], bs[i]
	}
	bs = append(bs, cur)
	p = cur
	for range span + 1 {
		p = next(p)
		bs = append(bs, p)
	}
	buf := make([]byte, 0, len(bs)*14)
	for i, t := range bs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, t.UnixMilli(), 10)
	}
	return string(buf), nil
}
