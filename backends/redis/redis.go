// Package redis is the freqcap backend for Redis (standalone, Sentinel and
// Cluster) and Redis-compatible servers such as Alibaba Tair, using Lua
// scripts on plain data types and, where the server has them, module
// commands.
//
// One decision is one EVALSHA of one script that evaluates every rule of
// the request against the server's clock (TIME) and consumes from all of
// them only if every enforced one admits (a shadow rule consumes only
// when it admits too, driver.Rule.Shadow; an exempt one never denies,
// driver.Rule.Exempt; a rule keeping headroom admits up to its limit less
// driver.Rule.Keep; in quiet hours, driver.Request.Quiet, nothing is
// admitted): take.lua (the top-level package lua holds the sources; internal/lua builds the scripts), or, for a
// take or peek whose rules are all fixed or calendar windows,
// sliding-window counters or GCRA on plain Lua, or packed sliding logs (limit at most driver.LogLine; at most
// internal/lua's FastMax rules, none shadow, exempt or seeded, no idempotency
// key, no Options.Upgrade; overrides, headroom and quiet hours are decided there too),
// the fast script built
// for that set of rules (fast.lua.tmpl: take.lua's own arithmetic with the rules written in as
// constants; the same decisions, writes and errors, in shorter encodings of its
// arguments and reply, for less server time,
// docs/benchmarks/HISTORY.md). A fast script is built once per process and set of
// rules (cached) and loaded on a server at its first use there. The rules of a request that share their
// dimensions keep their state in ONE packed string value: fixed windows,
// calendar windows, sliding-window counters, GCRA and sliding logs up to
// driver.LogLine (and sliding windows evaluated as logs) as its entries
// (docs/DESIGN.md, "Redis layout"). It is stored at the dimension set's key
// (driver.Rule.Group), or, for a set over more than the shard dimensions,
// as a section of the subject's root key (the shard set's), whatever the
// policy's other rules: one key per subject (docs/DESIGN.md, "One key per
// subject"), read with one GET and written with one SET (or, when the
// entries keep their places, lengths and expiries and the key holds no
// section, one SETRANGE). A root whose value would pass 2 048 bytes (the
// internal lua.WideAt) while holding sections goes wide: its sections move to a hash
// beside it, one field per set, so a decision reads and writes one field
// whatever the subject's other values, in its fast script or take.lua
// alike, one EVALSHA (docs/DESIGN.md, "Wide subjects"; fields expire by
// HPEXPIREAT where the server has it, else a bounded sweep removes them). Larger sliding logs are kept in one sorted set
// per dimension set, whatever its log rules (logKey). The denial trail is
// a list, the open reservations a hash; both are written by the same
// scripts. Options.Upgrade reads through the one-key-per-rule layout of
// earlier versions, and the nested sets' own keys. TakeBatch decides up to 128 requests per EVALSHA on a
// standalone or Sentinel server; Options.Coalesce has the concurrent
// single calls of a process share such scripts.
//
// On first use the backend detects what the server can do
// (backends/redis/capability: TairHash, redis-cell, native hash-field expiry,
// scripting, whether it is a replica; every master of a cluster) and picks a strategy per
// algorithm: plain Lua's packed layout wherever scripting runs, which
// measured faster than every module strategy (docs/MODULES.md), and with
// capability.Config.ModuleStrategies sliding windows on native hash-field
// expiry or TairHash fields, GCRA on redis-cell's CL.THROTTLE, all called
// from the same script, so decisions stay one EVALSHA and all-or-nothing. A rule under a
// module strategy keeps its state under its own key plus a suffix (%h,
// %t, %x), so a change of strategy never hands one strategy's key to
// another.
// Where scripting is refused (Tair ESSD/SSD instances, proxies),
// sliding-window rules run as bare TairHash commands where TairHash is
// present, and GCRA rules as bare CL.THROTTLE commands where redis-cell is
// (a GCRA rule another GCRA rule's refusal denies may keep its units:
// under-admission, never over-admission), and decisions say NonAtomic. On a replica every decision (Take, Peek,
// Reserve, Inspect, batches) and Commit and Cancel fail with an error wrapping a
// *capability.ReplicaError, which names the master; each such call
// detects again, so a replica promoted to master is used at once.
// Options.Detect overrides detection; Describe reports it; Redetect runs
// it again.
//
// Replication is asynchronous: a failover may lose the latest decisions.
// Options.Durability makes each decision that may consume wait for
// replicas' acknowledgement (WAIT in the script's round trip) and say
// whether it came (driver.Result.Durable); a decision whose wait timed out
// stands, and is not made an error (docs/DESIGN.md, "Replication and
// failover").
//
// Decisions are never replayed: the backend marks its script commands as
// not retryable, so go-redis does not send a decision twice after a
// timeout or a broken connection, whatever the client's MaxRetries. (A
// replay could count one request twice.) Only a script the server
// refused before running it is sent again: at once with EVAL after
// NOSCRIPT; after a pause (2 ms doubling to 100 ms) while a Redis Cluster
// refuses it as a slot moves or a failover ends (TRYAGAIN, MOVED or ASK
// past go-redis' own redirects, CLUSTERDOWN), as long as the pause and a
// round trip fit before ctx's deadline (without one, within 2 s). Past
// that the call fails at once with an error wrapping ErrNotRun and the
// refusal: nothing was counted. Batches and coalesced groups send again
// only their refused entries (docs/DESIGN.md, "During a resharding or
// failover"). NewClientOptions gives client settings suited to a
// limiter.
package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/bounded"
	"github.com/freqcap/freqcap/sdk/driver"
)

var (
	_ driver.Backend   = (*Backend)(nil)
	_ driver.Peeker    = (*Backend)(nil)
	_ driver.Reserver  = (*Backend)(nil)
	_ driver.Inspector = (*Backend)(nil)
	_ driver.Batcher   = (*Backend)(nil)
	_ driver.Resetter  = (*Backend)(nil)
	_ driver.Describer = (*Backend)(nil)
)

// Scripts, built once: NewScript computes the SHA1 EVALSHA sends.
var (
	takeScript   = goredis.NewScript(lua.Take)
	settleScript = goredis.NewScript(lua.Settle)
	resetScript  = goredis.NewScript(lua.Reset)
)

// Options configures a Backend. The zero value (or nil) means defaults.
type Options struct {
	// Target is what Describe reports as the location of the state.
	// Default: the client's address(es), comma-separated.
	Target string
	// CalendarSpan is how many calendar units (hours, days, weeks or
	// months: the rule's) of boundaries on each side of the client's clock
	// a calendar rule sends, in the attempt's zone (driver.Request.Zone)
	// or the rule's, so that the script can pick the window around the
	// server's clock. It bounds the client/server clock skew tolerated: a
	// unit (an hour for an hourly rule, a week for a weekly one) by
	// default, and a skew beyond it fails the decision with an error,
	// never a wrong window. Default: 1.
	CalendarSpan int
	// Clock is the client's clock, around which calendar rules send their
	// boundaries (CalendarSpan); decisions are still made on the server's
	// clock (TIME). A test that sets its servers' clock
	// (internal/redistest.Clock) gives the same one here. Default: the
	// system clock.
	Clock driver.Clock
	// SettleAttempts bounds how often Commit or Cancel re-reads a reservation that changed
	// between its read and its script. Default: 3.
	SettleAttempts int
	// Detect overrides capability detection: ModuleStrategies uses the
	// per-rule module strategies where every master has their module;
	// ForcePlainLua uses the plain Lua strategies whatever modules the
	// server has; Forbid lists features never to use (tairhash,
	// redis-cell, hfe). Default: the zero Config, which detects everything
	// and runs plain Lua wherever scripting runs (bare TairHash and
	// CL.THROTTLE commands where it is refused).
	Detect capability.Config
	// Upgrade reads through the one-key-per-rule layout of freqcap before
	// the packed layout (docs/DESIGN.md, "Upgrading to the packed
	// layout"): where a subject's dimension set has no packed value yet,
	// the script builds it from the rules' own keys (driver.Rule.Key:
	// fixed-window counters, sliding-window hashes, GCRA TATs, sliding
	// logs), so counts carry over. It costs one or two more commands per
	// rule (GET and PEXPIRETIME of a counter, HGETALL of a hash, GET of a
	// TAT, EXISTS and ZUNIONSTORE of the logs) on every decision that
	// finds no packed value: the first on each subject after the upgrade,
	// and every one on a subject never seen before. It also reads a nested
	// set (docs/DESIGN.md, "One key per subject") that has no section yet
	// from its own key, as the version before nesting kept it (one GET
	// more while the section is absent), and deletes that key once the
	// section is written. And it builds the exact log of a sliding window
	// whose limit is at most driver.LogLine, where the log is not there
	// yet, from the cells the window counted in before it was a log (their
	// entry in the set's packed value, else the rule's one-key-per-rule
	// hash: one HGETALL more), each cell's units leaving the log when the
	// cell would have stopped counting, so a subject capped before the
	// upgrade stays capped exactly as long; without Upgrade those counts
	// start afresh.
	// Turn it on for the upgrade and off once the longest window of your
	// policies has passed. Default: off (state starts afresh).
	Upgrade bool
	// Coalesce, N, coalesces the concurrent single decisions
	// (Take, Peek, Reserve, Inspect) and small batches (TakeBatch and
	// PeekBatch of up to 128 requests, whose requests stay together, in
	// input order, in one script) of this Backend: calls that arrive
	// while N scripts are in flight queue, and each script that ends
	// carries the queued calls (up to 128, in arrival order) in
	// multi-attempt EVALSHAs of one pipeline, as TakeBatch does (one per
	// run of calls sharing a script: a fast script or take.lua), with at
	// most N such pipelines in flight at once. Each call still
	// gets its own atomic, all-or-nothing decision with the same Result
	// as without coalescing, and its own error (an attempt the script
	// refuses fails alone). It saves round trips and per-script server
	// work when many goroutines of one process decide at once; it adds
	// no timer and never waits for more calls to come.
	//
	// Added latency: a call that finds N scripts in flight waits until
	// the first of them ends, then goes out in the next script, so it
	// takes at most the remainder of one in-flight script plus the script
	// carrying it, itself at most 128 attempts long. (Only when more than
	// 128 calls queue ahead of it does it wait for one more script per
	// 128 of them, served N at a time.) A call finding no script in
	// flight and no call queued goes out at once, alone, in the same
	// EVALSHA as uncoalesced: a lone caller pays nothing. A call finding
	// a script in flight and a slot free yields the processor once, so
	// the calls arriving with it share its script, then sends them.
	//
	// A call whose ctx ends while it waits returns ctx's error: if it was
	// not sent yet nothing is consumed; if it was, its attempt may still
	// run, as after any lost reply, and is never sent again once it may
	// have run (only a server's refusal is, see the package doc). A script's
	// reads are bounded by the deadline of the call that sends it (or the
	// client's ReadTimeout), so a call whose deadline comes later may
	// fail at the sender's. Two scripts in flight may run in either
	// order, as concurrent calls would; the attempts within a script run
	// in arrival order.
	//
	// Coalescing applies on a standalone or Sentinel client
	// (*goredis.Client) with scripting; on a *goredis.ClusterClient or a
	// *goredis.Ring it is ignored (Describe says so), and where scripting
	// is refused decisions run as bare commands, one by one. Default (0):
	// DefaultCoalesce. A negative N turns coalescing off: one EVALSHA per
	// call.
	Coalesce int
	// Durability waits, after each decision that may consume, for
	// replicas to acknowledge its writes (WAIT or WAITAOF in the script's
	// round trip), and each decision says whether they did (see
	// Durability). Default: the zero Durability, no wait: replication is
	// asynchronous, and a failover may lose the latest decisions.
	Durability Durability
	// Eviction is what to do on a server that may evict freqcap's keys
	// under memory pressure: every freqcap key has a TTL, so every
	// maxmemory-policy but noeviction (volatile-lru, the default of
	// several managed Redis and Tair offerings, included) evicts counters
	// first, and the people they counted are uncapped without trace
	// (docs/DESIGN.md, "Memory and eviction").
	//
	// Default: EvictionWarn, which decides and reports every such master
	// as a warning (Describe, the console's overview, serve's /readyz,
	// `freqcap detect`). It is the default because refusing would turn a
	// risk under memory pressure into a certain outage: on a managed
	// server whose policy cannot be changed at once, every decision would
	// fail, and a fail-open policy would then admit everyone, all the
	// time. Where the policy is yours to set, set noeviction and
	// EvictionRefuse (`--eviction refuse` in cmd/freqcap): then a server
	// that may evict (or will not say: INFO refused) is never decided on,
	// and a decision fails with an error wrapping ErrEvictionPolicy
	// instead. Under noeviction a full server refuses the decision's
	// writes (OOM): the decision fails, it never admits uncounted.
	Eviction Eviction
	// EvictionRecheck is how often, under EvictionRefuse, the masters'
	// memory is read again (INFO memory and INFO stats, by the decision
	// that finds the last reading older), so that a CONFIG SET of
	// maxmemory-policy either way is seen within it. Default:
	// DefaultEvictionRecheck.
	EvictionRecheck time.Duration
}

// DefaultCoalesce is Options.Coalesce when it is 0: at most 2 coalesced
// scripts in flight. Measured with 64 concurrent callers on Redis 7.0.15,
// 7.4.1, TairHash and redis-cell servers (docs/BENCHMARKS.md), it decided
// more per second than one EVALSHA per call on every policy shape; a lone
// caller goes out at once, in the same EVALSHA as uncoalesced.
const DefaultCoalesce = 2

// Backend decides with Lua scripts (and module commands, where detected)
// on a Redis server or cluster. It is safe for concurrent use; create one
// per client and share it. Most callers only pass it to sdk.New.
type Backend struct {
	c    goredis.UniversalClient
	opts Options
	det  *capability.Detector
	// specs caches each rule's static ARGV (see specCache); policySpecs
	// the specs of each policy's rules as last found (specMemo).
	specs       specCache
	policySpecs bounded.Map[string, *specMemo]
	// cals caches each calendar rule's boundaries until the clock leaves
	// their unit (calendarCache).
	cals calendarCache
	// fast caches the fast scripts built for the policies in use (fast.go);
	// noFast turns them off (tests comparing them with take.lua).
	fast   fastCache
	noFast bool
	// noScripts counts the NOSCRIPT replies the backend met; takeThere
	// (and each fast script's there) is noScripts+1 when take.lua was
	// found or loaded on the server since the last one (loadScripts).
	noScripts atomic.Uint64
	takeThere atomic.Uint64
	// resends counts the scripts sent again after a cluster refused
	// them (retry.go).
	resends resends
	// co coalesces single decisions (Options.Coalesce); nil when off.
	co *coalescer
	// eng is the engine of the latest capability report (Backend.engine).
	eng atomic.Pointer[chosenEngine]
	// dur is what Options.Durability needs to know (durable.go).
	dur durableState
	// evict is the latest memory verdict under EvictionRefuse (eviction.go).
	evict evictionGate
}

// New returns a Backend using c, which may be a *goredis.Client (standalone
// or Sentinel failover) or a *goredis.ClusterClient. Nil opts means
// defaults. The backend does not own c: closing it is the caller's job.
func New(c goredis.UniversalClient, opts *Options) *Backend {
	b := &Backend{c: c}
	if opts != nil {
		b.opts = *opts
	}
	if b.opts.CalendarSpan <= 0 {
		b.opts.CalendarSpan = 1
	}
	if b.opts.Clock == nil {
		b.opts.Clock = driver.SystemClock
	}
	if b.opts.SettleAttempts <= 0 {
		b.opts.SettleAttempts = 3
	}
	if b.opts.Coalesce == 0 {
		b.opts.Coalesce = DefaultCoalesce
	}
	if _, single := c.(*goredis.Client); single && b.opts.Coalesce > 0 {
		b.co = newCoalescer(b.opts.Coalesce)
	}
	if b.opts.EvictionRecheck <= 0 {
		b.opts.EvictionRecheck = DefaultEvictionRecheck
	}
	b.evict.sem = make(chan struct{}, 1)
	b.det = capability.NewDetector(c, b.opts.Detect)
	return b
}

// report returns the cached capability report, detecting on first use.
func (b *Backend) report(ctx context.Context) (*capability.Report, error) {
	rep, err := b.det.Report(ctx)
	if err != nil {
		return nil, fmt.Errorf("detect: %w", err)
	}
	return rep, nil
}

// Redetect probes the server again (after a module was loaded, a
// failover or a resharding) and returns the new report; later decisions
// use its choices. On error the previous report stays in use.
//
// A rule whose strategy changes starts afresh under its new key (module
// strategies keep their state under suffixed keys); the old state expires
// by itself.
func (b *Backend) Redetect(ctx context.Context) (*capability.Report, error) {
	rep, err := b.det.Refresh(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: redetect: %w", err)
	}
	return rep, nil
}

// Capabilities returns the capability report decisions use, detecting on
// first use.
func (b *Backend) Capabilities(ctx context.Context) (*capability.Report, error) {
	rep, err := b.report(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return rep, nil
}

// NewClientOptions returns client options suited to a limiter on addrs
// (one address: standalone; several: cluster; see
// goredis.NewUniversalClient): no command retries (MaxRetries -1, so a
// timed-out command is never sent again), context deadlines honoured
// (ContextTimeoutEnabled, so sdk.WithTimeout bounds each call), 1 s dial
// and 500 ms read/write timeouts. Adjust PoolSize to your concurrency.
//
// The backend marks its own decisions as not retryable whatever the
// client's settings; these settings make the rest of the client behave
// the same way.
func NewClientOptions(addrs ...string) *goredis.UniversalOptions {
	return &goredis.UniversalOptions{
		Addrs:                 addrs,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           500 * time.Millisecond,
		WriteTimeout:          500 * time.Millisecond,
	}
}

// noRetryCmd is a script command go-redis must not send twice: a decision
// whose reply was lost may have been applied.
type noRetryCmd struct{ *goredis.Cmd }

// NoRetry tells go-redis not to replay the command.
func (noRetryCmd) NoRetry() bool { return true }

// runOnce sends EVALSHA and, only on NOSCRIPT (the script cache is empty: a
// restart, a failover, SCRIPT FLUSH), EVAL with the source; with
// evalOnly (a server that refuses EVALSHA: capability.Report.EvalOnly),
// EVAL at once. args starts with 3 placeholders for the command name,
// script and key count. A NOSCRIPT reply is counted in b.noScripts.
// Backend.run (retry.go) sends it again while the cluster refuses it.
func (b *Backend) runOnce(ctx context.Context, s *goredis.Script, src string, evalOnly bool, keys []string, args []any) (any, error) {
	c := b.c
	args[2] = len(keys)
	var (
		v   any
		err error
	)
	if !evalOnly {
		v, err = send(ctx, c, args, "evalsha", s.Hash())
	}
	if !evalOnly && isNoScript(err) {
		b.noScripts.Add(1) // scripts found before may be gone (loadScripts)
	}
	if evalOnly || isNoScript(err) {
		v, err = send(ctx, c, args, "eval", src)
	}
	reloadOnNoReply(ctx, c, err)
	return v, err
}

// send sends args as one not-retryable command name script ….
func send(ctx context.Context, c goredis.UniversalClient, args []any, name, script string) (any, error) {
	args[0], args[1] = name, script
	cmd := noRetryCmd{goredis.NewCmd(ctx, args...)}
	_ = c.Process(ctx, cmd)
	return cmd.Result()
}

// reloadOnNoReply asks a cluster client to reload its slot map after a
// script failed without a server reply (a dead, paused or failed-over
// master) or with CLUSTERDOWN. Decisions are never retried, so go-redis
// would otherwise keep sending them to the old master until its periodic
// reload (60 s by default). go-redis reloads asynchronously and coalesces
// requests, so calling this on every failure is cheap.
func reloadOnNoReply(ctx context.Context, c goredis.UniversalClient, err error) {
	cc, ok := c.(*goredis.ClusterClient)
	if !ok || err == nil || errors.Is(err, goredis.Nil) {
		return
	}
	var re goredis.Error
	if errors.As(err, &re) && !goredis.HasErrorPrefix(err, "CLUSTERDOWN") {
		return // the server answered: its map is not the problem
	}
	cc.ReloadState(ctx)
}

// Take checks req's rules and, if every enforced rule admits req.Cost,
// consumes it from each (a shadow rule only when it admits it too, see
// driver.Rule.Shadow), in one EVALSHA of take.lua or of the fast script of req's rules
// (see the package doc; EVAL where the server refuses EVALSHA;
// shared with concurrent calls under Options.Coalesce). Where scripting is
// refused, it runs bare TairHash and CL.THROTTLE commands instead
// (docs/MODULES.md, "Bare mode"): the Result is NonAtomic.
func (b *Backend) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	return b.decide(ctx, opTake, req)
}

// Peek reports what Take would decide, consuming nothing: the same one
// EVALSHA (driver.Peeker).
func (b *Backend) Peek(ctx context.Context, req driver.Request) (driver.Result, error) {
	return b.decide(ctx, opPeek, req)
}

// Reserve is Take that records a reservation in the same EVALSHA
// (driver.Reserver). Where scripting is refused it returns an error
// wrapping errors.ErrUnsupported.
func (b *Backend) Reserve(ctx context.Context, req driver.Request) (driver.Result, error) {
	return b.decide(ctx, opReserve, req)
}

// Inspect is a cost-1 Peek that also returns the denial trail, in the same
// one EVALSHA (driver.Inspector).
func (b *Backend) Inspect(ctx context.Context, req driver.Request) (driver.Result, error) {
	return b.decide(ctx, opInspect, req)
}

// decide carries out one operation with the engine of the server as
// detected: one EVALSHA, coalesced with concurrent calls under
// Options.Coalesce (scriptMode), or bare commands (bareMode).
func (b *Backend) decide(ctx context.Context, o op, req driver.Request) (driver.Result, error) {
	e, err := b.deciding(ctx)
	if err != nil {
		return driver.Result{}, fmt.Errorf("redis: %v: %w", o, err)
	}
	res, err := e.decide(ctx, o, req)
	if err != nil {
		return driver.Result{}, fmt.Errorf("redis: %v: %w", o, err)
	}
	return res, nil
}

// finish decodes take.lua's or a fast script's reply v (parseTake) to
// req, whose rules ran as choices.
func (b *Backend) finish(o op, req driver.Request, choices []ruleChoice, v any) (driver.Result, error) {
	if err, ok := v.(error); ok { // an attempt's error in a multi-attempt reply
		return driver.Result{}, err
	}
	res, err := parseTake(v, req.Rules)
	if err != nil {
		return driver.Result{}, err
	}
	if o == opReserve && res.Allowed && !res.Replayed {
		res.ReservationID = req.ReservationID
	}
	for i, ch := range choices {
		res.Rules[i].Strategy = ch.strategy()
	}
	return res, nil
}

// Commit keeps the units of reservation id under resKey
// (driver.Reserver): one EVAL(SHA) of settle.lua over the keys the
// reservation's refund touches. Where scripting is refused it returns an
// error wrapping errors.ErrUnsupported.
func (b *Backend) Commit(ctx context.Context, resKey, id string) error {
	return b.settle(ctx, resKey, id, true)
}

// Cancel is Commit that gives the units back.
func (b *Backend) Cancel(ctx context.Context, resKey, id string) error {
	return b.settle(ctx, resKey, id, false)
}

func (b *Backend) settle(ctx context.Context, resKey, id string, commit bool) error {
	e, err := b.engine(ctx)
	if err == nil {
		err = e.settle(ctx, resKey, id, commit)
	}
	if err != nil && !errors.Is(err, driver.ErrReservationNotFound) {
		return fmt.Errorf("redis: settle: %w", err)
	}
	return err
}

// Reset deletes the state of every rule in req.Rules and the reservations
// under req.ReservationKey, in one step: the packed values and logs of the
// rules' dimension sets, and every key a rule may have used under another
// strategy or the one-key-per-rule layout (the plain key and the module
// strategies' suffixed ones). A nested set's section goes from its root's
// value, whose own entries go only when the root's rules are named, and
// the sections of the sets not named stay: that takes reset.lua (one
// EVALSHA) where a key can be a root, else one DEL. The denial trail is
// kept.
func (b *Backend) Reset(ctx context.Context, req driver.Request) error {
	keys := make([]string, 0, 5*len(req.Rules)+1)
	for i := range req.Rules {
		r := &req.Rules[i]
		pk := prevLogKey(req.Rules, r)
		for _, k := range append(stateKeys(r), group(r), logKey(r), pk) {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	if req.ReservationKey != "" {
		keys = append(keys, req.ReservationKey)
	}
	if len(keys) == 0 {
		return nil
	}
	if err := b.reset(ctx, keys); err != nil {
		return fmt.Errorf("redis: reset: %w", err)
	}
	return nil
}

// reset deletes keys in one step: with one DEL, or, where some are
// roots of nested sets (nests) or nested sets, and the server runs
// scripts, with reset.lua, which deletes a nested set's section from its
// root's value and keeps the sections of the sets not named.
func (b *Backend) reset(ctx context.Context, keys []string) error {
	var roots []string
	for _, k := range keys {
		if r := rootOf(k); r != "" && !slices.Contains(roots, r) {
			roots = append(roots, r)
		}
	}
	if len(roots) == 0 {
		return b.c.Del(ctx, keys...).Err()
	}
	e, err := b.engine(ctx)
	if err != nil {
		return err
	}
	sm, ok := e.(scriptMode)
	if !ok {
		return b.c.Del(ctx, keys...).Err() // bare mode: nothing nests
	}
	all := slices.Clone(roots)
	for _, r := range roots {
		all = append(all, wideKey(r)) // reset.lua: KEYS[m+1..2m]
	}
	for _, k := range keys {
		if !slices.Contains(roots, k) {
			all = append(all, k)
		}
	}
	argv := []any{len(roots)}
	for _, r := range roots {
		spec := []byte("0:")
		if slices.Contains(keys, r) {
			spec[0] = '1' // named: its own entries go too
		}
		for i, k := range all {
			if nests(k, r) && k != wideKey(r) {
				spec = append(strconv.AppendInt(spec, int64(i+1), 10), ',')
			}
		}
		argv = append(argv, string(spec))
	}
	args := append(keyArgs(all, len(argv)), argv...)
	_, err = b.run(ctx, resetScript, lua.Reset, sm.rep.EvalOnly, all, args)
	return err
}

// Describe reports the backend, its target and the capability report:
// the strategy chosen for each algorithm and why, and the findings of
// detection as notes (detecting on first use). It asks the server for its
// version, and every master for its memory now (Memory): maxmemory,
// maxmemory-policy and evicted_keys in Description.Memory, and a warning
// for each master that may evict freqcap's keys (Options.Eviction).
func (b *Backend) Describe(ctx context.Context) (driver.Description, error) {
	rep, err := b.report(ctx)
	if err != nil {
		return driver.Description{Name: "redis", Target: b.target()}, fmt.Errorf("redis: describe: %w", err)
	}
	d := describeReport(rep)
	d.Name, d.Target = "redis", b.target()
	info, err := b.c.Info(ctx, "server").Result()
	if err != nil {
		return d, fmt.Errorf("redis: describe: %w", err)
	}
	if v := infoField(info, "redis_version"); v != "" {
		note := "server: redis " + v
		if s := infoField(info, "server_name"); s != "" && s != "redis" {
			note = "server: " + s + " " + infoField(info, s+"_version") + " (redis_version " + v + ")"
		}
		d.Notes = append(d.Notes, note)
	}
	if _, ok := b.c.(*goredis.ClusterClient); ok {
		d.Notes = append(d.Notes, "cluster: one subject's keys share a hash tag, so each decision runs on one master; "+resendNote)
	}
	if err := b.describeMemory(ctx, &d); err != nil {
		return d, fmt.Errorf("redis: describe: %w", err)
	}
	if rep.Writable() != nil {
		return d, nil // a replica: the report's notes and reasons say so, and no engine runs
	}
	e, err := b.engine(ctx)
	if err != nil {
		return d, fmt.Errorf("redis: describe: %w", err)
	}
	d.Notes = append(d.Notes, e.notes()...)
	return d, nil
}

// plainDetail says how the plain Lua strategy keeps each algorithm's state.
var plainDetail = map[driver.Algorithm]string{
	driver.FixedWindow:   "a count per rule in the dimension set's packed value, tagged with its window's end",
	driver.SlidingWindow: "a count per cell per rule in the dimension set's packed value; a rule of limit <= 100 (driver.LogLine) is an exact log there",
	driver.SlidingLog:    "a record (server µs, cumulative units) per admitting instant per rule in the dimension set's packed value, binary-searched, for limits <= 100 (driver.LogLine); above, one sorted-set member per unit in one set per dimension set",
	driver.GCRA:          "a TAT in µs per rule in the dimension set's packed value",
}

func (b *Backend) target() string {
	if b.opts.Target != "" {
		return b.opts.Target
	}
	switch c := b.c.(type) {
	case *goredis.Client:
		return c.Options().Addr
	case *goredis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *goredis.Ring:
		var a []string
		for _, v := range c.Options().Addrs {
			a = append(a, v)
		}
		return strings.Join(a, ",")
	}
	return ""
}

func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
