package policystore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// Files of TestUnreadableVersionKeepsCounts: hourly caps a person at 15
// (epoch 0 since version 1); daily changed identity in version 2 (epoch
// 2); version 4 adds a rule, so applying it is a change.
const (
	badV1 = `policies:
  - name: push
    rules:
      - {name: hourly, algorithm: sliding_window, limit: 15, window: 1h, by: [user]}
      - {name: daily, algorithm: fixed_window, limit: 50, window: 24h, by: [user]}
`
	badV2 = `policies:
  - name: push
    rules:
      - {name: hourly, algorithm: sliding_window, limit: 15, window: 1h, by: [user]}
      - {name: daily, algorithm: sliding_log, limit: 40, window: 24h, by: [user]}
`
	badV4 = `policies:
  - name: push
    rules:
      - {name: hourly, algorithm: sliding_window, limit: 15, window: 1h, by: [user]}
      - {name: daily, algorithm: sliding_log, limit: 40, window: 24h, by: [user]}
      - {name: weekly, algorithm: fixed_window, limit: 200, window: 168h, by: [user]}
`
)

// storeEnv is one store under test: its Limiter and, on Redis, a client
// to write the store's keys by hand.
type storeEnv struct {
	lim *sdk.Limiter
	st  *policystore.Store // lim's backend's, under lim's prefix
	rdb *goredis.Client    // nil on memory
	key string             // the store's key ("<prefix>:{!policies}")
}

// putRaw writes version n (and the current number n) by hand: on Redis
// the hash fields given (SET and HSET), on memory through PutPolicies.
func (e storeEnv) putRaw(t *testing.T, n int64, fields map[string]string) {
	t.Helper()
	ctx := context.Background()
	if e.rdb == nil {
		if _, err := e.st.PutPolicies(ctx, n-1, driver.PolicyVersion{Document: []byte(fields["doc"]), By: "hand"}); err != nil {
			t.Fatalf("PutPolicies(%d) by hand = %v", n-1, err)
		}
		return
	}
	if len(fields) > 0 {
		if err := e.rdb.HSet(ctx, fmt.Sprintf("%s:v:%d", e.key, n), fields).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.rdb.Set(ctx, e.key, strconv.FormatInt(n, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// rawFields is a version hash as PutPolicies writes it, with doc.
func rawFields(doc string) map[string]string {
	return map[string]string{"doc": doc, "at": strconv.FormatInt(time.Now().UnixMicro(), 10), "by": "hand", "reason": "written by hand"}
}

func memoryEnv(t *testing.T) storeEnv {
	b := memory.New(nil)
	return storeEnv{lim: sdk.New(b), st: policystore.New(b)}
}

func redisEnv(t *testing.T, addr string) storeEnv {
	t.Helper()
	c := goredis.NewClient(testserver.Patient(redis.NewClientOptions(addr)).Simple())
	t.Cleanup(func() { c.Close() })
	prefix := uniquePrefix(t)
	b := redis.New(c, nil)
	return storeEnv{lim: sdk.New(b, sdk.WithPrefix(prefix)), st: policystore.New(b, policystore.WithPrefix(prefix)), rdb: c, key: prefix + ":{!policies}"}
}

// badVersions are the ways version 3 can fail to load, by backend (nil
// env.rdb: those memory can hold).
var badVersions = []struct {
	name      string
	redisOnly bool
	write     func(t *testing.T, e storeEnv)
	want      error // besides ErrUnreadableVersion
}{
	{name: "newer format", write: func(t *testing.T, e storeEnv) {
		e.putRaw(t, 3, rawFields(`{"format":"freqcap.policies/v9","source":"x"}`))
	}, want: policystore.ErrUnknownFormat},
	{name: "not JSON", write: func(t *testing.T, e storeEnv) {
		e.putRaw(t, 3, rawFields("policies: [written by hand]"))
	}, want: policystore.ErrUnknownFormat},
	{name: "invalid policy file", write: func(t *testing.T, e storeEnv) {
		e.putRaw(t, 3, rawFields(`{"format":"freqcap.policies/v1","source":"policies: [{name: p}]"}`))
	}, want: sdk.ErrInvalidPolicy},
	{name: "malformed fields", redisOnly: true, write: func(t *testing.T, e storeEnv) {
		e.putRaw(t, 3, map[string]string{"doc": "x", "at": "yesterday"})
	}, want: driver.ErrMalformedPolicyVersion},
	{name: "oversize", redisOnly: true, write: func(t *testing.T, e storeEnv) {
		e.putRaw(t, 3, rawFields(strings.Repeat("x", policystore.MaxPolicyDocument+1)))
	}, want: policystore.ErrPolicyTooLarge},
	{name: "missing", redisOnly: true, write: func(t *testing.T, e storeEnv) {
		e.putRaw(t, 3, nil) // the number only: a dangling pointer
	}, want: policystore.ErrMissingVersion},
}

// TestUnreadableVersionKeepsCounts: with the store's current version
// unreadable (written by hand or by a newer freqcap, malformed, oversize,
// or missing), on memory and Redis: Version(0) says what it is; a
// follower keeps version 2 and a new one starts from it; a plan (and a
// rollback) is made against version 2, says so, re-keys nothing, and
// applies without confirmation; a person at 15/15 stays denied through
// both.
func TestUnreadableVersionKeepsCounts(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		for _, bv := range badVersions {
			if bv.redisOnly && backend == "memory" {
				continue
			}
			t.Run(backend+"/"+bv.name, func(t *testing.T) {
				var e storeEnv
				if backend == "memory" {
					e = memoryEnv(t)
				} else {
					e = redisEnv(t, redistest.Standalone(t))
				}
				runUnreadable(t, e, bv.write, bv.want)
			})
		}
	}
}

func runUnreadable(t *testing.T, e storeEnv, write func(*testing.T, storeEnv), want error) {
	ctx := context.Background()
	s := e.st
	mustApply(t, s, badV1, false)
	v2 := mustApply(t, s, badV2, false)
	ps, err := v2.Policies()
	if err != nil {
		t.Fatal(err)
	}
	who := sdk.Subject{"user": "u15"}
	for i := range 15 {
		if d, err := e.lim.Allow(ctx, ps[0], who); err != nil || !d.Allowed {
			t.Fatalf("Allow #%d under version 2 = %+v, %v", i+1, d, err)
		}
	}
	denied := func(when string, p *sdk.Policy) {
		t.Helper()
		d, err := e.lim.Allow(ctx, p, who)
		if err != nil || d.Allowed {
			t.Fatalf("%s: Allow at 15/15 = allowed %v, %v; want denied (its counts carried)", when, d.Allowed, err)
		}
	}
	denied("version 2", ps[0])

	errs := make(chan error, 16)
	follower, err := s.Watch(ctx, policystore.WatchOptions{Poll: 10 * time.Millisecond, OnError: func(err error) { errs <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()

	write(t, e)

	// The document of an invalid policy file decodes (its source can be
	// read and edited); its policies do not load.
	if cur, err2 := s.Version(ctx, 0); err2 == nil {
		_, err = cur.Policies()
	} else {
		err = err2
	}
	if !errors.Is(err, policystore.ErrUnreadableVersion) || !errors.Is(err, want) {
		t.Errorf("Version(0) = %v, want ErrUnreadableVersion wrapping %v", err, want)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, policystore.ErrUnreadableVersion) || !strings.Contains(err.Error(), "version 2 is kept") {
			t.Errorf("the follower's OnError(%v), want version 3 unreadable, version 2 kept", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower did not report version 3")
	}
	if got := follower.Current().Version; got != 2 {
		t.Errorf("the follower runs version %d, want 2 kept", got)
	}
	// A follower started now starts from version 2, and says why.
	started := make(chan error, 4)
	late, err := s.Watch(ctx, policystore.WatchOptions{OnError: func(err error) { started <- err }})
	if err != nil {
		t.Fatalf("Watch with version 3 unreadable = %v, want version 2", err)
	}
	defer late.Close()
	if got := late.Current().Version; got != 2 {
		t.Errorf("a new follower runs version %d, want 2", got)
	}
	select {
	case err := <-started:
		if !errors.Is(err, policystore.ErrUnreadableVersion) {
			t.Errorf("the new follower's OnError(%v), want ErrUnreadableVersion", err)
		}
	default:
		t.Error("the new follower did not report that version 3 does not load")
	}

	// Apply over it: planned against version 2, nothing re-keyed.
	plan, err := s.Plan(ctx, []byte(badV4))
	if err != nil {
		t.Fatalf("Plan over an unreadable version 3 = %v", err)
	}
	if plan.Base != 3 || plan.Against != 2 || plan.Version != 4 || len(plan.Rekeyed()) != 0 {
		t.Errorf("Plan = base %d against %d version %d re-keying %q, want 3, 2, 4, none:\n%s", plan.Base, plan.Against, plan.Version, plan.Rekeyed(), plan)
	}
	if txt := plan.String(); !strings.Contains(txt, "version 3") || !strings.Contains(txt, "this plan is made against version 2, the newest version that loads") {
		t.Errorf("Plan.String() does not name version 3 and version 2:\n%s", txt)
	}
	v4, err := s.Apply(ctx, plan, "alice", "replace the unreadable version")
	if err != nil {
		t.Fatalf("Apply (unconfirmed) over an unreadable version = %v, want it stored", err)
	}
	p4, err := v4.Policies()
	if err != nil {
		t.Fatal(err)
	}
	if h, d := ruleNamed(t, p4[0], "hourly"), ruleNamed(t, p4[0], "daily"); h.Epoch != 0 || d.Epoch != 2 {
		t.Errorf("version 4: hourly epoch %d, daily epoch %d; want 0 and 2 (version 2's)", h.Epoch, d.Epoch)
	}
	denied("version 4", p4[0])
	waitFor(t, "the follower at version 4", 10*time.Second, func() bool { return follower.Current().Version == 4 })

	// Rollback over another unreadable version: planned against 4.
	if e.rdb == nil {
		e.putRaw(t, 5, map[string]string{"doc": `{"format":"freqcap.policies/v9"}`})
	} else {
		e.putRaw(t, 5, rawFields(`{"format":"freqcap.policies/v9"}`))
	}
	rb, err := s.PlanRollback(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rb.Base != 5 || rb.Against != 4 || len(rb.Rekeyed()) != 0 {
		t.Errorf("PlanRollback(2) = base %d against %d re-keying %q, want 5, 4, none:\n%s", rb.Base, rb.Against, rb.Rekeyed(), rb)
	}
	v6, err := s.Rollback(ctx, 2, "alice", "")
	if err != nil {
		t.Fatalf("Rollback(2) over an unreadable version = %v", err)
	}
	p6, err := v6.Policies()
	if err != nil {
		t.Fatal(err)
	}
	denied("version 6 (rollback to 2)", p6[0])
	if _, err := s.PlanRollback(ctx, 5); !errors.Is(err, policystore.ErrUnreadableVersion) {
		t.Errorf("PlanRollback(5) to an unreadable version = %v, want ErrUnreadableVersion", err)
	}
}

// TestNoVersionLoads: when no version loads, a plan starts every rule
// afresh and needs confirmation, as before; Watch fails with
// ErrUnreadableVersion.
func TestNoVersionLoads(t *testing.T) {
	ctx := context.Background()
	e := memoryEnv(t)
	e.putRaw(t, 1, map[string]string{"doc": "{}"})
	s := e.st
	if _, err := s.Watch(ctx, policystore.WatchOptions{}); !errors.Is(err, policystore.ErrUnreadableVersion) {
		t.Errorf("Watch = %v, want ErrUnreadableVersion", err)
	}
	plan, err := s.Plan(ctx, []byte(badV1))
	if err != nil {
		t.Fatal(err)
	}
	if plan.Against != 0 || len(plan.Rekeyed()) != 2 {
		t.Errorf("Plan = against %d re-keying %q, want 0 and every rule", plan.Against, plan.Rekeyed())
	}
}

// TestEmptyStoreVersion: Version(0) of an empty store says so.
func TestEmptyStoreVersion(t *testing.T) {
	s := memoryEnv(t).st
	_, err := s.Version(context.Background(), 0)
	if !errors.Is(err, policystore.ErrNoPolicyVersion) || errors.Is(err, policystore.ErrUnreadableVersion) || !strings.Contains(err.Error(), "the policy store is empty (no version applied yet)") {
		t.Errorf("Version(0) of an empty store = %v", err)
	}
}

// countingStore counts the heads and documents a Live reads.
type countingStore struct {
	*memory.Backend
	heads, gets atomic.Int64
}

func (c *countingStore) GetPolicies(ctx context.Context, key string, n int64) (driver.PolicyVersion, error) {
	c.gets.Add(1)
	return c.Backend.GetPolicies(ctx, key, n)
}

func (c *countingStore) PolicyHead(ctx context.Context, key string) (driver.PolicyVersion, error) {
	c.heads.Add(1)
	return c.Backend.PolicyHead(ctx, key)
}

// quietPolls waits for 20 more polls of cs's head, and returns how many
// documents were read meanwhile.
func quietPolls(t *testing.T, cs *countingStore) int64 {
	t.Helper()
	gets, heads := cs.gets.Load(), cs.heads.Load()
	waitFor(t, "20 polls", 20*time.Second, func() bool { return cs.heads.Load() >= heads+20 })
	return cs.gets.Load() - gets
}

// TestLiveReadsOnlyWhatChanged (memory): a follower polling every 5 ms
// reads no document while nothing changes, one per version applied.
func TestLiveReadsOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	cs := &countingStore{Backend: memory.New(nil)}
	s := policystore.New(cs)
	mustApply(t, s, badV1, false)
	l, err := s.Watch(ctx, policystore.WatchOptions{Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := quietPolls(t, cs); got != 0 {
		t.Errorf("the follower read %d documents in 20 polls while nothing changed, want 0", got)
	}
	mustApply(t, s, badV2, false)
	waitFor(t, "version 2", 10*time.Second, func() bool { return l.Current().Version == 2 })
	if got := quietPolls(t, cs); got != 0 {
		t.Errorf("the follower read %d documents in 20 polls after version 2 arrived, want 0", got)
	}
}

// commandCalls reads INFO commandstats: calls per command.
func commandCalls(t *testing.T, c *goredis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		out[name], _ = strconv.ParseInt(n, 10, 64)
	}
	return out
}

// TestLiveReadsOnlyWhatChangedRedis: on a dedicated server, a follower
// polling every 10 ms sends GETs of the version number, and no command
// that reads a document (HGET, HGETALL, HSTRLEN) while nothing changes;
// an oversize document written by hand is refused without being sent.
func TestLiveReadsOnlyWhatChangedRedis(t *testing.T) {
	ctx := context.Background()
	srv := redistest.NewServer(t)
	e := redisEnv(t, srv.Addr())
	s := e.st
	mustApply(t, s, badV1, false)
	l, err := s.Watch(ctx, policystore.WatchOptions{Poll: 10 * time.Millisecond, OnError: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := commandCalls(t, e.rdb)
	var after map[string]int64
	waitFor(t, "20 polls (GETs of the version number)", 20*time.Second, func() bool {
		after = commandCalls(t, e.rdb)
		return after["get"] >= before["get"]+20
	})
	for _, cmd := range []string{"hget", "hgetall", "hstrlen"} {
		if d := after[cmd] - before[cmd]; d != 0 {
			t.Errorf("the follower sent %d %s while nothing changed, want 0", d, strings.ToUpper(cmd))
		}
	}

	// An oversize version 2 written by hand: refused on read, never sent.
	e.putRaw(t, 2, rawFields(strings.Repeat("x", 2*policystore.MaxPolicyDocument)))
	out := func() int64 {
		info, err := e.rdb.Info(ctx, "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_net_output_bytes:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("INFO stats has no total_net_output_bytes")
		return 0
	}
	sent := out()
	if _, err := e.st.GetPolicies(ctx, 2); !errors.Is(err, policystore.ErrPolicyTooLarge) {
		t.Errorf("GetPolicies(oversize) = %v, want ErrPolicyTooLarge", err)
	}
	gets := commandCalls(t, e.rdb)["get"]
	waitFor(t, "20 more polls", 20*time.Second, func() bool { return commandCalls(t, e.rdb)["get"] >= gets+20 })
	if d := out() - sent; d >= policystore.MaxPolicyDocument {
		t.Errorf("the server sent %d bytes after an oversize document was written, want it never sent", d)
	}
	if l.Current().Version != 1 {
		t.Errorf("the follower runs version %d, want 1 kept", l.Current().Version)
	}
}
