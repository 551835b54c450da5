package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

var _ driver.Batcher = (*Backend)(nil)

// batchPasses bounds the pipelines one TakeBatch sends: the first, and
// up to two more for the entries that met an empty script cache
// (NOSCRIPT): after SCRIPT LOAD with EVALSHA, then with EVAL.
const batchPasses = 3

// errReordered is the error of an entry that was refused (NOSCRIPT: an
// empty script cache; or a cluster's refusal, retry.go: not carried out)
// while a later request on the same hash tag in the same batch was
// carried out: sending it again now would reverse their order, so it is
// reported instead (wrapping ErrNotRun).
var errReordered = errors.New("a later request on the same subject in the batch already ran")

// batchAttempts bounds the attempts one EVALSHA decides on a standalone
// or Sentinel server: a batch of 1000 is 8 scripts in one pipeline.
const batchAttempts = 128

// TakeBatch carries out each of reqs as Take would, and returns one
// BatchResult per request, in input order.
//
// On a standalone or Sentinel server one EVALSHA decides up to 128
// requests in input order (consecutive requests that share a fast
// script, see the package doc, in a script of it; the others in
// take.lua's), each still atomic and all-or-nothing on its own (a denied request consumes nothing and does not stop the others),
// and the EVALSHAs of a batch go in one pipeline; under Options.Coalesce
// a batch of up to 128 requests shares its script with concurrent calls
// (its requests together, in input order). On a Redis Cluster each
// request is one EVALSHA routed by the slot of its keys (one hash tag per
// request): the client sends one pipeline per master, in parallel,
// keeping input order within a master, so requests on the same subject
// run in input order.
//
// A request that cannot be encoded, or that the script refuses (a state
// key holding a value freqcap did not write), fails alone. Entries are
// never sent twice after a lost reply: the commands are marked not
// retryable, and go-redis does not retry a pipeline holding such a
// command (a MOVED or ASK redirect, which the server answers without
// running the script, is followed). An EVALSHA answered NOSCRIPT (a
// restart, a failover, SCRIPT FLUSH: not carried out) is sent again after
// SCRIPT LOAD, in input order, unless a later request on the same hash
// tag already ran: it then fails with an error wrapping ErrNotRun. An
// entry a cluster refused while a slot moves (TRYAGAIN, MOVED or ASK past
// go-redis' redirects, CLUSTERDOWN: not carried out) is sent again the
// same way after a pause, within ctx's deadline (see the package doc);
// the entries that ran are never sent again. A batch that mixes take.lua
// and fast scripts first makes sure the server has each (SCRIPT EXISTS,
// then SCRIPT LOAD of the missing), until it has found them all and again
// after the backend met NOSCRIPT, so that one script is not refused while
// another runs later requests.
//
// All replies of a server's pipeline are read under the client's
// ReadTimeout (or ctx's deadline): size batches so that their server time
// fits (docs/benchmarks/HISTORY.md gives the server time per decision).
func (b *Backend) TakeBatch(ctx context.Context, reqs []driver.Request) []driver.BatchResult {
	return b.batch(ctx, asRequests(opTake, reqs))
}

// PeekBatch is TakeBatch with Peek for Take (driver.Batcher).
func (b *Backend) PeekBatch(ctx context.Context, reqs []driver.Request) []driver.BatchResult {
	return b.batch(ctx, asRequests(opPeek, reqs))
}

func asRequests(o op, reqs []driver.Request) []request {
	out := make([]request, len(reqs))
	for i, r := range reqs {
		out[i] = request{op: o, Request: r}
	}
	return out
}

// batch carries out reqs, each with its own op, as TakeBatch describes.
// Its errors name the operation: "redis: take batch: …" (or "peek
// batch", or "batch" for mixed ops).
func (b *Backend) batch(ctx context.Context, reqs []request) []driver.BatchResult {
	out := make([]driver.BatchResult, len(reqs))
	if len(reqs) == 0 {
		return out
	}
	name := batchName(reqs)
	e, err := b.deciding(ctx)
	if err != nil {
		for i := range out {
			out[i].Err = fmt.Errorf("redis: %s: %w", name, err)
		}
		return out
	}
	e.batch(ctx, reqs, out)
	for i := range out {
		if out[i].Err != nil {
			out[i].Err = fmt.Errorf("redis: %s: %w", name, out[i].Err)
		}
	}
	return out
}

// batchName names a batch of reqs in errors: "<op> batch" when they
// share their op (TakeBatch, PeekBatch), else "batch".
func batchName(reqs []request) string {
	for _, r := range reqs[1:] {
		if r.op != reqs[0].op {
			return "batch"
		}
	}
	return reqs[0].op.String() + " batch"
}

// scripts carries out reqs in multi-attempt scripts (one attempt per
// script on a cluster) as TakeBatch describes: consecutive requests
// sharing a fast script (fast.go) in scripts of it, the others in
// take.lua's, on a server
// with scripting, and writes each request's outcome to out (len(reqs)),
// its error not yet naming the operation. TakeBatch and coalescing
// (coalesce.go) share it.
func (b *Backend) scripts(ctx context.Context, reqs []request, rep *capability.Report, out []driver.BatchResult) {
	evalFallback := rep.EvalOnly // EVALSHA refused: EVAL in the pipeline
	todo := b.units(reqs, rep, out)
	// A batch mixing scripts first makes sure the server has them all
	// (SCRIPT EXISTS, then SCRIPT LOAD of the missing; on a cluster, every
	// master): otherwise one the server never ran would meet NOSCRIPT
	// while units of another ran, and its units could not be sent again
	// (a later request on the same subject may have run). A batch of one
	// script meets NOSCRIPT, if at all, in every unit, and all are sent
	// again.
	if !evalFallback {
		fss := make([]*fastScript, len(todo))
		for k, u := range todo {
			fss[k] = u.fs
		}
		b.loadScripts(ctx, fss)
	}
	rs := b.resender()
	for noScripts := 0; len(todo) > 0; {
		cmds, acks := b.sendUnitsFor(ctx, todo, reqs, rep, noScripts == batchPasses-1 || evalFallback)
		again, refusals := b.unitReplies(ctx, todo, cmds, reqs, out, noScripts < batchPasses-1)
		b.applyAcks(todo, cmds, acks, reqs, out) // Options.Durability
		if len(again) == 0 {
			break
		}
		if refusals.noScript {
			noScripts++
			if !evalFallback {
				evalFallback = b.reload(ctx, again)
			}
		}
		if refusals.cluster {
			again = b.pauseRefused(ctx, &rs, again, out)
		}
		todo = again
	}
}

// unit is one EVALSHA of a batch: up to batchAttempts requests on one
// server, one on a cluster (each routes by its own slot).
type unit struct {
	idx  []int       // indices in reqs
	tags []string    // their hash tags
	fs   *fastScript // the fast script all of them run, or nil: take.lua
	// refused is the cluster's refusal of its latest send (retry.go), or nil.
	refused error
	call
}

// units groups reqs into units: consecutive requests sharing a fast
// script, the others in take.lua's. A request that cannot be encoded gets
// its error in out.
func (b *Backend) units(reqs []request, rep *capability.Report, out []driver.BatchResult) []unit {
	_, single := b.c.(*goredis.Client)
	per := 1
	if single {
		per = batchAttempts
	}
	var (
		todo []unit
		enc  encoder
		cur  unit
	)
	flush := func() {
		if len(cur.idx) > 0 {
			cur.call = enc.done()
			todo = append(todo, cur)
		}
		enc, cur = encoder{}, unit{}
	}
	enc.size(b, reqs, rep, per)
	now := b.opts.Clock.Now()
	for i := range reqs {
		req := &reqs[i]
		var tag string
		if a, ok := b.attempt(req, rep); ok {
			if len(cur.idx) > 0 && cur.fs != a.s {
				flush()
			}
			cur.fs = a.s
			enc.addFast(a)
			tag = driver.HashTag(a.keys[0])
		} else {
			if cur.fs != nil {
				flush()
			}
			if err := b.add(&enc, req.op, req.Request, now, rep); err != nil {
				out[i].Err = err
				continue
			}
			tag = driver.HashTag(enc.keys[len(enc.keys)-1])
		}
		cur.idx = append(cur.idx, i)
		cur.tags = append(cur.tags, tag)
		if len(cur.idx) == per {
			flush()
		}
	}
	flush()
	return todo
}

// sendUnits sends every unit in one pipeline, by EVAL when eval, else
// EVALSHA, and returns their commands (answered).
func (b *Backend) sendUnits(ctx context.Context, todo []unit, eval bool) []noRetryCmd {
	cmds := b.unitCmds(ctx, todo, eval)
	pipe := b.c.Pipeline()
	for k := range cmds {
		_ = pipe.Process(ctx, cmds[k])
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	return cmds
}

// unitCmds returns the commands of the units: EVAL when eval, else
// EVALSHA.
func (b *Backend) unitCmds(ctx context.Context, todo []unit, eval bool) []noRetryCmd {
	cmds := make([]noRetryCmd, len(todo))
	for k := range todo {
		u := &todo[k]
		script, src, _ := b.scriptOf(u.fs)
		if eval {
			u.args[0], u.args[1] = "eval", src
		} else {
			u.args[0], u.args[1] = "evalsha", script.Hash()
		}
		u.args[2] = len(u.keys)
		cmds[k] = noRetryCmd{goredis.NewCmd(ctx, u.args...)}
	}
	return cmds
}

// unitReplies writes the outcome of every unit to out, and returns, in
// order, the units to send again and the refusals among them: those
// answered NOSCRIPT (retry: a later pass remains) and those the cluster
// refused (refusalOf: clusterRefused; each unit's refusal is kept in
// its refused, for Backend.pauseRefused).
//
// A refused unit is sent again only if every later unit with one of its
// hash tags was refused too: then nothing after it on those subjects
// ran, and order is kept.
func (b *Backend) unitReplies(ctx context.Context, todo []unit, cmds []noRetryCmd, reqs []request, out []driver.BatchResult, retry bool) ([]unit, unitRefusals) {
	var (
		again    []unit
		refusals unitRefusals
	)
	ran := map[string]bool{} // hash tags with a later unit that may have run
	for k := len(todo) - 1; k >= 0; k-- {
		u := todo[k]
		v, err := cmds[k].Result()
		later := false
		for _, t := range u.tags {
			later = later || ran[t]
		}
		why := refusalOf(err)
		if why == noScript {
			b.noScripts.Add(1) // scripts found before may be gone (loadScripts)
		}
		u.refused = nil
		switch {
		case err == nil:
			for _, t := range u.tags {
				ran[t] = true
			}
			b.unitResults(u, v, reqs, out)
		case why == noScript && retry && !later:
			refusals.noScript = true
			again = append(again, u)
		case why == clusterRefused && !later:
			reloadOnNoReply(ctx, b.c, err) // CLUSTERDOWN: the slot may have a new master
			refusals.cluster, u.refused = true, err
			again = append(again, u)
		default:
			if why != mayHaveRun && later {
				err = fmt.Errorf("%w: %w (%w)", ErrNotRun, errReordered, err)
			} else {
				reloadOnNoReply(ctx, b.c, err)
			}
			for _, t := range u.tags {
				ran[t] = true // a lost reply may have run
			}
			for _, i := range u.idx {
				out[i].Err = err
			}
		}
	}
	slices.Reverse(again)
	return again, refusals
}

// unitResults decodes the reply v of unit u (one attempt's, or an array
// of them) into out.
func (b *Backend) unitResults(u unit, v any, reqs []request, out []driver.BatchResult) {
	replies := []any{v}
	var err error
	if len(u.idx) > 1 {
		if replies, err = replyArray(v); err == nil && len(replies) != len(u.idx) {
			err = fmt.Errorf("reply: want %d attempts, got %d", len(u.idx), len(replies))
		}
	}
	for a, i := range u.idx {
		if err != nil {
			out[i].Err = err
			continue
		}
		res, err := b.finish(reqs[i].op, reqs[i].Request, u.attempts[a], replies[a])
		if err != nil {
			out[i].Err = err
		} else {
			out[i].Result = res
		}
	}
}

// reload loads, on every server (ClusterClient: every shard), each script
// the units again met NOSCRIPT; it reports whether a load failed (then EVAL
// in the pipeline).
func (b *Backend) reload(ctx context.Context, again []unit) (evalFallback bool) {
	loaded := map[*fastScript]bool{}
	for _, u := range again {
		if loaded[u.fs] {
			continue
		}
		loaded[u.fs] = true
		_, src, _ := b.scriptOf(u.fs)
		if err := b.c.ScriptLoad(ctx, src).Err(); err != nil {
			evalFallback = true
		}
	}
	return evalFallback
}

// scriptOf returns what a unit of fast script fs runs (take.lua for nil):
// the script, its source and the mark of its presence on the server
// (loadScripts).
func (b *Backend) scriptOf(fs *fastScript) (*goredis.Script, string, *atomic.Uint64) {
	if fs == nil {
		return takeScript, lua.Take, &b.takeThere
	}
	return fs.script, fs.src, &fs.there
}

// loadScripts makes sure the server has every script the units of a batch
// run (their fast scripts, nil for take.lua) when they are not all the
// same: one SCRIPT EXISTS, then SCRIPT LOAD of each missing, unless every
// one of them was found or loaded since the backend last met NOSCRIPT
// (Backend.noScripts). Errors are left to the pipeline (NOSCRIPT is
// handled there).
func (b *Backend) loadScripts(ctx context.Context, fss []*fastScript) {
	var (
		srcs   []string
		hashes []string
		marks  []*atomic.Uint64
		seen   = map[*fastScript]bool{}
	)
	gen := b.noScripts.Load()
	stale := false
	for _, f := range fss {
		if seen[f] {
			continue
		}
		seen[f] = true
		script, src, mark := b.scriptOf(f)
		srcs, hashes, marks = append(srcs, src), append(hashes, script.Hash()), append(marks, mark)
		stale = stale || mark.Load() != gen+1
	}
	if len(hashes) < 2 || !stale {
		return
	}
	ok, err := b.c.ScriptExists(ctx, hashes...).Result()
	if err != nil || len(ok) != len(hashes) {
		return
	}
	for i, there := range ok {
		if there || b.c.ScriptLoad(ctx, srcs[i]).Err() == nil {
			marks[i].Store(gen + 1)
		}
	}
}
