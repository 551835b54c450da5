package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Durability asks the backend to wait, after each decision that may
// consume (Take and Reserve, single, batched or coalesced), until Replicas
// replicas have acknowledged its writes, or Timeout has passed: WAIT
// numreplicas timeout (or, with AOF, WAITAOF 0 numreplicas timeout) sent
// right after the script, in the same round trip on the same connection
// (on a cluster, to the master that ran the script). One WAIT covers a
// whole coalesced or batched script, one per master for a batch on a
// cluster. Peek and Inspect consume nothing and wait for nothing.
//
// Each decision says what came of the wait: driver.Result.Durable and
// Replicas (sdk.Decision.Durable and Replicas). When fewer replicas
// acknowledged in time, the decision stands as made, and counted on the
// master, and says it is not Durable; it is never turned into an error,
// which would invite a retry that counts it twice. A caller that needs
// certainty may treat an allowed decision that is not Durable as it
// wishes (e.g. as a denial: the units stay consumed, under-admission).
//
// What it guarantees: with Replicas r, a Durable decision's writes
// reached r replicas, so a failover that promotes one of them keeps its
// count (Sentinel and Cluster promote the most advanced replica they
// can reach). What it does not: Redis stays asynchronous and is not made
// strongly consistent. A decision that is not Durable may be lost by a
// failover; with more replicas than r, a failover may promote one that
// lacks a Durable decision's writes; a replica that acknowledged and then
// restarted without persistence forgets them (AOF narrows that). Commit
// and Cancel of a reservation do not wait. docs/DESIGN.md, "Replication
// and failover", says more.
//
// The wait never outlasts the call: each WAIT's timeout is the smaller of
// Timeout, half of what remains of ctx's deadline and half of the
// client's ReadTimeout (at least 1 ms), so the script's reply arrives
// before either runs out. It applies where scripts run, on a
// *goredis.Client (standalone or Sentinel) or a *goredis.ClusterClient;
// on a *goredis.Ring, and in bare mode (no scripting), decisions do not
// wait and are never Durable (Describe says so). On a cluster, a single
// decision whose slot moved (MOVED or ASK: the script did not run) is
// sent again through the cluster client's redirects without waiting, so
// it is not Durable; a batch's attempt refused so fails with the
// redirect's error (nothing consumed), and the client reloads its slot
// map.
type Durability struct {
	// Replicas is how many replicas must acknowledge each decision's
	// writes. Default 0: no wait, replication stays asynchronous.
	Replicas int
	// Timeout bounds each wait (see above for how the call's deadline cuts
	// it). Default: DefaultDurabilityTimeout.
	Timeout time.Duration
	// AOF waits with WAITAOF (Redis >= 7.2) for the replicas to have
	// written the decision to their append-only file and fsynced it, so
	// that a replica that restarts also keeps it (their appendonly must be
	// on, or they never acknowledge). The master's own fsync is not waited
	// for (numlocal 0). Where some master lacks WAITAOF (COMMAND INFO,
	// probed at the first decision after each detection) the backend waits
	// with WAIT instead, and Describe says so. Default: off (WAIT).
	AOF bool
}

// DefaultDurabilityTimeout is Durability.Timeout when it is 0. A replica on
// the same network acknowledges within a round trip or two: the wait runs
// to its timeout only when fewer replicas than asked are connected and
// keeping up.
const DefaultDurabilityTimeout = 100 * time.Millisecond

// durableState is a Backend's knowledge for Durability: whether its
// masters have WAITAOF, per capability report.
type durableState struct {
	aof atomic.Pointer[aofProbe]
}

// aofProbe is the WAITAOF probe of one capability report.
type aofProbe struct {
	rep *capability.Report
	has bool
}

// ack is the outcome of one WAIT: the replicas that acknowledged (0 when
// the wait failed). The zero ack is "no wait".
type ack struct {
	sent bool
	n    int
}

// waits reports whether a decision of op o waits for replicas.
func (b *Backend) waits(o op) bool {
	return b.opts.Durability.Replicas > 0 && (o == opTake || o == opReserve)
}

// apply writes a to res, a decision that waited (driver.Result.Durable).
func (a ack) apply(res *driver.Result, want int) {
	if !a.sent || res.Replayed {
		return
	}
	res.Replicas = a.n
	res.Durable = a.n >= want
}

// waitNode returns the client whose connection a decision on key runs on,
// to pipeline the script and WAIT there, and its read timeout; nil when
// the client is of a kind the option does not apply to (a Ring).
func (b *Backend) waitNode(ctx context.Context, key string) (*goredis.Client, time.Duration, error) {
	switch c := b.c.(type) {
	case *goredis.Client:
		return c, c.Options().ReadTimeout, nil
	case *goredis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, 0, err
		}
		return n, c.Options().ReadTimeout, nil
	}
	return nil, 0, nil
}

// waitCmd returns the WAIT (or, with aof, WAITAOF) to send after a
// script under ctx on a client of read timeout rt (Durability).
func (b *Backend) waitCmd(ctx context.Context, rt time.Duration, aof bool) noRetryCmd {
	d := b.opts.Durability.Timeout
	if d <= 0 {
		d = DefaultDurabilityTimeout
	}
	if rt > 0 {
		d = min(d, rt/2)
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)/2)
	}
	ms := max(1, d.Milliseconds()) // 0 would wait for ever
	if aof {
		return noRetryCmd{goredis.NewCmd(ctx, "waitaof", 0, b.opts.Durability.Replicas, ms)}
	}
	return noRetryCmd{goredis.NewCmd(ctx, "wait", b.opts.Durability.Replicas, ms)}
}

// ackOf reads a WAIT reply (the replicas that acknowledged) or a WAITAOF
// reply ([local, replicas]). A failed wait (an error reply, a lost
// reply) acknowledges nothing: the decision stands, not Durable.
func ackOf(w noRetryCmd) ack {
	v, err := w.Result()
	if err != nil {
		return ack{sent: true}
	}
	if a, ok := v.([]any); ok && len(a) == 2 {
		v = a[1]
	}
	n, err := replyInt(v)
	if err != nil || n < 0 {
		return ack{sent: true}
	}
	return ack{sent: true, n: int(n)}
}

// waitAOF reports whether waits use WAITAOF: Durability.AOF and every
// master of rep has it (COMMAND INFO WAITAOF), probed once per report. A
// failed probe means WAIT, and is probed again at the next decision.
func (b *Backend) waitAOF(ctx context.Context, rep *capability.Report) bool {
	if !b.opts.Durability.AOF {
		return false
	}
	if p := b.dur.aof.Load(); p != nil && p.rep == rep {
		return p.has
	}
	has, err := hasWaitAOF(ctx, b.c)
	if err != nil {
		return false
	}
	b.dur.aof.Store(&aofProbe{rep: rep, has: has})
	return has
}

// hasWaitAOF asks every master whether it knows WAITAOF.
func hasWaitAOF(ctx context.Context, c goredis.UniversalClient) (bool, error) {
	probe := func(ctx context.Context, n *goredis.Client) (bool, error) {
		v, err := n.Do(ctx, "command", "info", "waitaof").Slice()
		if err != nil {
			return false, fmt.Errorf("COMMAND INFO WAITAOF: %w", err)
		}
		return len(v) == 1 && v[0] != nil, nil
	}
	switch c := c.(type) {
	case *goredis.Client:
		return probe(ctx, c)
	case *goredis.ClusterClient:
		var all atomic.Bool
		all.Store(true)
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			has, err := probe(ctx, n)
			if !has {
				all.Store(false)
			}
			return err
		})
		return all.Load(), err
	}
	return false, nil
}

// runFor is run for a decision of op o. When the backend waits for
// replicas after it (Durability), the script and WAIT go in one pipeline
// on one connection (on a cluster, the master of keys' slot), and the
// ack says what came of the wait; else it is run, and the ack is zero.
func (b *Backend) runFor(ctx context.Context, o op, rep *capability.Report, s *goredis.Script, src string, keys []string, args []any) (any, ack, error) {
	if !b.waits(o) {
		v, err := b.run(ctx, s, src, rep.EvalOnly, keys, args)
		return v, ack{}, err
	}
	node, rt, err := b.waitNode(ctx, keys[0])
	if err != nil {
		return nil, ack{}, err
	}
	if node == nil { // a Ring: no wait
		v, err := b.run(ctx, s, src, rep.EvalOnly, keys, args)
		return v, ack{}, err
	}
	aof := b.waitAOF(ctx, rep)
	args[2] = len(keys)
	var (
		v any
		w noRetryCmd
	)
	if !rep.EvalOnly {
		v, w, err = sendWaiting(ctx, node, b.waitCmd(ctx, rt, aof), args, "evalsha", s.Hash())
	}
	if !rep.EvalOnly && isNoScript(err) {
		b.noScripts.Add(1) // scripts found before may be gone (loadScripts)
	}
	if rep.EvalOnly || isNoScript(err) {
		v, w, err = sendWaiting(ctx, node, b.waitCmd(ctx, rt, aof), args, "eval", src)
	}
	if refusalOf(err) == clusterRefused {
		// The cluster refused the script (a slot moving, TRYAGAIN, MOVED or
		// ASK: it did not run): decide through run's re-sends and the
		// cluster client's redirects, without waiting.
		if cc, ok := b.c.(*goredis.ClusterClient); ok {
			cc.ReloadState(ctx)
		}
		v, err = b.run(ctx, s, src, rep.EvalOnly, keys, args)
		return v, ack{}, err
	}
	reloadOnNoReply(ctx, b.c, err)
	if err != nil {
		return nil, ack{}, err
	}
	return v, ackOf(w), nil
}

// sendWaiting sends args as the not-retryable command name script …,
// then w, in one pipeline on node (one connection), and returns the
// script's reply and w answered.
func sendWaiting(ctx context.Context, node *goredis.Client, w noRetryCmd, args []any, name, script string) (any, noRetryCmd, error) {
	args[0], args[1] = name, script
	cmd := noRetryCmd{goredis.NewCmd(ctx, args...)}
	pipe := node.Pipeline()
	_ = pipe.Process(ctx, cmd)
	_ = pipe.Process(ctx, w)
	_, _ = pipe.Exec(ctx) // errors are read per command
	v, err := cmd.Result()
	return v, w, err
}

// sendUnitsFor is sendUnits for units of reqs on a server whose masters
// rep describes. When some unit waits for replicas (Durability), each
// master's units go in one pipeline on one connection followed by one
// WAIT, and acks gives each unit the outcome of its master's wait (nil:
// no wait).
func (b *Backend) sendUnitsFor(ctx context.Context, todo []unit, reqs []request, rep *capability.Report, eval bool) ([]noRetryCmd, []ack) {
	wait := false
	for _, u := range todo {
		for _, i := range u.idx {
			wait = wait || b.waits(reqs[i].op)
		}
	}
	if _, ring := b.c.(*goredis.Ring); !wait || ring {
		return b.sendUnits(ctx, todo, eval), nil // a Ring: no wait
	}
	cmds := b.unitCmds(ctx, todo, eval)
	acks := make([]ack, len(todo))
	aof := b.waitAOF(ctx, rep)
	switch c := b.c.(type) {
	case *goredis.Client:
		all := make([]int, len(todo))
		for k := range all {
			all[k] = k
		}
		a := pipeWaiting(ctx, c, b.waitCmd(ctx, c.Options().ReadTimeout, aof), cmds, all)
		for k := range acks {
			acks[k] = a
		}
	case *goredis.ClusterClient:
		b.clusterWaiting(ctx, c, todo, cmds, acks, aof)
	}
	return cmds, acks
}

// clusterWaiting sends the commands of todo on a cluster, one pipeline
// per master followed by one WAIT, in parallel, each master's units in
// input order, and writes each unit's ack.
func (b *Backend) clusterWaiting(ctx context.Context, c *goredis.ClusterClient, todo []unit, cmds []noRetryCmd, acks []ack, aof bool) {
	byNode := map[*goredis.Client][]int{}
	var nodes []*goredis.Client
	for k, u := range todo {
		n, err := c.MasterForKey(ctx, u.keys[0])
		if err != nil {
			cmds[k].SetErr(err)
			continue
		}
		if _, ok := byNode[n]; !ok {
			nodes = append(nodes, n)
		}
		byNode[n] = append(byNode[n], k)
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			a := pipeWaiting(ctx, n, b.waitCmd(ctx, c.Options().ReadTimeout, aof), cmds, byNode[n])
			for _, k := range byNode[n] {
				acks[k] = a
			}
		})
	}
	wg.Wait()
	for _, cmd := range cmds {
		if refusalOf(cmd.Err()) == clusterRefused {
			c.ReloadState(ctx) // the attempt failed, nothing consumed
			return
		}
	}
}

// pipeWaiting sends cmds[ks] then w in one pipeline on node and returns
// the wait's ack.
func pipeWaiting(ctx context.Context, node *goredis.Client, w noRetryCmd, cmds []noRetryCmd, ks []int) ack {
	pipe := node.Pipeline()
	for _, k := range ks {
		_ = pipe.Process(ctx, cmds[k])
	}
	_ = pipe.Process(ctx, w)
	_, _ = pipe.Exec(ctx) // errors are read per command
	return ackOf(w)
}

// applyAcks gives each decision of a unit answered in this pass that
// waited its ack (acks from sendUnitsFor; nil: none waited).
func (b *Backend) applyAcks(todo []unit, cmds []noRetryCmd, acks []ack, reqs []request, out []driver.BatchResult) {
	if acks == nil {
		return
	}
	for k, u := range todo {
		if cmds[k].Err() != nil {
			continue // not answered: sent again, or failed
		}
		for _, i := range u.idx {
			if out[i].Err == nil && b.waits(reqs[i].op) {
				acks[k].apply(&out[i].Result, b.opts.Durability.Replicas)
			}
		}
	}
}

// durabilityNote says how decisions wait for replicas (Describe), or ""
// when they do not.
func (b *Backend) durabilityNote(scripts bool) string {
	d := b.opts.Durability
	if d.Replicas <= 0 {
		return ""
	}
	_, ring := b.c.(*goredis.Ring)
	if !scripts || ring {
		return "durability: not applied (Options.Durability needs scripting and a standalone, Sentinel or cluster client): decisions do not wait for replicas and are never Durable"
	}
	t := d.Timeout
	if t <= 0 {
		t = DefaultDurabilityTimeout
	}
	how := "WAIT"
	if d.AOF {
		how = "WAITAOF where every master has it (probed at the first decision), else WAIT"
		if p := b.dur.aof.Load(); p != nil && p.has {
			how = "WAITAOF (every master has it)"
		} else if p != nil {
			how = "WAIT (Options.Durability.AOF asked for WAITAOF, which some master lacks: Redis < 7.2)"
		}
	}
	return fmt.Sprintf("durability: each Take and Reserve waits for %d replica(s) to acknowledge its writes, at most %v, with %s in the script's round trip; a decision says whether they did (Durable), and stands either way", d.Replicas, t, how)
}
