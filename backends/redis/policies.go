package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/sdk/driver"
)

var (
	_ driver.PolicyStore  = (*Backend)(nil)
	_ driver.PolicyHeader = (*Backend)(nil)
)

// The policy store's layout, for a store key K that holds a hash tag (the
// sdk's "<prefix>:{!policies}"), so that every key of one store lives in
// one Cluster slot:
//
//	K                 string: the current version number (absent: empty store)
//	K:v:<n>           hash of version n: doc, at (µs since the epoch, the
//	                  server's TIME), by, reason
//	K:watch           the Pub/Sub channel a put publishes the new number on
//
// Every version is kept (documents are small: at most
// driver.MaxPolicyDocument) and never changes once written, so reads need
// no script: a version read after the current number was read is that
// version as applied. A follower polls the current number and its
// version's at (PolicyHead), and reads a document only when they changed,
// after checking its length (HSTRLEN): one larger than
// driver.MaxPolicyDocument (written by hand) is never transferred.

// putPoliciesSrc is the put: compare the current number with prev, write
// the version's hash and the new number, publish it, all in one script.
const putPoliciesSrc = `-- The policy store's put (backends/redis/policies.go).
-- KEYS[1]: the store's current version number (absent: 0)
-- KEYS[2]: the hash of version prev+1
-- ARGV[1]: prev; ARGV[2]: the document; ARGV[3]: by; ARGV[4]: reason;
-- ARGV[5]: the channel to publish the new number on
-- Reply: {1, version, "<at, µs>"} stored; {0, current} when the current
-- version is not prev (nothing stored); an error when version prev+1
-- exists although the current number is prev (a damaged store).
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or -1
local prev = tonumber(ARGV[1])
if cur ~= prev then
  return {0, cur}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('ERR freqcap policy store: version ' .. tostring(prev + 1) .. ' exists but the current version is ' .. tostring(cur))
end
local t = redis.call('TIME')
local at = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('HSET', KEYS[2], 'doc', ARGV[2], 'at', at, 'by', ARGV[3], 'reason', ARGV[4])
redis.call('SET', KEYS[1], tostring(prev + 1))
redis.call('PUBLISH', ARGV[5], tostring(prev + 1))
return {1, prev + 1, at}
`

var putPoliciesScript = goredis.NewScript(putPoliciesSrc)

// watchTimings are a watcher's timings: how long it waits for a message
// before it pings its connection (and, when the pong is still missing
// one such wait later, replaces the connection), and the bounds of its
// back-off while the server is unreachable.
type watchTimings struct {
	ping, backoffMin, backoffMax time.Duration
}

var defaultWatchTimings = watchTimings{ping: 15 * time.Second, backoffMin: 50 * time.Millisecond, backoffMax: time.Second}

// checkPolicyKey refuses a store key without a hash tag: its version keys
// could land in other Cluster slots.
func checkPolicyKey(op, key string) error {
	if driver.HashTag(key) == key {
		return fmt.Errorf("redis: %s: the store key must hold a {hash tag}", op)
	}
	return nil
}

func policyVersionKey(key string, n int64) string { return key + ":v:" + strconv.FormatInt(n, 10) }

func policyChannel(key string) string { return key + ":watch" }

// PutPolicies stores v as version prev+1 of key's store, in one script
// that compares the current number with prev, writes the version (At from
// the server's TIME), sets the new number and PUBLISHes it to the
// store's watchers; when the current version is not prev it stores
// nothing and returns an error wrapping driver.ErrVersionConflict. key
// must hold a hash tag. A Document larger than driver.MaxPolicyDocument
// is refused. The script is never sent twice: after a lost reply the put
// may or may not have happened (GetPolicies tells).
func (b *Backend) PutPolicies(ctx context.Context, key string, prev int64, v driver.PolicyVersion) (driver.PolicyVersion, error) {
	const op = "put policies"
	if err := checkPolicyKey(op, key); err != nil {
		return driver.PolicyVersion{}, err
	}
	if prev < 0 {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: previous version %d is negative", op, prev)
	}
	if err := driver.CheckPolicyDocument(int64(len(v.Document))); err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	keys := []string{key, policyVersionKey(key, prev+1)}
	args := append(keyArgs(keys, 5), prev, v.Document, v.By, v.Reason, policyChannel(key))
	reply, err := b.run(ctx, putPoliciesScript, putPoliciesSrc, false, keys, args)
	if err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	r, ok := reply.([]any)
	if !ok || len(r) < 1 {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: reply %T, want an array", op, reply)
	}
	if stored, _ := r[0].(int64); stored != 1 {
		cur := "unknown"
		if len(r) > 1 {
			if n, ok := r[1].(int64); ok && n >= 0 {
				cur = strconv.FormatInt(n, 10)
			}
		}
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: %w: current version is %s, not %d", op, driver.ErrVersionConflict, cur, prev)
	}
	if len(r) != 3 {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: reply of %d elements, want 3", op, len(r))
	}
	n, ok1 := r[1].(int64)
	at, ok2 := r[2].(string)
	us, err := strconv.ParseInt(at, 10, 64)
	if !ok1 || !ok2 || err != nil || n != prev+1 {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: malformed reply %v", op, r)
	}
	v.Version, v.At = n, time.UnixMicro(us)
	return v, nil
}

// GetPolicies returns version n of key's store (0: the current one): GET
// of the current number (for n = 0), then in one round trip the length of
// the version's document (HSTRLEN) and its other fields (HMGET), then the
// document (HGET) if it is no larger than driver.MaxPolicyDocument (else
// an error wrapping driver.ErrPolicyTooLarge: it is not transferred). It
// returns an error wrapping driver.ErrNoPolicyVersion when the store does
// not hold the version, driver.ErrMalformedPolicyVersion when its fields
// are not the ones PutPolicies writes.
func (b *Backend) GetPolicies(ctx context.Context, key string, n int64) (driver.PolicyVersion, error) {
	const op = "get policies"
	if err := checkPolicyKey(op, key); err != nil {
		return driver.PolicyVersion{}, err
	}
	if n == 0 {
		cur, err := b.currentPolicies(ctx, key)
		if err != nil {
			return driver.PolicyVersion{}, fmt.Errorf("redis: %s: %w", op, err)
		}
		n = cur
	}
	if n < 1 {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: version %d: %w", op, n, driver.ErrNoPolicyVersion)
	}
	vk := policyVersionKey(key, n)
	pipe := b.c.Pipeline()
	size := pipe.HStrLen(ctx, vk, "doc")
	meta := pipe.HMGet(ctx, vk, "at", "by", "reason")
	if _, err := pipe.Exec(ctx); err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	v, err := policyMeta(n, meta.Val())
	if err == nil {
		err = driver.CheckPolicyDocument(size.Val())
	}
	if err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: version %d: %w", op, n, err)
	}
	doc, err := b.c.HGet(ctx, vk, "doc").Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	v.Document = []byte(doc)
	return v, nil
}

// PolicyHead returns key's current version without its document: GET of
// the current number and HMGET of its version's at, by and reason (two
// round trips of a few bytes each, which a follower polls); an error
// wrapping driver.ErrNoPolicyVersion for an empty store. A current number
// whose version hash is missing (deleted by hand), or whose time was
// changed by hand, comes with a zero At.
func (b *Backend) PolicyHead(ctx context.Context, key string) (driver.PolicyVersion, error) {
	const op = "policy head"
	if err := checkPolicyKey(op, key); err != nil {
		return driver.PolicyVersion{}, err
	}
	n, err := b.currentPolicies(ctx, key)
	if err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	if n < 1 {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: %w", op, driver.ErrNoPolicyVersion)
	}
	vals, err := b.c.HMGet(ctx, policyVersionKey(key, n), "at", "by", "reason").Result()
	if err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	v, err := policyMeta(n, vals)
	if err != nil {
		// Missing, or its time changed by hand: the number, which the
		// next put compares with (GetPolicies says what is wrong).
		return driver.PolicyVersion{Version: n}, nil
	}
	return v, nil
}

// policyMeta reads version n's at, by and reason from an HMGET's reply
// (nil fields: absent): driver.ErrNoPolicyVersion when all are absent.
func policyMeta(n int64, vals []any) (driver.PolicyVersion, error) {
	m := make(map[string]string, 3)
	for i, f := range []string{"at", "by", "reason"} {
		if i < len(vals) {
			if s, ok := vals[i].(string); ok {
				m[f] = s
			}
		}
	}
	if len(m) == 0 {
		return driver.PolicyVersion{}, driver.ErrNoPolicyVersion
	}
	return parsePolicyVersion(n, m)
}

// PolicyHistory returns up to max versions of key's store, newest first
// (max <= 0: all of them): the current number, then the versions' hashes
// in pipelines of 64 (one Cluster node: they share a slot).
func (b *Backend) PolicyHistory(ctx context.Context, key string, max int) ([]driver.PolicyVersion, error) {
	const op = "policy history"
	if err := checkPolicyKey(op, key); err != nil {
		return nil, err
	}
	cur, err := b.currentPolicies(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("redis: %s: %w", op, err)
	}
	oldest := int64(1)
	if max > 0 && cur-int64(max)+1 > oldest {
		oldest = cur - int64(max) + 1
	}
	var out []driver.PolicyVersion
	const chunk = 64
	for hi := cur; hi >= oldest; hi -= chunk {
		lo := max64(hi-chunk+1, oldest)
		pipe := b.c.Pipeline()
		cmds := make([]*goredis.MapStringStringCmd, 0, hi-lo+1)
		for n := hi; n >= lo; n-- {
			cmds = append(cmds, pipe.HGetAll(ctx, policyVersionKey(key, n)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("redis: %s: %w", op, err)
		}
		for i, c := range cmds {
			m := c.Val()
			if len(m) == 0 {
				continue // a version deleted by hand: history is what remains
			}
			v, err := parsePolicyVersion(hi-int64(i), m)
			if err != nil {
				// A time changed by hand: listed without it (its
				// document tells whether it loads).
				v = driver.PolicyVersion{Version: hi - int64(i), Document: []byte(m["doc"]), By: m["by"], Reason: m["reason"]}
			}
			out = append(out, v)
		}
	}
	return out, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// currentPolicies reads key's current version number (0: empty store).
func (b *Backend) currentPolicies(ctx context.Context, key string) (int64, error) {
	s, err := b.c.Get(ctx, key).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: the current version number is %q", driver.ErrMalformedPolicyVersion, truncateValue(s))
	}
	return n, nil
}

// truncateValue shortens a stored value written by hand for an error.
func truncateValue(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// parsePolicyVersion reads version n from its hash's fields.
func parsePolicyVersion(n int64, m map[string]string) (driver.PolicyVersion, error) {
	us, err := strconv.ParseInt(m["at"], 10, 64)
	if err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("%w: version %d: its time (at) is %q", driver.ErrMalformedPolicyVersion, n, truncateValue(m["at"]))
	}
	return driver.PolicyVersion{
		Version:  n,
		Document: []byte(m["doc"]),
		At:       time.UnixMicro(us),
		By:       m["by"],
		Reason:   m["reason"],
	}, nil
}

// WatchPolicies subscribes to key's channel and returns a channel that
// receives the store's current version number (read with GET) after the
// subscription is confirmed, after every message on the channel and after
// every resubscription: a watcher that lost its connection (a server
// restart, a killed connection, a Sentinel failover) reconnects with
// back-off (50 ms to 1 s) and catches up at once. An idle connection is
// pinged every 15 s, and replaced when the pong has not come 15 s later
// (a connection dead without a word, behind a lost route or a NAT). Sends
// never block: the channel holds one number, the latest. Numbers are sent
// only when the store holds a version (> 0). On a Cluster, the
// subscription is on one node and PUBLISH reaches it from any.
//
// It owns one goroutine and one connection per call, both released, and
// the channel closed, when ctx is done. It returns an error (and starts
// nothing) when the first subscription is not confirmed.
func (b *Backend) WatchPolicies(ctx context.Context, key string) (<-chan int64, error) {
	return b.watchPolicies(ctx, key, defaultWatchTimings)
}

// subscribePolicies subscribes to key's channel and waits up to wait for
// the confirmation.
func (b *Backend) subscribePolicies(ctx context.Context, key string, wait time.Duration) (*goredis.PubSub, error) {
	ps := b.c.Subscribe(ctx, policyChannel(key))
	first, err := ps.ReceiveTimeout(ctx, wait)
	if err == nil {
		if _, ok := first.(*goredis.Subscription); !ok {
			err = fmt.Errorf("first reply %T, want a subscription", first)
		}
	}
	if err != nil {
		_ = ps.Close()
		return nil, err
	}
	return ps, nil
}

func (b *Backend) watchPolicies(ctx context.Context, key string, tm watchTimings) (<-chan int64, error) {
	const op = "watch policies"
	if err := checkPolicyKey(op, key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redis: %s: %w", op, err)
	}
	ps, err := b.subscribePolicies(ctx, key, tm.ping)
	if err != nil {
		return nil, fmt.Errorf("redis: %s: subscribe: %w", op, err)
	}
	w := &policyWatcher{b: b, key: key, tm: tm, ch: make(chan int64, 1)}
	w.ps.Store(ps)
	// Closing the subscription ends a blocked receive. The loop checks
	// ctx after each replacement, so a subscription stored after this ran
	// is closed too.
	stop := context.AfterFunc(ctx, func() { _ = w.ps.Load().Close() })
	go func() {
		defer close(w.ch)
		defer stop()
		defer func() { _ = w.ps.Load().Close() }()
		w.run(ctx)
	}()
	return w.ch, nil
}

// policyWatcher is one WatchPolicies: its subscription (replaced when it
// stops answering) and its channel.
type policyWatcher struct {
	b   *Backend
	key string
	tm  watchTimings
	ps  atomic.Pointer[goredis.PubSub]
	ch  chan int64
}

// run is a watcher's loop: it delivers the current number when one is
// due (after a subscription or a message), retrying the read until it
// succeeds, until ctx is done.
func (w *policyWatcher) run(ctx context.Context) {
	due := true // the subscription was just confirmed
	pinged := false
	backoff := w.tm.backoffMin
	for ctx.Err() == nil {
		if due {
			if n, err := w.b.currentPolicies(ctx, w.key); err == nil {
				due = false
				if n > 0 {
					offer(w.ch, n)
				}
			}
		}
		wait := w.tm.ping
		if due {
			wait = backoff // retry the read soon
		}
		ps := w.ps.Load()
		msg, err := ps.ReceiveTimeout(ctx, wait)
		if ctx.Err() != nil {
			return
		}
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			backoff = min(2*backoff, w.tm.backoffMax)
			if due {
				continue
			}
			if pinged {
				// The pong is overdue: the connection is dead without a
				// word. Subscribe anew (the confirmation makes a read due).
				w.replace(ctx)
				pinged = false
				continue
			}
			pinged = ps.Ping(ctx) == nil // a broken connection fails here and is replaced
		case err != nil:
			// No connection (the server is down or refusing): wait, then
			// let the next receive dial again.
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, w.tm.backoffMax)
		default:
			pinged = false // the connection answers
			switch msg.(type) {
			case *goredis.Subscription, *goredis.Message:
				due = true
				backoff = w.tm.backoffMin
			}
		}
	}
}

// replace closes the watcher's subscription and opens another (which
// dials, subscribes and is confirmed on its next receives).
func (w *policyWatcher) replace(ctx context.Context) {
	_ = w.ps.Load().Close()
	w.ps.Store(w.b.c.Subscribe(ctx, policyChannel(w.key)))
	if ctx.Err() != nil {
		_ = w.ps.Load().Close()
	}
}

// offer puts n in ch without blocking, replacing an unread older number.
// The caller is ch's only sender.
func offer(ch chan int64, n int64) {
	select {
	case ch <- n:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	select {
	case ch <- n:
	default:
	}
}
