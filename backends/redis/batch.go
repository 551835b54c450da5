package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

var _ driver.Batcher = (*Backend)(nil)

// batchPasses bounds the pipelines one TakeBatch sends: the first, and
// up to two more for the entries that met an empty script cache
// (NOSCRIPT): after SCRIPT LOAD with EVALSHA, then with EVAL.
const batchPasses = 3

// errReordered is the error of an entry that met an empty script cache
// (NOSCRIPT, so it was not carried out) while a later request on the same
// hash tag in the same batch was carried out: sending it again now would
// reverse their order, so it is reported instead.
var errReordered = errors.New("not carried out: the script cache was emptied during the batch and a later request on the same subject already ran")

// TakeBatch carries out each of reqs as Take would, in one pipeline of
// EVALSHA per server: on a Redis Cluster, the client's pipeline routes each
// request by the slot of its keys (one hash tag per request) and sends one
// pipeline per master, in parallel, keeping input order within a master,
// so requests on the same subject run in input order. It returns one
// BatchResult per request, in input order.
//
// A request that cannot be encoded fails alone. Entries are never sent
// twice after a lost reply: the commands are marked not retryable, and
// go-redis does not retry a pipeline holding such a command (a MOVED or
// ASK redirect, which the server answers without running the script, is
// followed). Entries answered NOSCRIPT (a restart, a failover, SCRIPT
// FLUSH: not carried out) are sent again after SCRIPT LOAD, in input
// order, unless a later request on the same hash tag already ran (see
// errReordered).
//
// All replies of a server's pipeline are read under the client's
// ReadTimeout (or ctx's deadline): size batches so that their server time
// fits (about 25 µs of script per seed-policy decision standalone and
// 50–60 µs on a cluster sharing 2 cores, as measured on a 2-core machine
// running client and servers together).
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
func (b *Backend) batch(ctx context.Context, reqs []request) []driver.BatchResult {
	out := make([]driver.BatchResult, len(reqs))
	if len(reqs) == 0 {
		return out
	}
	// A failed detection is reported by each entry's prepare below.
	rep, err := b.report(ctx)
	if err == nil && scriptless(rep) { // Take runs bare commands, one by one
		for i, req := range reqs {
			out[i].Result, out[i].Err = b.decide(ctx, req.op, req.Request)
		}
		return out
	}
	evalFallback := err == nil && rep.EvalOnly // EVALSHA refused: EVAL in the pipeline
	type entry struct {
		i   int // index in reqs
		tag string
		call
	}
	todo := make([]entry, 0, len(reqs))
	for i, req := range reqs {
		c, err := b.prepare(ctx, req.op, req.Request)
		if err != nil {
			out[i].Err = fmt.Errorf("redis: take batch: %w", err)
			continue
		}
		todo = append(todo, entry{i: i, tag: driver.HashTag(c.keys[0]), call: c})
	}
	cmds := make([]noRetryCmd, len(todo))
	for pass := 0; len(todo) > 0; pass++ {
		pipe := b.c.Pipeline()
		for k := range todo {
			e := &todo[k]
			if pass == batchPasses-1 || evalFallback {
				e.args[0], e.args[1] = "eval", lua.Take
			} else {
				e.args[0], e.args[1] = "evalsha", takeScript.Hash()
			}
			e.args[2] = len(e.keys)
			cmds[k] = noRetryCmd{goredis.NewCmd(ctx, e.args...)}
			_ = pipe.Process(ctx, cmds[k])
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below

		// An entry answered NOSCRIPT is sent again only if every later
		// entry of its hash tag was answered NOSCRIPT too: then nothing
		// after it on that subject ran, and order is kept.
		var again []entry
		ran := map[string]bool{} // hash tags with a later entry that may have run
		for k := len(todo) - 1; k >= 0; k-- {
			e := todo[k]
			v, err := cmds[k].Result()
			switch {
			case err == nil:
				ran[e.tag] = true
				res, err := b.finish(reqs[e.i].op, reqs[e.i].Request, e.call, v)
				if err != nil {
					out[e.i].Err = fmt.Errorf("redis: take batch: %w", err)
				} else {
					out[e.i].Result = res
				}
			case isNoScript(err) && pass < batchPasses-1 && !ran[e.tag]:
				again = append(again, e)
			case isNoScript(err) && ran[e.tag]:
				out[e.i].Err = fmt.Errorf("redis: take batch: %w (%w)", errReordered, err)
			default:
				ran[e.tag] = true // a lost reply may have run
				reloadOnNoReply(ctx, b.c, err)
				out[e.i].Err = fmt.Errorf("redis: take batch: %w", err)
			}
		}
		if len(again) == 0 {
			break
		}
		for l, r := 0, len(again)-1; l < r; l, r = l+1, r-1 {
			again[l], again[r] = again[r], again[l]
		}
		if !evalFallback {
			// Loads on every server (ClusterClient: every shard).
			if err := b.c.ScriptLoad(ctx, lua.Take).Err(); err != nil {
				evalFallback = true
			}
		}
		todo = again
		cmds = cmds[:len(todo)]
	}
	return out
}
