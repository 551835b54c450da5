package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk/driver"
)

// movable returns a dedicated cluster whose slots the test moves, and a
// backend on it (Options.Coalesce left at its default: a cluster client
// does not coalesce).
func movable(t *testing.T) (*redistest.MovableCluster, *Backend, *goredis.ClusterClient) {
	t.Helper()
	mc := redistest.NewMovableCluster(t)
	c := goredis.NewClusterClient(testserver.Patient(NewClientOptions(mc.Addrs()...)).Cluster())
	t.Cleanup(func() { c.Close() })
	return mc, New(c, nil), c
}

// warmPool opens n connections of c (to each master of a cluster) before
// a load: on this loaded machine, 16 callers dialling at once sometimes
// wait seconds for their first connection, with or without moves.
func warmPool(t *testing.T, c goredis.UniversalClient, n int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cc, ok := c.(*goredis.ClusterClient); ok {
				_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return m.Ping(ctx).Err() })
				return
			}
			_ = c.Ping(ctx).Err()
		}()
	}
	wg.Wait()
}

// reshardUser is one subject of a reshard test and its one rule.
type reshardUser struct {
	s    subject
	rule driver.Rule
	slot int
	// admitted counts the takes answered admitted; unsure those that
	// failed after their deadline (they may have run).
	admitted, unsure atomic.Int64
}

// reshardUsers returns n subjects in distinct slots, each with a fixed
// window of limit per day (a window that cannot roll over during the
// test but for a 1 in 8 000 chance) and the subject's trail: two keys
// per decision, so a migration refuses them with TRYAGAIN while one is
// moved and the other not (or not yet written).
func reshardUsers(t *testing.T, mc *redistest.MovableCluster, prefix string, n int, limit int64) []*reshardUser {
	t.Helper()
	var us []*reshardUser
	seen := map[int]bool{}
	for i := 0; len(us) < n && i < 100*n; i++ {
		s := newSubject(t, fmt.Sprintf("%s%d", prefix, i))
		slot, err := mc.KeySlot(s.trail())
		if err != nil {
			t.Fatal(err)
		}
		if seen[slot] {
			continue
		}
		seen[slot] = true
		us = append(us, &reshardUser{s: s, rule: s.fixed("day", limit, 24*time.Hour), slot: slot})
	}
	if len(us) != n {
		t.Fatalf("found %d subjects in distinct slots, want %d", len(us), n)
	}
	return us
}

// reshardLoad runs call from workers goroutines until calls calls are
// made or within passes, while the users' slots move back and forth
// (redistest.MovableCluster.Shuttle), and returns the moves made. Each
// call gets a deadline of perCall of its own, which the load's end does
// not cut short (a call the test's end cut would be answered after a
// deadline that no caller set).
type reshardLoad struct {
	workers, calls int
	within         time.Duration
	perCall        time.Duration
}

func (l reshardLoad) run(t *testing.T, mc *redistest.MovableCluster, us []*reshardUser, call func(ctx context.Context, rng *rand.Rand) error) int {
	t.Helper()
	slots := make([]int, len(us))
	for i, u := range us {
		slots[i] = u.slot
	}
	return l.runWith(t, func(ctx context.Context) (int, error) {
		return mc.Shuttle(ctx, slots, redistest.ShuttleConfig{Moves: 2000, Hold: time.Millisecond})
	}, call)
}

// runWith is run with mover moving the slots (until its ctx ends) and
// returning its moves.
func (l reshardLoad) runWith(t *testing.T, mover func(context.Context) (int, error), call func(ctx context.Context, rng *rand.Rand) error) int {
	t.Helper()
	ctx, stop := context.WithTimeout(context.Background(), l.within)
	defer stop()
	var (
		moves   int
		moveErr error
		moved   = make(chan struct{})
	)
	go func() {
		defer close(moved)
		moves, moveErr = mover(ctx)
	}()
	var (
		wg    sync.WaitGroup
		n     atomic.Int64
		fails atomic.Int64
	)
	for w := range l.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 38))
			for ctx.Err() == nil && n.Add(1) <= int64(l.calls) {
				if err := call(ctx, rng); err != nil {
					if fails.Add(1) <= 10 {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	stop()
	<-moved
	if moveErr != nil {
		t.Fatalf("moving slots: %v (after %d moves)", moveErr, moves)
	}
	if f := fails.Load(); f > 0 {
		t.Errorf("%d calls failed (the first 10 above)", f)
	}
	return moves
}

// check asserts that each user was admitted at most its limit and that
// its count on Redis is what the callers saw admitted (plus at most the
// calls that failed past their deadline, which may have run).
func checkReshardCounts(t *testing.T, b *Backend, us []*reshardUser) {
	t.Helper()
	for i, u := range us {
		adm, unsure := u.admitted.Load(), u.unsure.Load()
		if adm > u.rule.Limit {
			t.Errorf("user %d: %d takes admitted, limit %d", i, adm, u.rule.Limit)
		}
		res, err := b.Peek(context.Background(), u.s.request(opPeek, 1, u.rule).Request)
		if err != nil {
			t.Fatalf("user %d: Peek: %v", i, err)
		}
		if used := res.Rules[0].Used; used < adm || used > adm+unsure {
			t.Errorf("user %d: used %d on Redis, want %d admitted (+ up to %d that failed past their deadline)", i, used, adm, unsure)
		}
	}
}

// decided records the outcome of one take of u answered at done for a
// call whose deadline was dl, and returns an error for what must not
// happen: an error before the deadline, or an answer after it.
func (u *reshardUser) decided(res driver.Result, err error, dl, done time.Time) error {
	switch {
	case err != nil && done.Before(dl):
		return fmt.Errorf("take: error %.0f ms before the deadline: %w", float64(dl.Sub(done))/1e6, err)
	case err != nil:
		u.unsure.Add(1)
	case done.After(dl):
		return fmt.Errorf("take: answered %v after the deadline", done.Sub(dl))
	case res.Allowed:
		u.admitted.Add(1)
	}
	return nil
}

// TestReshardUnderLoad moves the slots of a handful of subjects back and
// forth between masters (SETSLOT IMPORTING/MIGRATING, MIGRATE key by key,
// SETSLOT NODE) while 12 goroutines take for them: no caller whose
// deadline has not passed gets an error (TRYAGAIN, MOVED, ASK: the
// backend sends those again), none is answered after its deadline, no
// one is admitted over the limit and every count on Redis is exactly the
// takes admitted. Single takes, then batches.
func TestReshardUnderLoad(t *testing.T) {
	mc, b, c := movable(t)
	warmPool(t, c, 12)
	load := reshardLoad{workers: 12, calls: 3000, within: 6 * time.Second, perCall: 3 * time.Second}
	report := func(what string, moves int, resent uint64, calls int) {
		t.Logf("%s: %d slot moves, %d scripts sent again after a refusal, %d calls", what, moves, resent, calls)
		if moves < 2 {
			t.Errorf("%s: %d slot moves: the test moved nothing", what, moves)
		}
		if resent == 0 {
			t.Errorf("%s: no script was refused and sent again: the moves did not meet the load", what)
		}
	}

	t.Run("take", func(t *testing.T) {
		us := reshardUsers(t, mc, "take", 6, 300)
		before := b.resends.count.Load()
		var calls atomic.Int64
		moves := load.run(t, mc, us, func(_ context.Context, rng *rand.Rand) error {
			u := us[rng.IntN(len(us))]
			cctx, cancel := context.WithTimeout(context.Background(), load.perCall)
			defer cancel()
			dl, _ := cctx.Deadline()
			calls.Add(1)
			res, err := b.Take(cctx, u.s.request(opTake, 1, u.rule).Request)
			return u.decided(res, err, dl, time.Now())
		})
		report("take", moves, b.resends.count.Load()-before, int(calls.Load()))
		checkReshardCounts(t, b, us)
	})

	t.Run("batch", func(t *testing.T) {
		us := reshardUsers(t, mc, "batch", 6, 300)
		before := b.resends.count.Load()
		var calls atomic.Int64
		const size = 8
		load := load
		load.calls = 3000 / size
		moves := load.run(t, mc, us, func(_ context.Context, rng *rand.Rand) error {
			cctx, cancel := context.WithTimeout(context.Background(), load.perCall)
			defer cancel()
			dl, _ := cctx.Deadline()
			reqs := make([]driver.Request, size)
			who := make([]*reshardUser, size)
			for i := range reqs {
				who[i] = us[rng.IntN(len(us))]
				reqs[i] = who[i].s.request(opTake, 1, who[i].rule).Request
			}
			calls.Add(size)
			out := b.TakeBatch(cctx, reqs)
			done := time.Now()
			var errs []error
			for i, r := range out {
				if err := who[i].decided(r.Result, r.Err, dl, done); err != nil {
					errs = append(errs, fmt.Errorf("TakeBatch(…)[%d]: %w", i, err))
				}
			}
			return errors.Join(errs...)
		})
		report("batch", moves, b.resends.count.Load()-before, int(calls.Load()))
		checkReshardCounts(t, b, us)
	})
}

// TestReshardDeadline holds a subject's slot in migration (MIGRATING on
// its owner, the keys not moved yet) and takes for it: the script is
// refused (ASK, then TRYAGAIN on the importing master: the subject's
// trail is in neither), sent again until the deadline leaves no time,
// then the call fails before its deadline with an error wrapping
// ErrNotRun and the refusal, having counted nothing; without a deadline
// the resend budget bounds it. Once the slot has moved, takes count
// from where they were.
func TestReshardDeadline(t *testing.T) {
	mc, b, _ := movable(t)
	u := reshardUsers(t, mc, "deadline", 1, 100)[0]
	req := u.s.request(opTake, 1, u.rule).Request
	if _, err := b.Take(context.Background(), req); err != nil { // writes the state key; the trail stays unwritten
		t.Fatalf("Take: %v", err)
	}
	from, err := mc.Owner(u.slot)
	if err != nil {
		t.Fatal(err)
	}
	moved := make(chan error, 1)
	go func() { moved <- mc.MoveSlot(u.slot, (from+1)%3, 1500*time.Millisecond) }()
	eventually(t, 10*time.Second, "slot in migration", func() bool {
		m, err := mc.Migrating(u.slot)
		return err == nil && m
	})

	notRun := func(t *testing.T, what string, err error, dl time.Time) {
		t.Helper()
		done := time.Now()
		if !errors.Is(err, ErrNotRun) || !strings.Contains(err.Error(), "TRYAGAIN") {
			t.Errorf("%s = %v, want an error wrapping ErrNotRun and TRYAGAIN", what, err)
		}
		if !dl.IsZero() && done.After(dl) {
			t.Errorf("%s returned %v after its deadline", what, done.Sub(dl))
		}
	}
	t.Run("take", func(t *testing.T) {
		before := b.resends.count.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		dl, _ := ctx.Deadline()
		_, err := b.Take(ctx, req)
		notRun(t, "Take", err, dl)
		if b.resends.count.Load() == before {
			t.Errorf("Take was not sent again before it failed")
		}
	})
	t.Run("batch", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		dl, _ := ctx.Deadline()
		out := b.TakeBatch(ctx, []driver.Request{req, req})
		for i, r := range out {
			notRun(t, fmt.Sprintf("TakeBatch(…)[%d].Err", i), r.Err, dl)
		}
	})
	t.Run("no deadline", func(t *testing.T) {
		b.resends.budget = 300 * time.Millisecond
		defer func() { b.resends.budget = 0 }()
		start := time.Now()
		_, err := b.Take(context.Background(), req)
		notRun(t, "Take", err, time.Time{})
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Errorf("Take without a deadline took %v, want about the budget (300 ms)", d)
		}
	})
	if err := <-moved; err != nil {
		t.Fatalf("MoveSlot: %v", err)
	}
	res, err := b.Take(context.Background(), req)
	if err != nil {
		t.Fatalf("Take after the move: %v", err)
	}
	checkRule(t, "Take after the move", res.Rules[0], true, 2, 100)
}

// crc16 is Redis Cluster's key hash (CRC16/XMODEM): a hash tag's slot is
// crc16(tag) % 16384.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// TestReshardCoalesced: coalescing applies to a standalone client only,
// and only a cluster refuses scripts this way, so a standalone client is
// pointed at the master of one slot holding every subject, whose move to
// another master is begun and abandoned again and again
// (redistest.MovableCluster.AbandonMove): while it is under way, a
// script naming a key the master lacks (a subject's trail, before its
// first denial) is answered ASK, which a standalone client does not
// follow. 16 goroutines take for 4 subjects, coalesced (Options.Coalesce
// 2, the default) and not (-1): the refused scripts, and only they, are
// sent again (a pipeline of coalesced scripts may have some run and
// others refused, as the move begins between them), so no caller whose
// deadline has not passed gets an error, none is admitted over the limit
// and every count is exact.
func TestReshardCoalesced(t *testing.T) {
	mc := redistest.NewMovableCluster(t)
	// Four subjects in one slot: hash tags of equal CRC16 mod 16384.
	const prefix = "coal-"
	slot := int(crc16(prefix+"0") % 16384)
	tags := []string{prefix + "0"}
	for i := 1; len(tags) < 4 && i < 10_000_000; i++ {
		if v := prefix + strconv.Itoa(i); int(crc16(v)%16384) == slot {
			tags = append(tags, v)
		}
	}
	if len(tags) != 4 {
		t.Fatalf("found %d tags in slot %d, want 4", len(tags), slot)
	}
	if got, err := mc.KeySlot("{" + tags[1] + "}"); err != nil || got != slot {
		t.Fatalf("CLUSTER KEYSLOT of tag %q = %d, %v; want %d (crc16)", tags[1], got, err, slot)
	}
	owner, err := mc.Owner(slot)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		coalesce int
	}{{"coalesced", 2}, {"uncoalesced", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			c := goredis.NewClient(testserver.Patient(NewClientOptions(mc.Addrs()[owner])).Simple())
			defer c.Close()
			// The probe names a key of the slot, which this master serves.
			b := New(c, &Options{Coalesce: tc.coalesce, Detect: capability.Config{ProbeKey: "{" + tags[0] + "}:probe"}})
			if _, err := b.Capabilities(context.Background()); err != nil { // before the moves: the probe key is never written
				t.Fatalf("Capabilities: %v", err)
			}
			warmPool(t, c, 16)
			if (b.co != nil) != (tc.coalesce > 0) {
				t.Fatalf("New(standalone, Coalesce %d): coalescing %v", tc.coalesce, b.co != nil)
			}
			us := make([]*reshardUser, len(tags))
			for i, v := range tags {
				s := subject{base: "fct:{" + v + "}:" + tc.name + ":"}
				us[i] = &reshardUser{s: s, rule: s.fixed("day", 300, 24*time.Hour), slot: slot}
			}
			load := reshardLoad{workers: 16, calls: 2000, within: 6 * time.Second, perCall: 3 * time.Second}
			flap := func(ctx context.Context) (int, error) {
				n := 0
				for ; ctx.Err() == nil && n < 2000; n++ {
					if err := mc.AbandonMove(slot, (owner+1)%3, 3*time.Millisecond); err != nil {
						return n, err
					}
					time.Sleep(2 * time.Millisecond) // the slot stable between two moves
				}
				return n, nil
			}
			var calls atomic.Int64
			moves := load.runWith(t, flap, func(_ context.Context, rng *rand.Rand) error {
				u := us[rng.IntN(len(us))]
				cctx, cancel := context.WithTimeout(context.Background(), load.perCall)
				defer cancel()
				dl, _ := cctx.Deadline()
				calls.Add(1)
				res, err := b.Take(cctx, u.s.request(opTake, 1, u.rule).Request)
				return u.decided(res, err, dl, time.Now())
			})
			resent := b.resends.count.Load()
			t.Logf("%s: %d abandoned moves, %d scripts sent again after a refusal, %d calls", tc.name, moves, resent, calls.Load())
			if resent == 0 {
				t.Errorf("no script was refused and sent again: the moves did not meet the load")
			}
			checkReshardCounts(t, b, us)
		})
	}
}
