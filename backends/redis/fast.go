package redis

import (
	"encoding/binary"
	"slices"
	"sync/atomic"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/bounded"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Fast scripts: take.lua specialised to one policy's rules (lua.Fast,
// lua/fast.lua.tmpl). A take or peek whose rules are all packed (fixed
// windows, calendar ones included; sliding window counters; GCRA on plain
// Lua; packed sliding logs: driver.Rule.ExactLog up to driver.LogLine),
// at most lua.FastMax of them, none shadow or
// seeded, without an idempotency key and without Options.Upgrade, runs
// the script built for its rules (for a request with an OverrideKey, the
// one that also reads overrides: lua.FastOverrides), loaded
// once per server like take.lua, single, batched (Backend.scripts) or
// coalesced. It decides, writes and errs exactly as take.lua would
// (lapsed reservations and wide roots included: a nested set's root's
// wide hash is one of its keys), so a decision stays one EVALSHA.

// fastKey identifies a fast script: its rules' specifications (the spec
// cache's pointers: one per distinct static specification while cached),
// each rule's dimension-set index and each set's root.
type fastKey struct {
	n     int
	specs [lua.FastMax]*ruleSpec
	keys  [lua.FastMax]uint8
	// roots: per dimension set (by index - 1), the index of the root its
	// value nests in (nests), 0 for none.
	roots [lua.FastMax]uint8
	// ov: the script reads the subject's overrides (lua.FastOverrides).
	ov bool
	// hfe: some set nests and the server has native hash-field expiry,
	// which a root the script makes wide uses (lua.FastOptions.HFE).
	hfe bool
	// wide: per rule, its set is declared wide (lua.FastRule.Wide).
	wide [lua.FastMax]bool
	// keeps: per rule, its headroom (driver.Rule.Keep, lua.FastRule.Keep:
	// baked into the script).
	keeps [lua.FastMax]int64
	// quiet: the request has quiet hours (lua.FastOptions.Quiet: the
	// script takes the spans).
	quiet bool
}

// fastScript is one built fast script and what decoding its replies
// needs; with no script, the rules have none (lua.Fast refused them:
// take.lua decides them).
type fastScript struct {
	script  *goredis.Script
	src     string
	choices []ruleChoice // their strategies (Result.Rules[i].Strategy)
	// there is the owning Backend's noScripts+1 when the server was found
	// to have this script since its last NOSCRIPT (loadScripts).
	there atomic.Uint64
}

// fastCache maps fastKey to fastScript, at most specCacheMax entries (it
// empties when full, as specCache does). Safe for concurrent use.
type fastCache struct {
	c bounded.Map[fastKey, *fastScript]
}

func (c *fastCache) get(k *fastKey) *fastScript    { s, _ := c.c.Get(*k); return s }
func (c *fastCache) put(k *fastKey, s *fastScript) { c.c.Put(*k, s, specCacheMax) }

// fastAttempt is one request's part of a fast script's call: its keys
// (dimension sets, each root's wide hash, its overrides, then its trail
// if tk > 0, then its reservations if hk > 0) and its ARGV values, sent
// alone (args: the short form) or in a batch or coalesced group (full).
type fastAttempt struct {
	s    *fastScript
	keys []string
	// head is the attempt's head (lua.FastHead, fast.lua.tmpl's header):
	// op, cost, the trail's and the reservations' key index, the trail's
	// max and TTL, the quiet spans' count; the nested sets' ids; the
	// quiet spans; the policy and the trail values (after lua.TrailSep,
	// empty when none).
	// It is a string over the bytes attemptHead built (never changed
	// after), so a coalesced script's argument list holds it as a
	// pointer, without boxing (encoder.addFast).
	head string
	// cals: each calendar rule's boundaries (calendarBounds, through
	// Backend.cals), in rule order; nil when it has none.
	cals []string
}

// fastAttempt returns the fast attempt of req, or false where take.lua
// must decide it (an op, rule or option fast scripts do not cover, or a
// request take.lua would refuse: take.lua's encoder then says why).
func (b *Backend) fastAttempt(o op, req driver.Request, rep *capability.Report) (fastAttempt, bool) {
	n := len(req.Rules)
	if b.opts.Upgrade || b.noFast || n == 0 || n > lua.FastMax || req.Cost < 1 ||
		(o != opTake && o != opPeek) || (o == opTake && req.IdempotencyKey != "") {
		return fastAttempt{}, false
	}
	for i := range req.Rules { // before any spec lookup: most take.lua requests stop here
		if !fastCandidate(rep, &req.Rules[i]) {
			return fastAttempt{}, false
		}
	}
	if len(req.Quiet) > 0 && checkQuiet(req.Quiet) != nil {
		return fastAttempt{}, false // take.lua's encoder says why
	}
	k, groups, g, ok := b.fastKeyOf(&req, rep)
	if !ok {
		return fastAttempt{}, false
	}
	s := b.fast.get(&k)
	if s == nil {
		var err error
		if s, err = buildFast(&k); err != nil {
			s = &fastScript{} // none for these rules (too many locals: lua.MaxLocals): take.lua's
		}
		b.fast.put(&k, s)
	}
	if s.script == nil {
		return fastAttempt{}, false
	}
	a := fastAttempt{s: s}
	var tk, hk int
	a.keys, tk, hk = fastKeys(o, &req, groups[:g], &k)
	a.head = attemptHead(o, &req, tk, hk, &k, groups[:g])
	for i := range k.n {
		if k.specs[i].code != codeCalendar {
			continue
		}
		r := &req.Rules[i]
		loc := r.Location
		if req.Zone != nil { // the attempt's zone, as take.lua's encoder
			loc = req.Zone
		}
		bs, err := b.cals.bounds(b.opts.Clock.Now(), r.Calendar, loc, b.opts.CalendarSpan)
		if err != nil {
			return fastAttempt{}, false // take.lua's encoder says why
		}
		a.cals = append(a.cals, bs)
	}
	return a, true
}

// fastKeyOf returns the fast script's cache key of req's rules (their
// specs and the index of each one's dimension set) and the dimension
// sets' keys (the first g of groups); ok is false when a rule has no
// packed spec.
func (b *Backend) fastKeyOf(req *driver.Request, rep *capability.Report) (k fastKey, groups [lua.FastMax]string, g int, ok bool) {
	k.n, k.ov, k.quiet = len(req.Rules), req.OverrideKey != "", len(req.Quiet) > 0
	memo, _ := b.policySpecs.Get(req.Policy)
	missed := false
	for i := range req.Rules {
		r := &req.Rules[i]
		if validRule(r) != nil {
			return k, groups, 0, false
		}
		sp, hit := b.memoSpec(memo, rep, req, i)
		missed = missed || !hit
		if sp == nil || !lua.FastCode(sp.code) { // (module codes, which have keys of their own, are not)
			return k, groups, 0, false
		}
		k.specs[i], k.wide[i], k.keeps[i] = sp, r.Wide, r.Keep
		key := group(r)
		ki := 0
		for j := range g {
			if groups[j] == key {
				ki = j + 1
				break
			}
		}
		if ki == 0 {
			groups[g] = key
			g++
			ki = g
		}
		k.keys[i] = uint8(ki)
	}
	if missed {
		b.policySpecs.Put(req.Policy, newSpecMemo(rep, req, &k.specs), specCacheMax)
	}
	for i := range g { // a set that nests names its root, a set of no rule if need be
		root := rootOf(groups[i])
		if root == "" || !nests(groups[i], root) {
			continue
		}
		j := slices.Index(groups[:g], root)
		if j < 0 {
			if g == lua.FastMax {
				return k, groups, 0, false
			}
			groups[g], j = root, g
			g++
		}
		k.roots[i] = uint8(j + 1)
		k.hfe = wideHFE(rep)
	}
	return k, groups, g, true
}

// attemptHead returns the head of req's fast attempt of op o (lua.FastHead,
// fast.lua.tmpl's header): tk and hk its trail's and reservations' key
// indexes; the ids (sectionID) of the sets of k that nest (k.roots), in
// the order of their keys sets; its quiet spans when the script takes
// them (k.quiet), checked already (checkQuiet).
func attemptHead(o op, req *driver.Request, tk, hk int, k *fastKey, sets []string) string {
	var spans []driver.Span
	if k.quiet {
		spans = req.Quiet
	}
	nested := 0
	for i := range sets {
		if k.roots[i] != 0 {
			nested++
		}
	}
	trailMax, trailTTL := 0, int64(0)
	if tk > 0 {
		trailMax, trailTTL = req.TrailMax, ceilMillis(req.TrailTTL)
	}
	tv := 0 // the trail values' length, their separator included
	if req.TrailValues != "" {
		tv = len(lua.TrailSep) + len(req.TrailValues)
	}
	b := make([]byte, 0, lua.FastHeadLen+lua.FastIDLen*nested+lua.FastSpanLen*len(spans)+8+len(req.Policy)+tv)
	code, _ := opCode(o)
	b = append(b, code.(string)[0])
	b = binary.LittleEndian.AppendUint64(b, uint64(req.Cost))
	b = append(b, byte(tk), byte(hk))
	b = binary.LittleEndian.AppendUint64(b, uint64(trailMax))
	b = binary.LittleEndian.AppendUint64(b, uint64(trailTTL))
	b = append(b, byte(len(spans)))
	for i, s := range sets {
		if k.roots[i] != 0 {
			b = appendSectionID(b, s)
		}
	}
	for _, sp := range spans {
		b = binary.LittleEndian.AppendUint64(b, uint64(unixMicrosUp(sp.Start)))
		b = binary.LittleEndian.AppendUint64(b, uint64(unixMicrosUp(sp.End)))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(req.Policy)))
	b = append(b, req.Policy...)
	b = binary.LittleEndian.AppendUint32(b, uint32(tv))
	if tv > 0 {
		b = append(b, lua.TrailSep...)
		b = append(b, req.TrailValues...)
	}
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is not written again
}

// fastKeys returns a fast attempt's keys: its dimension sets (those of
// k), then the wide hash of each root a set of k nests in (wideKey, in
// the order of the roots' keys: lua.Fast's), its overrides (k.ov), its
// trail (a take's, with a trail) and its reservations, with the trail's
// and the reservations' indexes (0: none).
func fastKeys(o op, req *driver.Request, sets []string, k *fastKey) (keys []string, tk, hk int) {
	var roots [lua.FastMax]bool // by set index: a set of k nests in it
	nr := 0
	for i := range sets {
		if r := k.roots[i]; r != 0 && !roots[r-1] {
			roots[r-1] = true
			nr++
		}
	}
	nk := len(sets) + nr
	if k.ov {
		nk++ // the overrides, after the dimension sets and wide hashes
	}
	if o == opTake && req.TrailKey != "" && req.TrailMax > 0 {
		nk++
		tk = nk
	}
	if req.ReservationKey != "" {
		nk++
		hk = nk
	}
	keys = make([]string, nk)
	copy(keys, sets)
	at := len(sets)
	for i := range sets {
		if roots[i] {
			keys[at] = wideKey(sets[i])
			at++
		}
	}
	if k.ov {
		keys[at] = req.OverrideKey
	}
	if tk > 0 {
		keys[tk-1] = req.TrailKey
	}
	if hk > 0 {
		keys[hk-1] = req.ReservationKey
	}
	return keys, tk, hk
}

// args returns the EVALSHA argument list of a's script for a alone, in
// the short form of ARGV (fast.lua.tmpl's header): its keys, its head,
// its calendar rules' boundaries. The values are copies (a lone call's
// request stays on its caller's stack; pointers into it would move it
// to the heap, larger than the copies' boxes).
func (a *fastAttempt) args() []any {
	args := append(keyArgs(a.keys, 2+len(a.cals)), a.head)
	for _, bs := range a.cals {
		args = append(args, bs)
	}
	return args
}

// size gives e room for the fast attempts among the first per of reqs
// (building them: Backend.attempt), so addFast's appends do not grow
// its slices as a coalesced script's attempts are added.
func (e *encoder) size(b *Backend, reqs []request, rep *capability.Report, per int) {
	keys, argv, n := 0, 1, 0
	for i := range reqs[:min(per, len(reqs))] {
		if a, ok := b.attempt(&reqs[i], rep); ok {
			keys += len(a.keys)
			argv += 1 + len(a.cals)
			n++
		}
	}
	e.keys = make([]string, 0, keys)
	e.argv = make([]any, 0, argv)
	e.attempts = make([][]ruleChoice, 0, n)
}

// addFast appends fast attempt a to e, whose attempts all run a's script
// (the full form: e's first ARGV value is their number).
func (e *encoder) addFast(a *fastAttempt) {
	e.keys = append(e.keys, a.keys...)
	e.argv = append(e.argv, &a.head) // pointers into a (a flush's requests are on the heap already): no boxing
	for j := range a.cals {
		e.argv = append(e.argv, &a.cals[j])
	}
	e.attempts = append(e.attempts, a.s.choices)
}

// buildFast builds the fast script of k's rules.
func buildFast(k *fastKey) (*fastScript, error) {
	rules := make([]lua.FastRule, k.n)
	choices := make([]ruleChoice, k.n)
	var s fastScript
	for i := range k.n {
		a := &k.specs[i].args
		var p1 int64 // a calendar rule's: its boundaries, an argument of each attempt
		if k.specs[i].code != codeCalendar {
			p1 = toInt64(a[3])
		}
		rules[i] = lua.FastRule{
			Code:   a[0].(string),
			Name:   a[1].(string),
			Limit:  toInt64(a[2]),
			P1:     p1,
			P2:     toInt64(a[4]),
			Tag:    a[5].(string),
			Key:    int(k.keys[i]),
			Root:   int(k.roots[k.keys[i]-1]),
			Window: k.specs[i].window,
			Wide:   k.wide[i],
			Keep:   k.keeps[i],
		}
		choices[i] = ruleChoice{code: rules[i].Code}
	}
	src, err := lua.FastWith(rules, lua.FastOptions{Overrides: k.ov, HFE: k.hfe, Quiet: k.quiet})
	if err != nil {
		return nil, err
	}
	s.script, s.src, s.choices = goredis.NewScript(src), src, choices
	return &s, nil
}

// toInt64 reads a rule's numeric ARGV value as ruleArgs boxes it.
func toInt64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int:
		return int64(x)
	}
	panic("redis: fast script: unexpected argument type")
}

// fastCandidate reports whether r may run in a fast script: a fixed window
// (a calendar one too), a sliding window on plain Lua, a sliding log, or
// GCRA (redis-cell takes only some GCRA rules: the spec says which); not
// a shadow rule, an exempt one (driver.Rule.Exempt) or a seeded one
// (take.lua's alone), nor one whose headroom take.lua's encoder refuses.
func fastCandidate(rep *capability.Report, r *driver.Rule) bool {
	if r.Shadow || r.Seed != 0 || r.Exempt != driver.NotExempt || r.Keep < 0 || (r.Keep > 0 && r.Algorithm == driver.GCRA) {
		return false
	}
	switch r.Algorithm {
	case driver.FixedWindow:
		return true // a calendar rule's boundaries go as an argument
	case driver.SlidingWindow:
		return r.Epoch > 0 || r.ExactLog() || rep.Choice(r.Algorithm).Strategy == capability.PlainLua
	case driver.SlidingLog:
		return r.Limit <= driver.LogLine // larger: a sorted set, take.lua's
	case driver.GCRA:
		return true
	}
	return false
}
