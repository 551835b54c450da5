package redis

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/alg"
	"github.com/freqcap/freqcap/sdk/driver"
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
	// fa is the request's fast attempt once built (built), fast whether
	// it has one: a coalesced call builds it before it queues
	// (coalescer.do), so the flusher, holding a slot, only writes it into
	// the script's arguments.
	fa          fastAttempt
	built, fast bool
}

// attempt returns r's fast attempt, built now unless it was already.
func (b *Backend) attempt(r *request, rep *capability.Report) (*fastAttempt, bool) {
	if !r.built {
		r.fa, r.fast = b.fastAttempt(r.op, r.Request, rep)
		r.built = true
	}
	return &r.fa, r.fast
}

// call is one or more attempts of take.lua: its KEYS, its EVALSHA
// argument list (with evalArgs leading placeholders, then the keys, then
// ARGV) and, per attempt, how each rule is run.
type call struct {
	keys     []string
	args     []any
	attempts [][]ruleChoice
}

// encoder gathers the keys and ARGV of one or more attempts (ARGV[1], the
// number of attempts, is added by done).
type encoder struct {
	keys     []string
	argv     []any
	attempts [][]ruleChoice
}

// encode builds the call of take.lua for one request, in two
// allocations besides the rules' (the keys and the argument list): the
// ARGV is written into the argument list's tail, past room for the most
// keys a request can have, and moved down once the keys are known.
func (b *Backend) encode(o op, req driver.Request, now time.Time, rep *capability.Report) (call, error) {
	n := len(req.Rules)
	most := 3*n + 6 // a state key, an old-layout key and a wide hash per rule, trail, reservations, record, overrides, a root of no rule and its wide hash (nestArg)
	e := encoder{keys: make([]string, 0, most)}
	args := make([]any, evalArgs+most+1, evalArgs+most+1+headerArgs+n*argsPerRule)
	e.argv = args[len(args):len(args)]
	if err := b.add(&e, o, req, now, rep); err != nil {
		return call{}, err
	}
	k := len(e.keys)
	for i := range e.keys {
		args[evalArgs+i] = &e.keys[i]
	}
	args[evalArgs+k] = 1
	args = append(args[:evalArgs+k+1], e.argv...) // within capacity: a move down
	return call{keys: e.keys, args: args, attempts: e.attempts}, nil
}

// done returns the call of the attempts added. The keys go in as pointers
// into e.keys (go-redis writes *string, and its cluster routing reads it),
// which boxes without allocating; e.keys is not appended to after this.
func (e *encoder) done() call {
	return call{keys: e.keys, args: argList(e.keys, len(e.attempts), e.argv), attempts: e.attempts}
}

// argList returns EVALSHA's argument list: evalArgs placeholders, the
// keys (as pointers into keys), the number of attempts m, then argv.
func argList(keys []string, m int, argv []any) []any {
	return append(append(keyArgs(keys, 1+len(argv)), m), argv...)
}

// keyArgs returns the start of an EVALSHA argument list: evalArgs
// placeholders, then the keys (as pointers into keys), with room for
// more values after them.
func keyArgs(keys []string, more int) []any {
	args := make([]any, evalArgs, evalArgs+len(keys)+more)
	for i := range keys {
		args = append(args, &keys[i])
	}
	return args
}

// add appends the attempt of req to e. now is the client's clock, used
// only to pick calendar boundaries around it. rep's choices pick each
// rule's algorithm code and key (chooseRule). On error e is unchanged.
func (b *Backend) add(e *encoder, o op, req driver.Request, now time.Time, rep *capability.Report) error {
	code, err := opCode(o)
	if err != nil {
		return err
	}
	cost := req.Cost
	if o == opInspect {
		cost = 1
	} else if cost < 1 {
		return fmt.Errorf("cost must be >= 1, got %d", cost)
	}
	resTTL, resKeyTTL, err := reservationTTLs(o, &req)
	if err != nil {
		return err
	}
	if req.IdempotencyKey != "" && (o == opTake || o == opReserve) && req.IdempotencyTTL <= 0 {
		return fmt.Errorf("idempotency TTL must be > 0, got %v", req.IdempotencyTTL)
	}
	lists, err := ruleLists(&req)
	if err != nil {
		return err
	}
	a := attemptEnc{e: e, k0: len(e.keys), a0: len(e.argv)}
	n := len(req.Rules)
	e.argv = append(e.argv, code, cost, n, 0, 0, 0, 0, req.TrailMax, ceilMillis(req.TrailTTL), req.Policy,
		req.TrailValues, ceilMillis(req.IdempotencyTTL), req.ReservationID, resTTL, resKeyTTL, 0, "", "", "", "")
	choices := make([]ruleChoice, n)
	var lg logGroup
	for i := range req.Rules {
		if choices[i], err = b.addRule(&a, &req, &req.Rules[i], &lg, now, rep); err != nil {
			return a.fail(err)
		}
	}
	h := e.argv[a.a0:]
	if req.TrailKey != "" && (o == opInspect || (req.TrailMax > 0 && o != opPeek)) {
		h[4] = a.index(req.TrailKey)
	}
	if req.ReservationKey != "" {
		h[5] = a.index(req.ReservationKey)
	}
	if req.IdempotencyKey != "" && (o == opTake || o == opReserve) {
		h[6] = a.index(req.IdempotencyKey)
	}
	if req.OverrideKey != "" {
		h[15] = a.index(req.OverrideKey)
	}
	h[16], h[17], h[18] = lists[0], lists[1], lists[2]
	h[19] = b.nestArg(&a, choices, rep)
	if len(e.keys) == a.k0 {
		return a.fail(errNoKeys)
	}
	h[3] = len(e.keys) - a.k0
	e.attempts = append(e.attempts, choices)
	return nil
}

// nestArg returns take.lua's ARGV[a+A_NEST] for attempt a, whose rules
// chose choices: a lua.NestRec per dimension set kept as a section of its
// root's value (nests; the root's key, and its wide hash's, wideKey, are
// added to the attempt's keys: a root may be wide, lua.WideAt); "" when
// none (no allocation). rep says whether the server has native hash-field
// expiry (lua.NestHFE: a root going wide uses it); a choice of a rule
// declared wide (driver.Rule.Wide) sets lua.NestWide.
func (b *Backend) nestArg(a *attemptEnc, choices []ruleChoice, rep *capability.Report) string {
	var out []byte
	for i, c := range choices {
		if !packedCode(c.code) || slices.ContainsFunc(choices[:i], func(p ruleChoice) bool { return p.key == c.key }) {
			continue
		}
		root := rootOf(c.key)
		if root == "" || !nests(c.key, root) {
			continue
		}
		flags := byte(0)
		if b.opts.Upgrade {
			flags |= lua.NestUpgrade
		}
		if wideHFE(rep) {
			flags |= lua.NestHFE
		}
		if c.wide {
			flags |= lua.NestWide
		}
		out = binary.LittleEndian.AppendUint16(out, uint16(a.index(c.key)))
		out = binary.LittleEndian.AppendUint16(out, uint16(a.index(root)))
		out = binary.LittleEndian.AppendUint16(out, uint16(a.index(wideKey(root))))
		out = append(append(out, flags), sectionID(c.key)...)
	}
	return string(out)
}

// reservationTTLs checks a Reserve's reservation fields and returns its
// TTL (µs) and its hash's (ms); 0, 0 for other operations.
func reservationTTLs(o op, req *driver.Request) (resTTL, resKeyTTL int64, err error) {
	if o != opReserve {
		return 0, 0, nil
	}
	if req.ReservationKey == "" || req.ReservationID == "" {
		return 0, 0, errors.New("reserve needs a reservation key and a reservation id")
	}
	if req.ReservationTTL <= 0 {
		return 0, 0, fmt.Errorf("reservation TTL must be > 0, got %v", req.ReservationTTL)
	}
	resTTL = max(1, req.ReservationTTL.Microseconds())
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
	return resTTL, ceilMillis(req.ReservationTTL + longest + time.Second), nil
}

// ruleLists returns take.lua's ARGV[a+A_MODES] to ARGV[a+A_WINDOWS]: the
// rules' modes (modesArg), seeds and, under overrides, GCRA windows, each
// "" unless some rule needs it. It checks every seed names an earlier
// rule.
func ruleLists(req *driver.Request) ([3]string, error) {
	var anyMode, anySeed, anyGCRA bool
	for i := range req.Rules {
		r := &req.Rules[i]
		if r.Seed < 0 || r.Seed > i {
			return [3]string{}, fmt.Errorf("rule %q: seed %d is not an earlier rule's index", r.Name, r.Seed)
		}
		if r.Keep < 0 || (r.Keep > 0 && r.Algorithm == driver.GCRA) {
			return [3]string{}, fmt.Errorf("rule %q: keep %d (never negative, never on GCRA)", r.Name, r.Keep)
		}
		if r.Exempt > driver.ExemptUncounted || (r.Exempt != driver.NotExempt && r.Shadow) {
			return [3]string{}, fmt.Errorf("rule %q: exemption %d (a shadow rule is never exempt)", r.Name, r.Exempt)
		}
		anyMode = anyMode || r.Shadow || r.Exempt != driver.NotExempt || r.Keep > 0
		anySeed = anySeed || r.Seed > 0
		anyGCRA = anyGCRA || r.Algorithm == driver.GCRA
	}
	anyGCRA = anyGCRA && req.OverrideKey != ""
	var seeds, windows []byte
	for i := range req.Rules {
		r := &req.Rules[i]
		if anySeed {
			if i > 0 {
				seeds = append(seeds, ',')
			}
			seeds = strconv.AppendInt(seeds, int64(r.Seed), 10)
		}
		if anyGCRA {
			if i > 0 {
				windows = append(windows, ',')
			}
			windows = strconv.AppendInt(windows, r.Window.Microseconds(), 10)
		}
	}
	modes := ""
	if anyMode || len(req.Quiet) > 0 {
		var err error
		if modes, err = modesArg(req); err != nil {
			return [3]string{}, err
		}
	}
	return [3]string{modes, string(seeds), string(windows)}, nil
}

// modesArg returns take.lua's ARGV[a+A_MODES] of req (lua.ArgModes): each
// rule's mode (shadow, exempt counted or uncounted), headroom and the
// quiet spans. It checks the spans (at most driver.MaxQuietSpans, each
// ending after it starts, sorted, not overlapping).
func modesArg(req *driver.Request) (string, error) {
	if err := checkQuiet(req.Quiet); err != nil {
		return "", err
	}
	b := make([]byte, 0, 2*len(req.Rules)+2+len(req.Quiet)*34)
	anyKeep := false
	for i := range req.Rules {
		r := &req.Rules[i]
		m := byte(lua.ModePlain)
		switch {
		case r.Shadow:
			m = lua.ModeShadow
		case r.Exempt == driver.ExemptCounted:
			m = lua.ModeCounted
		case r.Exempt == driver.ExemptUncounted:
			m = lua.ModeUncounted
		}
		b = append(b, m)
		anyKeep = anyKeep || r.Keep > 0
	}
	b = append(b, lua.ModeSep...)
	if anyKeep {
		for i := range req.Rules {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, req.Rules[i].Keep, 10)
		}
	}
	b = append(b, lua.ModeSep...)
	return string(appendQuiet(b, req.Quiet)), nil
}

// appendQuiet appends spans to b: start and end µs (unixMicrosUp),
// comma-separated.
func appendQuiet(b []byte, spans []driver.Span) []byte {
	for i, sp := range spans {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, unixMicrosUp(sp.Start), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, unixMicrosUp(sp.End), 10)
	}
	return b
}

// checkQuiet reports quiet spans a request may not carry
// (driver.Request.Quiet): more than driver.MaxQuietSpans, one not ending
// after its start, or spans out of order or overlapping.
func checkQuiet(spans []driver.Span) error {
	if len(spans) > driver.MaxQuietSpans {
		return fmt.Errorf("%d quiet spans, want at most %d", len(spans), driver.MaxQuietSpans)
	}
	for i, sp := range spans {
		if !sp.End.After(sp.Start) {
			return fmt.Errorf("quiet span %d: end %v is not after start %v", i, sp.End, sp.Start)
		}
		if i > 0 && sp.Start.Before(spans[i-1].End) {
			return fmt.Errorf("quiet span %d: starts before span %d ends (want sorted, not overlapping)", i, i-1)
		}
	}
	return nil
}

// unixMicrosUp returns t in Unix µs, rounded up: the first whole µs at or
// after t (a span [start, end) holds the server's now, whole µs, iff
// unixMicrosUp(start) <= now < unixMicrosUp(end)).
func unixMicrosUp(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Sub(time.UnixMicro(us)) > 0 {
		us++
	}
	return us
}

// attemptEnc is one attempt being added to an encoder: its keys start at
// k0, its ARGV at a0.
type attemptEnc struct {
	e      *encoder
	k0, a0 int
}

// fail undoes the attempt and returns err.
func (a *attemptEnc) fail(err error) error {
	a.e.keys, a.e.argv = a.e.keys[:a.k0], a.e.argv[:a.a0]
	return err
}

// index returns the attempt's index of key (1-based), adding it.
func (a *attemptEnc) index(key string) int {
	for i, k := range a.e.keys[a.k0:] {
		if k == key {
			return i + 1
		}
	}
	a.e.keys = append(a.e.keys, key)
	return len(a.e.keys) - a.k0
}

// logGroup is the previous layout's log key (prevLogKey) of the last
// sliding-log rule's set of dimensions: the set's other log rules share
// it, as they share its log (logKey).
type logGroup struct{ prev, group string }

// addRule appends rule r's ARGV (its spec, then its key's index and the
// one-key-per-rule layout's) and returns its choice.
func (b *Backend) addRule(a *attemptEnc, req *driver.Request, r *driver.Rule, lg *logGroup, now time.Time, rep *capability.Report) (ruleChoice, error) {
	if err := validRule(r); err != nil {
		return ruleChoice{}, err
	}
	sp, err := b.spec(rep, r, plainOnly(req, r))
	if err != nil {
		return ruleChoice{}, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	key, prev := b.ruleKey(req, r, sp, lg)
	e := a.e
	e.argv = append(e.argv, sp.args[:]...)
	if prev != "" {
		e.argv[len(e.argv)-2] = a.index(prev) // p2: the previous layout's log, read through
	} else if b.opts.Upgrade && sp.code == codeLog && r.Algorithm == driver.SlidingWindow {
		e.argv[len(e.argv)-2] = carryCells(r) // p2: the cells it counted in before it was a log
	}
	if sp.code == codeCalendar {
		loc := r.Location
		if req.Zone != nil { // the attempt's zone (the rule's stays its identity: its tag)
			loc = req.Zone
		}
		bs, err := b.cals.bounds(now, r.Calendar, loc, b.opts.CalendarSpan)
		if err != nil {
			return ruleChoice{}, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		e.argv[len(e.argv)-3] = bs
	}
	oi := 0 // the one-key-per-rule layout's key, read through (Options.Upgrade)
	if b.opts.Upgrade && sp.suffix == "" {
		oi = a.index(r.Key)
	}
	e.argv = append(e.argv, a.index(key), oi)
	return ruleChoice{code: sp.code, key: key, cellCount: sp.cellCount, cellPeriod: sp.cellPeriod, wide: r.Wide}, nil
}

// ruleKey returns the key r's state lives under with spec sp, and for a
// sliding-log rule the previous layout's log key read through (prev).
func (b *Backend) ruleKey(req *driver.Request, r *driver.Rule, sp *ruleSpec, lg *logGroup) (key, prev string) {
	switch {
	case sp.suffix != "": // a module strategy: the rule's own key
		return r.Key + sp.suffix, ""
	case sp.code == codeLog:
		if b.opts.Upgrade && r.Algorithm == driver.SlidingLog {
			// The set's sorted-set log, read once when the packed one is
			// absent (a sliding window evaluated as a log never counted
			// there: its cells are carried instead, carryCells).
			prev = logKey(r)
		}
		return group(r), prev
	case sp.code == codeZLog && !b.opts.Upgrade:
		return logKey(r), ""
	case sp.code == codeZLog && lg.prev != "" && lg.group == group(r):
		return logKey(r), lg.prev // the same set of dimensions as the previous log rule
	case sp.code == codeZLog:
		prev = prevLogKey(req.Rules, r)
		lg.prev, lg.group = prev, group(r)
		return logKey(r), prev
	}
	return group(r), ""
}

// plainOnly reports whether r must run on a plain Lua strategy in req,
// whatever the server's modules: a rule with a seed or an epoch (its
// seeding is the packed fragments' and the logs', and an epoch's rule
// may have been seeded: kept on the same keys for its whole identity,
// never moved to a module key when its seed ends), and every rule of a
// request that reads overrides (a limit override replaces a GCRA rule's
// rate, which CL.THROTTLE's arguments cannot follow; exempt counted
// consumes past the limit). Shadow rules keep their strategy (turning a
// rule shadow keeps its state).
func plainOnly(req *driver.Request, r *driver.Rule) bool {
	return req.OverrideKey != "" || r.Seed > 0 || r.Epoch > 0
}

// logKey returns the sorted set of the sliding-log rules of r's dimension
// set: the set's key and suffixLog, whatever its log rules (as the set's
// packed value is one whatever its packed rules). Every log rule of the
// set counts its own window in it, so a log rule changed (a new window, a
// new epoch, a rollback) keeps its counts, and a log rule added or removed
// beside others changes nothing of theirs. Two policies of one name (two
// versions side by side) share it too: each counts everything admitted
// through the set's logs (conservative).
func logKey(r *driver.Rule) string { return group(r) + suffixLog }

// prevLogKey returns the set's log as the previous layout named it: the
// set's key, suffixLog, and a tag of its log rules' tags among rules. A
// log found empty is filled from it (alg/log.lua's read), so that counts
// carry over the upgrade. tag gives a rule's tag (ruleTag, or the spec
// cache's copy of it).
func prevLogKey(rules []driver.Rule, r *driver.Rule) string {
	g := group(r)
	lt := newLogTag()
	for i := range rules {
		q := &rules[i]
		if q.Algorithm != driver.SlidingLog || group(q) != g {
			continue
		}
		lt.add(ruleTag(q))
	}
	return g + lt.suffix()
}

// logTag hashes the tags of a dimension set's sliding-log rules, in rule
// order (FNV-1a), into the suffix of the set's log key in the previous
// layout (prevLogKey); start
// from newLogTag.
type logTag uint64

func newLogTag() logTag { return 14695981039346656037 }

func (l *logTag) add(tag string) {
	for j := 0; j < len(tag); j++ {
		*l ^= logTag(tag[j])
		*l *= 1099511628211
	}
}

// suffix returns suffixLog and the 4-character tag of the hash.
func (l logTag) suffix() string {
	var t [4]byte
	for i := range t {
		t[i] = tagAlphabet[l&63]
		l >>= 6
	}
	return suffixLog + string(t[:])
}

// group returns the key of r's dimension set: driver.Rule.Group, or the
// rule's own key where the caller gave none.
func group(r *driver.Rule) string {
	if r.Group != "" {
		return r.Group
	}
	return r.Key
}

// ruleArgs fills a with the static part of r's ARGV under choice ch:
// everything take.lua reads of a rule that depends neither on the request
// nor on the clock (a calendar rule's boundaries are filled in per call).
func ruleArgs(r *driver.Rule, ch ruleChoice, a *[staticArgs]any) error {
	tag := ""
	switch r.Algorithm {
	case driver.FixedWindow:
		tag = ruleTag(r)
		if r.Calendar != driver.NoCalendar {
			*a = [staticArgs]any{codeCalendar, r.Name, r.Limit, "", 0, tag}
		} else {
			*a = [staticArgs]any{codeFixed, r.Name, r.Limit, r.Window.Microseconds(), 0, tag}
		}
	case driver.SlidingWindow:
		sp := r.Span(time.Microsecond)
		code := ch.code // codeTairHash, codeHFE or packed
		if code == "" && r.ExactLog() {
			*a = [staticArgs]any{codeLog, r.Name, r.Limit, r.Window.Microseconds(), 0, logTagOf(r)}
			return nil
		}
		if code == "" {
			code, tag = codeSliding, ruleTag(r)
		}
		*a = [staticArgs]any{code, r.Name, r.Limit, sp.Back, sp.Size, tag}
	case driver.SlidingLog:
		if r.Limit <= driver.LogLine {
			*a = [staticArgs]any{codeLog, r.Name, r.Limit, r.Window.Microseconds(), 0, logTagOf(r)}
		} else {
			*a = [staticArgs]any{codeZLog, r.Name, r.Limit, r.Window.Microseconds(), 0, ruleTag(r)}
		}
	case driver.GCRA:
		// Whole µs: take.lua computes in exact integers.
		t, tol, limit := r.GCRAParams()
		if ch.code == codeCell {
			*a = [staticArgs]any{codeCell, r.Name, limit, t.Microseconds(), strconv.FormatInt(ch.cellCount, 10) + ":" + strconv.FormatInt(ch.cellPeriod, 10), tag}
		} else {
			*a = [staticArgs]any{codeGCRA, r.Name, limit, t.Microseconds(), tol.Microseconds(), ruleTag(r)}
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

// calendarBounds returns 2*span+2 consecutive calendar boundaries (the
// first instants of local hours, days, ISO weeks or months in loc), in
// Unix ms, comma-separated: span units before the one containing now, that
// unit's start and end, and span units after. The script picks the pair
// around the server's clock, so client clock skew up to span units is
// tolerated. The boundaries are internal/alg's (CalendarStart,
// CalendarEnd), which the memory backend counts in: days are 23 or 25
// hours long across DST changes, and a boundary a change skips is the
// change's instant. Attempts read them through the Backend's cache
// (calendarCache), which computes them once per unit.
func calendarBounds(now time.Time, unit driver.CalendarUnit, loc *time.Location, span int) (string, error) {
	bs, _, _, err := calendarWindow(now, unit, loc, span)
	return bs, err
}

// calendarWindow returns calendarBounds(now, unit, loc, span) and the
// unit [cur, next) holding now: the boundaries are cur's, so the same for
// every instant of it.
func calendarWindow(now time.Time, unit driver.CalendarUnit, loc *time.Location, span int) (bounds string, cur, next time.Time, err error) {
	if loc == nil {
		loc = time.UTC
	}
	start, err := calendarStart(unit, loc)
	if err != nil {
		return "", time.Time{}, time.Time{}, err
	}
	prev := func(s time.Time) time.Time {
		return start(s.Add(-time.Nanosecond))
	}
	cur = start(now)
	bs := make([]time.Time, 0, 2*span+2)
	p := cur
	for range span {
		p = prev(p)
		bs = append(bs, p)
	}
	slices.Reverse(bs)
	bs = append(bs, cur)
	p = cur
	for range span + 1 {
		p = calendarNext(p, unit, loc)
		bs = append(bs, p)
	}
	buf := make([]byte, 0, len(bs)*14)
	for i, t := range bs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, t.UnixMilli(), 10)
	}
	return string(buf), cur, bs[span+1], nil
}

// calendarStart returns the function giving the start of the unit (local
// hour, day, ISO week or month in loc) holding an instant.
func calendarStart(unit driver.CalendarUnit, loc *time.Location) (func(time.Time) time.Time, error) {
	switch unit {
	case driver.Day, driver.Hour, driver.Week, driver.Month:
		return func(t time.Time) time.Time { return alg.CalendarStart(unit, loc, t) }, nil
	}
	return nil, fmt.Errorf("unknown calendar unit %d", unit)
}

// calendarNext returns the first boundary after s (itself a boundary):
// the end of the unit s starts.
func calendarNext(s time.Time, unit driver.CalendarUnit, loc *time.Location) time.Time {
	return alg.CalendarEnd(unit, loc, s)
}
