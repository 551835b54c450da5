package redis

import (
	"context"
	"fmt"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Fast scripts: take.lua specialised to one policy's rules (lua.Fast,
// lua/fast.lua). A take or peek whose rules are all packed (fixed
// windows, calendar excepted; sliding window counters; GCRA on plain
// Lua), at most lua.FastMax of them, without an idempotency key and
// without Options.Upgrade, runs the script built for its rules, loaded
// once per server like take.lua. The script hands an attempt it cannot
// decide back before writing anything (a value freqcap did not write, a
// reservation that may have lapsed): the backend then runs take.lua for
// it, so a decision is one EVALSHA as before, two in those cases.

// fastArgs is the ARGV per attempt of a fast script (lua/fast.lua).
const fastArgs = 8

// fastKey identifies a fast script: its rules' specifications (the spec
// cache's pointers: one per distinct static specification while cached)
// and each rule's dimension-set index.
type fastKey struct {
	n     int
	specs [lua.FastMax]*ruleSpec
	keys  [lua.FastMax]uint8
}

// fastScript is one built fast script and what decoding its replies
// needs.
type fastScript struct {
	script  *goredis.Script
	src     string
	groups  int
	choices []ruleChoice // their strategies (Result.Rules[i].Strategy)
}

// fastCache maps fastKey to fastScript, at most specCacheMax entries (it
// empties when full, as specCache does). Safe for concurrent use.
type fastCache struct {
	mu sync.RWMutex
	m  map[fastKey]*fastScript
}

func (c *fastCache) get(k *fastKey) *fastScript {
	c.mu.RLock()
	s := c.m[*k]
	c.mu.RUnlock()
	return s
}

func (c *fastCache) put(k *fastKey, s *fastScript) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[fastKey]*fastScript)
	}
	if _, ok := c.m[*k]; !ok && len(c.m) >= specCacheMax {
		clear(c.m)
	}
	c.m[*k] = s
	c.mu.Unlock()
}

// fastAttempt is one request's part of a fast script's call: its keys
// (dimension sets, then its trail if tk > 0) and its ARGV.
type fastAttempt struct {
	s    *fastScript
	keys []string
	argv [fastArgs]any
}

// fastAttempt returns the fast attempt of req, or false where take.lua
// must decide it (an op, rule or option fast scripts do not cover, or a
// request take.lua would refuse: take.lua's encoder then says why).
func (b *Backend) fastAttempt(o op, req driver.Request, rep *capability.Report) (fastAttempt, bool) {
	n := len(req.Rules)
	if b.opts.Upgrade || b.noFast || n == 0 || n > lua.FastMax || req.Cost < 1 ||
		(o != opTake && o != opPeek) || (o == opTake && req.IdemKey != "") {
		return fastAttempt{}, false
	}
	var k fastKey
	k.n = n
	var groups [lua.FastMax]string
	g := 0
	for i := range req.Rules {
		r := &req.Rules[i]
		if validRule(r) != nil {
			return fastAttempt{}, false
		}
		sp, err := b.spec(rep, r)
		if err != nil || sp.suffix != "" || !lua.FastCode(sp.code) {
			return fastAttempt{}, false
		}
		k.specs[i] = sp
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
	s := b.fast.get(&k)
	if s == nil {
		var err error
		if s, err = buildFast(&k); err != nil {
			return fastAttempt{}, false
		}
		b.fast.put(&k, s)
	}
	tk := 0
	nk := g
	if o == opTake && req.TrailKey != "" && req.TrailMax > 0 {
		nk++
		tk = nk
	}
	keys := make([]string, nk)
	copy(keys, groups[:g])
	if tk > 0 {
		keys[tk-1] = req.TrailKey
	}
	held := 0
	if req.ReservationKey != "" {
		held = 1
	}
	code, _ := opCode(o)
	return fastAttempt{s: s, keys: keys, argv: [fastArgs]any{code, req.Cost, tk, held, req.TrailMax, ceilMillis(req.TrailTTL), req.Policy, req.TrailValues}}, true
}

// args returns the EVALSHA argument list of a's script for a alone.
func (a *fastAttempt) args() []any {
	args := make([]any, evalArgs, evalArgs+len(a.keys)+1+fastArgs)
	for i := range a.keys {
		args = append(args, &a.keys[i])
	}
	args = append(args, 1)
	return append(args, a.argv[:]...)
}

// fastScripts decides what it can of reqs (one script's worth at most,
// the coalescer's) with fast scripts: the requests sharing the first fast
// request's script, in one multi-attempt EVALSHA, their outcomes written
// to out. It returns the indices of the requests left to take.lua (other
// scripts or none, and those the script handed back).
func (b *Backend) fastScripts(ctx context.Context, reqs []request, rep *capability.Report, out []driver.BatchResult) []int {
	var (
		rest []int
		idx  []int
		atts []fastAttempt
		nk   int
	)
	for i, r := range reqs {
		if len(idx) < batchAttempts {
			if a, ok := b.fastAttempt(r.op, r.Request, rep); ok && (len(atts) == 0 || a.s == atts[0].s) {
				idx, atts = append(idx, i), append(atts, a)
				nk += len(a.keys)
				continue
			}
		}
		rest = append(rest, i)
	}
	if len(idx) == 0 {
		return rest
	}
	keys := make([]string, 0, nk)
	for _, a := range atts {
		keys = append(keys, a.keys...)
	}
	args := make([]any, evalArgs, evalArgs+nk+1+fastArgs*len(atts))
	for i := range keys {
		args = append(args, &keys[i])
	}
	args = append(args, len(atts))
	for i := range atts {
		args = append(args, atts[i].argv[:]...)
	}
	s := atts[0].s
	v, err := run(ctx, b.c, s.script, s.src, rep.EvalOnly, keys, args)
	if err != nil {
		for _, i := range idx {
			out[i].Err = err
		}
		return rest
	}
	var replies []any
	if len(atts) == 1 {
		replies = []any{v}
	} else if replies, _ = v.([]any); replies == nil {
		for _, i := range idx {
			out[i].Err = fmt.Errorf("unexpected reply %T", v)
		}
		return rest
	}
	for k, i := range idx {
		if k >= len(replies) || isDeferred(replies[k]) {
			rest = append(rest, i) // handed back, or after one handed back: not run
			continue
		}
		out[i].Result, out[i].Err = b.finish(reqs[i].op, reqs[i].Request, s.choices, replies[k])
	}
	return rest
}

// buildFast builds the fast script of k's rules.
func buildFast(k *fastKey) (*fastScript, error) {
	rules := make([]lua.FastRule, k.n)
	choices := make([]ruleChoice, k.n)
	g := 0
	for i := range k.n {
		a := &k.specs[i].args
		rules[i] = lua.FastRule{
			Code:  a[0].(string),
			Name:  a[1].(string),
			Limit: toInt64(a[2]),
			P1:    toInt64(a[3]),
			P2:    toInt64(a[4]),
			Tag:   a[5].(string),
			Key:   int(k.keys[i]),
		}
		choices[i] = ruleChoice{code: rules[i].Code}
		g = max(g, rules[i].Key)
	}
	src, err := lua.Fast(rules)
	if err != nil {
		return nil, err
	}
	return &fastScript{script: goredis.NewScript(src), src: src, groups: g, choices: choices}, nil
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

// isDeferred reports whether a fast script handed its attempt back to
// take.lua (the reply -1).
func isDeferred(v any) bool {
	n, ok := v.(int64)
	return ok && n == -1
}
