package policystore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// memoryStore is a store on a fresh memory backend with a fake clock.
func memoryStore(t *testing.T) (*memory.Backend, *fakeclock.Clock) {
	t.Helper()
	clock := fakeclock.New(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	return memory.New(&memory.Options{Clock: clock}), clock
}

const (
	fileV1 = `policies:
  - name: push
    rules:
      - {name: daily, algorithm: fixed_window, limit: 50, window: 24h, by: [user]}
      - {name: minute, algorithm: sliding_window, limit: 5, window: 1m, by: [user]}
`
	// daily: identity change; minute: limit change.
	fileV2 = `policies:
  - name: push
    rules:
      - {name: daily, algorithm: sliding_log, limit: 40, window: 24h, by: [user]}
      - {name: minute, algorithm: sliding_window, limit: 4, window: 1m, by: [user]}
`
	// minute: re-keyed.
	fileRekey = `policies:
  - name: push
    rules:
      - {name: daily, algorithm: sliding_log, limit: 40, window: 24h, by: [user]}
      - {name: minute, algorithm: sliding_window, limit: 4, window: 1m, by: [user, app]}
`
)

func mustApply(t *testing.T, s *policystore.Store, src string, confirm bool) policystore.Version {
	t.Helper()
	ctx := context.Background()
	plan, err := s.Plan(ctx, []byte(src))
	if err != nil {
		t.Fatalf("Plan = %v", err)
	}
	plan.ConfirmRekey = confirm
	v, err := s.Apply(ctx, plan, "alice", "test")
	if err != nil {
		t.Fatalf("Apply = %v", err)
	}
	return v
}

func ruleNamed(t *testing.T, p *sdk.Policy, name string) sdk.Rule {
	t.Helper()
	for _, r := range p.Rules() {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("policy %s has no rule %s", p.Name(), name)
	return sdk.Rule{}
}

// runStoreLifecycle applies, changes, re-keys and rolls back on s.
func runStoreLifecycle(t *testing.T, s *policystore.Store) {
	ctx := context.Background()
	plan, err := s.Plan(ctx, []byte(fileV1))
	if err != nil {
		t.Fatalf("Plan(v1) = %v", err)
	}
	if plan.Base != 0 || plan.Version != 1 || !strings.Contains(plan.String(), "the store is empty") {
		t.Errorf("Plan(v1) = base %d version %d:\n%s", plan.Base, plan.Version, plan)
	}
	v1, err := s.Apply(ctx, plan, "alice", "first")
	if err != nil || v1.Number != 1 || v1.By != "alice" || v1.Reason != "first" || v1.At.IsZero() {
		t.Fatalf("Apply(v1) = %+v, %v", v1, err)
	}

	plan, err = s.Plan(ctx, []byte(fileV2))
	if err != nil {
		t.Fatalf("Plan(v2) = %v", err)
	}
	text := plan.String()
	for _, want := range []string{
		"plan: version 2 (against version 1)",
		"rule daily: identity changed: algorithm fixed_window → sliding_log, limit 50 → 40; carries conservatively",
		"rule minute: modified: limit 5 → 4; carries exactly",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Plan(v2).String() lacks %q:\n%s", want, text)
		}
	}
	v2, err := s.Apply(ctx, plan, "bob", "tighter")
	if err != nil || v2.Number != 2 {
		t.Fatalf("Apply(v2) = %+v, %v", v2, err)
	}
	cur, err := s.Version(ctx, 0)
	if err != nil || cur.Number != 2 || string(cur.Source) != fileV2 {
		t.Fatalf("Version(0) = %d %q, %v, want version 2 with its source", cur.Number, cur.Source, err)
	}
	ps, err := cur.Policies()
	if err != nil {
		t.Fatalf("Policies() = %v", err)
	}
	if d, m := ruleNamed(t, ps[0], "daily"), ruleNamed(t, ps[0], "minute"); d.Epoch != 2 || m.Epoch != 0 {
		t.Errorf("version 2 epochs: daily %d, minute %d, want 2, 0", d.Epoch, m.Epoch)
	}

	// A re-keying plan needs confirmation; nothing is stored without it.
	plan, err = s.Plan(ctx, []byte(fileRekey))
	if err != nil {
		t.Fatalf("Plan(rekey) = %v", err)
	}
	if got := plan.Rekeyed(); len(got) != 1 || got[0] != "push/minute" || !strings.Contains(plan.String(), "re-keyed") {
		t.Errorf("Plan(rekey).Rekeyed() = %q:\n%s", got, plan)
	}
	if _, err := s.Apply(ctx, plan, "carol", "rekey"); !errors.Is(err, policystore.ErrRekeyNotConfirmed) {
		t.Errorf("Apply(rekey, unconfirmed) = %v, want ErrRekeyNotConfirmed", err)
	}
	if cur, _ := s.Version(ctx, 0); cur.Number != 2 {
		t.Errorf("after a refused apply the store is at %d, want 2", cur.Number)
	}
	plan.ConfirmRekey = true
	if v, err := s.Apply(ctx, plan, "carol", "rekey"); err != nil || v.Number != 3 {
		t.Fatalf("Apply(rekey, confirmed) = %+v, %v", v, err)
	}

	// Rollback to version 1: minute is re-keyed back, so Rollback refuses
	// it unconfirmed; confirmed, a new version 4, daily back to its
	// version 1 identity under a new epoch, seeded from version 2's rule.
	if _, err := s.Rollback(ctx, 1, "dave", ""); !errors.Is(err, policystore.ErrRekeyNotConfirmed) {
		t.Fatalf("Rollback(1) = %v, want ErrRekeyNotConfirmed (minute is re-keyed back)", err)
	}
	plan, err = s.PlanRollback(ctx, 1)
	if err != nil {
		t.Fatalf("PlanRollback(1) = %v", err)
	}
	plan.ConfirmRekey = true
	v4, err := s.Apply(ctx, plan, "dave", "rollback to version 1")
	if err != nil || v4.Number != 4 || string(v4.Source) != fileV1 {
		t.Fatalf("Apply(rollback) = %+v, %v", v4, err)
	}
	ps, err = v4.Policies()
	if err != nil {
		t.Fatalf("Policies() = %v", err)
	}
	if d := ruleNamed(t, ps[0], "daily"); d.Epoch != 4 || d.Algorithm != driver.FixedWindow {
		t.Errorf("rolled back daily = epoch %d %v, want epoch 4 fixed_window", d.Epoch, d.Algorithm)
	}

	hs, err := s.History(ctx, 0)
	if err != nil || len(hs) != 4 {
		t.Fatalf("History(0) = %d entries, %v, want 4", len(hs), err)
	}
	for i, want := range []struct {
		n  int64
		by string
	}{{4, "dave"}, {3, "carol"}, {2, "bob"}, {1, "alice"}} {
		if hs[i].Number != want.n || hs[i].By != want.by || hs[i].Err != nil {
			t.Errorf("History()[%d] = %d by %s (%v), want %d by %s", i, hs[i].Number, hs[i].By, hs[i].Err, want.n, want.by)
		}
	}
	if hs, _ := s.History(ctx, 2); len(hs) != 2 || hs[0].Number != 4 {
		t.Errorf("History(2) = %d entries, want 2, newest first", len(hs))
	}
	if _, err := s.Version(ctx, 9); !errors.Is(err, driver.ErrNoPolicyVersion) {
		t.Errorf("Version(9) = %v, want ErrNoPolicyVersion", err)
	}
}

func TestStoreLifecycleMemory(t *testing.T) {
	b, clock := memoryStore(t)
	runStoreLifecycle(t, policystore.New(b, policystore.WithClock(clock)))
}

// TestStoreConflict: two plans made against one version; the second
// apply fails with ErrVersionConflict and stores nothing.
func TestStoreConflict(t *testing.T) {
	ctx := context.Background()
	b, _ := memoryStore(t)
	s := policystore.New(b)
	mustApply(t, s, fileV1, false)
	p1, err := s.Plan(ctx, []byte(fileV2))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.Plan(ctx, []byte(fileV1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, p1, "a", ""); err != nil {
		t.Fatalf("Apply(p1) = %v", err)
	}
	_, err = s.Apply(ctx, p2, "b", "")
	if !errors.Is(err, driver.ErrVersionConflict) || !strings.Contains(err.Error(), "plan again") {
		t.Errorf("Apply(p2) = %v, want ErrVersionConflict saying to plan again", err)
	}
	if cur, _ := s.Version(ctx, 0); cur.Number != 2 || string(cur.Source) != fileV2 {
		t.Errorf("store at %d, want 2 with p1's source", cur.Number)
	}
}

func TestStoreApplyChecksAuthorAndReason(t *testing.T) {
	ctx := context.Background()
	b, _ := memoryStore(t)
	s := policystore.New(b)
	plan, err := s.Plan(ctx, []byte(fileV1))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ by, reason, want string }{
		{strings.Repeat("a", driver.MaxOverrideByLen+1), "", "by is 65 bytes, more than 64"},
		{"a", strings.Repeat("r", driver.MaxOverrideReasonLen+1), "reason is 257 bytes, more than 256"},
		{"a", "two\nlines", "reason holds a control character"},
	} {
		if _, err := s.Apply(ctx, plan, tc.by, tc.reason); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Apply(by %q, reason %q) = %v, want %q", tc.by, tc.reason, err, tc.want)
		}
	}
	if v, err := s.Version(ctx, 0); err == nil {
		t.Errorf("Version(0) = %d after refused applies, want an empty store", v.Number)
	}
}

func TestStorePlanRefusesInvalid(t *testing.T) {
	b, _ := memoryStore(t)
	s := policystore.New(b)
	for _, tc := range []struct{ name, src, want string }{
		{"unknown key", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 5, window: 1m, by: [u], shadw: true}\n", `line 4: invalid policy: unknown key "shadw"`},
		{"bad limit", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 1.5, window: 1m, by: [u]}\n", "line 4"},
		{"empty", "", "no policies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Plan(context.Background(), []byte(tc.src))
			if !errors.Is(err, sdk.ErrInvalidPolicy) && !errors.Is(err, sdk.ErrInvalidRule) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Plan = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestStoreUnknownDocument: a version some other program stored is
// refused clearly by Version and listed by History with its error.
func TestStoreUnknownDocument(t *testing.T) {
	ctx := context.Background()
	b, _ := memoryStore(t)
	s := policystore.New(b)
	if _, err := s.PutPolicies(ctx, 0, driver.PolicyVersion{Document: []byte(`{"format":"other/v2"}`), By: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Version(ctx, 1); !errors.Is(err, policystore.ErrUnknownFormat) || !strings.Contains(err.Error(), `"other/v2"`) {
		t.Errorf("Version(1) = %v, want ErrUnknownFormat naming other/v2", err)
	}
	hs, err := s.History(ctx, 0)
	if err != nil || len(hs) != 1 || !errors.Is(hs[0].Err, policystore.ErrUnknownFormat) || hs[0].By != "x" {
		t.Errorf("History = %+v, %v, want the entry with its error", hs, err)
	}
	// Applying over it is possible, confirmed: every rule starts afresh.
	plan, err := s.Plan(ctx, []byte(fileV1))
	if err != nil {
		t.Fatalf("Plan over an unknown document = %v", err)
	}
	if got := plan.Rekeyed(); len(got) != 2 || !strings.Contains(plan.String(), "the current version 1 does not load") {
		t.Errorf("Plan over an unknown document: Rekeyed() = %q:\n%s", got, plan)
	}
	if _, err := s.Apply(ctx, plan, "a", ""); !errors.Is(err, policystore.ErrRekeyNotConfirmed) {
		t.Errorf("Apply(unconfirmed) = %v, want ErrRekeyNotConfirmed", err)
	}
	plan.ConfirmRekey = true
	if v, err := s.Apply(ctx, plan, "a", ""); err != nil || v.Number != 2 {
		t.Errorf("Apply(confirmed) = %d, %v, want version 2", v.Number, err)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLiveFollowsAndKeepsWhatLoads(t *testing.T) {
	ctx := context.Background()
	b, _ := memoryStore(t)
	s := policystore.New(b)
	if _, err := s.Watch(ctx, policystore.WatchOptions{}); !errors.Is(err, driver.ErrNoPolicyVersion) {
		t.Errorf("Watch(empty store) = %v, want ErrNoPolicyVersion", err)
	}
	mustApply(t, s, fileV1, false)
	var changes atomic.Int64
	errs := make(chan error, 10)
	live, err := s.Watch(ctx, policystore.WatchOptions{
		Poll:     time.Hour, // notifications only
		OnChange: func(sn *policystore.Snapshot) { changes.Store(sn.Version) },
		OnError:  func(err error) { errs <- err },
	})
	if err != nil {
		t.Fatalf("Watch = %v", err)
	}
	defer live.Close()
	if cur := live.Current(); cur.Version != 1 || cur.Policy("push") == nil || cur.Policy("nope") != nil || cur.By != "alice" {
		t.Fatalf("Current() = %+v, want version 1 with policy push", cur)
	}
	mustApply(t, s, fileV2, false)
	waitFor(t, "version 2 reaches the watcher", 10*time.Second, func() bool { return live.Current().Version == 2 })
	if changes.Load() != 2 {
		t.Errorf("OnChange saw %d, want 2", changes.Load())
	}
	if d := ruleNamed(t, live.Current().Policy("push"), "daily"); d.Limit != 40 || d.Epoch != 2 {
		t.Errorf("version 2's daily = %+v, want limit 40 epoch 2", d)
	}

	// A version that does not load is reported once; version 2 is kept.
	if _, err := s.PutPolicies(ctx, 2, driver.PolicyVersion{Document: []byte(`{"format":"freqcap.policies/v1","source":"policies: [{name: p}]"}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, policystore.ErrUnreadableVersion) || !strings.Contains(err.Error(), "version 2 is kept: policystore: version 3 does not load") {
			t.Errorf("OnError(%v), want version 3 reported, version 2 kept", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("version 3's failure was not reported")
	}
	if live.Current().Version != 2 {
		t.Errorf("Current().Version = %d, want 2 kept", live.Current().Version)
	}
	mustApply(t, s, fileV1, true)
	waitFor(t, "version 4 reaches the watcher", 10*time.Second, func() bool { return live.Current().Version == 4 })
	if err := live.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

// deaf is a store whose notifications never come: the poll alone must
// bring versions.
type deaf struct{ storeBackend }

// storeBackend is a backend that keeps policies (memory, Redis).
type storeBackend interface {
	driver.Backend
	driver.PolicyStore
	driver.PolicyHeader
}

func (deaf) WatchPolicies(ctx context.Context, key string) (<-chan int64, error) {
	return make(chan int64), nil
}

func TestLivePollsWithoutNotifications(t *testing.T) {
	b, _ := memoryStore(t)
	s := policystore.New(deaf{b})
	mustApply(t, s, fileV1, false)
	live, err := s.Watch(context.Background(), policystore.WatchOptions{Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	mustApply(t, s, fileV2, false)
	waitFor(t, "version 2 by polling", 10*time.Second, func() bool { return live.Current().Version == 2 })
}

// TestLiveStopsWithContext: the Live's goroutine ends with its context.
func TestLiveStopsWithContext(t *testing.T) {
	b, _ := memoryStore(t)
	s := policystore.New(b)
	mustApply(t, s, fileV1, false)
	ctx, cancel := context.WithCancel(context.Background())
	live, err := s.Watch(ctx, policystore.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	done := make(chan struct{})
	go func() { live.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the context ended")
	}
	if live.Current().Version != 1 {
		t.Errorf("Current() after Close = %d, want 1 kept", live.Current().Version)
	}
}

// TestStoreLimitAcrossLogLine: a sliding window's limit raised across
// driver.LogLine (its state moves from an exact log to cells) is applied as
// a transition: a person at the old limit stays capped by the old rule
// for its window, where a bare limit change would have started afresh
// and admitted up to the new limit at once.
func TestStoreLimitAcrossLogLine(t *testing.T) {
	ctx := context.Background()
	b, clock := memoryStore(t)
	lim := sdk.New(b)
	s := policystore.New(b, policystore.WithClock(clock))
	const file = `policies:
  - name: push
    rules:
      - {name: minute, algorithm: sliding_window, limit: %d, window: 1m, by: [user]}
`
	policy := func(v policystore.Version) *sdk.Policy {
		ps, err := v.Policies()
		if err != nil || len(ps) != 1 {
			t.Fatalf("Policies() = %v, %v", ps, err)
		}
		return ps[0]
	}
	p1 := policy(mustApply(t, s, fmt.Sprintf(file, 5), false))
	who := sdk.Subject{"user": "u1"}
	for i := range 5 {
		if d, err := lim.Allow(ctx, p1, who); err != nil || !d.Allowed {
			t.Fatalf("Allow %d under limit 5 = %+v, %v", i+1, d, err)
		}
	}
	plan, err := s.Plan(ctx, []byte(fmt.Sprintf(file, 500)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), "old rule stays enforced") {
		t.Errorf("Plan(limit 5 → 500) does not make it a transition:\n%s", plan)
	}
	v2, err := s.Apply(ctx, plan, "alice", "raise")
	if err != nil {
		t.Fatal(err)
	}
	p2 := policy(v2)
	clock.Advance(time.Second)
	d, err := lim.Allow(ctx, p2, who)
	if err != nil || d.Allowed {
		t.Fatalf("Allow after raising the limit across LogLine = %+v, %v; want denied by the old rule (5 of 5 within its minute)", d, err)
	}
	clock.Advance(time.Minute)
	if d, err := lim.Allow(ctx, p2, who); err != nil || !d.Allowed {
		t.Fatalf("Allow a minute later = %+v, %v; want allowed under the new limit", d, err)
	}
}
