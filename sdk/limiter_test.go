package sdk_test

import (
	"context"
	"errors"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// fakeBackend records requests and answers with result (fakes are for
// translation tests; behaviour is tested against backends/memory). It
// implements Take, Peek and Inspect (and Reserve, but no Settle: it is no
// driver.Reserver).
type fakeBackend struct {
	mu     sync.Mutex
	reqs   []sent
	result func(driver.Request) (driver.Result, error)
}

// sent is a request a fake backend got, with the operation it was sent to.
type sent struct {
	op string // "take", "peek", "reserve" or "inspect"
	driver.Request
}

func (f *fakeBackend) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	return f.record("take", req)
}

func (f *fakeBackend) Peek(ctx context.Context, req driver.Request) (driver.Result, error) {
	return f.record("peek", req)
}

func (f *fakeBackend) Reserve(ctx context.Context, req driver.Request) (driver.Result, error) {
	return f.record("reserve", req)
}

func (f *fakeBackend) Inspect(ctx context.Context, req driver.Request) (driver.Result, error) {
	return f.record("inspect", req)
}

func (f *fakeBackend) record(op string, req driver.Request) (driver.Result, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, sent{op, req})
	f.mu.Unlock()
	if f.result != nil {
		return f.result(req)
	}
	res := driver.Result{Allowed: true, Now: fakeNow, Rules: make([]driver.RuleResult, len(req.Rules))}
	for i, r := range req.Rules {
		res.Rules[i] = driver.RuleResult{Allowed: true, Used: req.Cost, Limit: r.Limit, Remaining: r.Limit - req.Cost}
	}
	if op == "reserve" {
		res.ReservationID = req.ReservationID
	}
	return res, nil
}

func (f *fakeBackend) last(t *testing.T) sent {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("backend got no request")
	}
	return f.reqs[len(f.reqs)-1]
}

// fullBackend adds the optional interfaces.
type fullBackend struct {
	fakeBackend
	settled []string
	reset   []driver.Request
}

func (f *fullBackend) Commit(ctx context.Context, key, id string) error {
	f.settled = append(f.settled, key+" "+id+" commit")
	return nil
}

func (f *fullBackend) Cancel(ctx context.Context, key, id string) error {
	f.settled = append(f.settled, key+" "+id+" cancel")
	return nil
}

func (f *fullBackend) Reset(ctx context.Context, req driver.Request) error {
	f.reset = append(f.reset, req)
	return nil
}

func (f *fullBackend) Describe(ctx context.Context) (driver.Description, error) {
	return driver.Description{Name: "fake"}, nil
}

var fakeNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func pushPolicy(t *testing.T, opts ...sdk.PolicyOption) *sdk.Policy {
	t.Helper()
	p, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingLog("content-59s", 2, 59*time.Second).By("user", "content"),
		sdk.GCRA("burst", 30, time.Minute, 14).By("user"),
	}, opts...)
	if err != nil {
		t.Fatalf("NewPolicy(push) = %v", err)
	}
	return p
}

func TestAllowRequest(t *testing.T) {
	f := &fakeBackend{}
	p := pushPolicy(t, sdk.WithTrail(7, time.Hour))
	lim := sdk.New(f, sdk.WithPrefix("app"))
	d, err := lim.Take(context.Background(), p, sdk.Attempt{Subject: sdk.Subject{"user": "u:1", "content": "c{1}", "extra": "ignored"}, Cost: 3})
	if err != nil {
		t.Fatalf("Take(…) = %v", err)
	}
	req := f.last(t)
	if req.op != "take" || req.Cost != 3 || req.Policy != "push" {
		t.Errorf("request op, Cost, Policy = %v, %d, %q, want take, 3, push", req.op, req.Cost, req.Policy)
	}
	if req.TrailKey != "app:{u%3A1}:push:!t" || req.TrailMax != 7 || req.TrailTTL != time.Hour {
		t.Errorf("request trail = %q, %d, %v, want app:{u%%3A1}:push:!t, 7, 1h", req.TrailKey, req.TrailMax, req.TrailTTL)
	}
	if req.ReservationKey != "app:{u%3A1}:push:!h" || req.ReservationID != "" {
		t.Errorf("request reservation key, id = %q, %q, want app:{u%%3A1}:push:!h and no id", req.ReservationKey, req.ReservationID)
	}
	if len(req.Rules) != 3 {
		t.Fatalf("request has %d rules, want 3", len(req.Rules))
	}
	want := []driver.Rule{
		{Name: "recv-1m", Algorithm: driver.SlidingWindow, Limit: 15, Window: time.Minute, SubWindows: 10},
		{Name: "content-59s", Algorithm: driver.SlidingLog, Limit: 2, Window: 59 * time.Second},
		{Name: "burst", Algorithm: driver.GCRA, Limit: 30, Window: time.Minute, Burst: 14},
	}
	keys := []string{`^app:\{u%3A1\}:push:recv-1m\.[a-z2-7]{6}$`, `^app:\{u%3A1\}:push:content-59s\.[a-z2-7]{6}:c%7B1%7D$`, `^app:\{u%3A1\}:push:burst\.[a-z2-7]{6}$`}
	groups := []string{`^app:\{u%3A1\}:push:=$`, `^app:\{u%3A1\}:push:=content:c%7B1%7D$`, `^app:\{u%3A1\}:push:=$`}
	for i, r := range req.Rules {
		if !regexp.MustCompile(keys[i]).MatchString(r.Key) {
			t.Errorf("rule %d key = %q, want match %s", i, r.Key, keys[i])
		}
		if !regexp.MustCompile(groups[i]).MatchString(r.Group) {
			t.Errorf("rule %d group = %q, want match %s", i, r.Group, groups[i])
		}
		r.Key, r.Group = "", ""
		if r != want[i] {
			t.Errorf("rule %d = %+v, want %+v", i, r, want[i])
		}
	}
	if !d.Allowed || d.Policy != "push" || !d.At.Equal(fakeNow) || len(d.Rules) != 3 || d.Denied != nil || d.RetryAfter != 0 {
		t.Errorf("Take(…) = %+v, want allowed at %v with 3 rules", d, fakeNow)
	}
	if got := ownKeys(lim, p, sdk.Subject{"user": "u:1", "content": "c{1}"}); !slices.Equal(got, append([]string{req.Rules[0].Key, req.Rules[1].Key, req.Rules[2].Key}, req.TrailKey, req.ReservationKey)) {
		t.Errorf("KeyLayout(…) = %q, want the request's keys", got)
	}
	if got := setKeys(lim, p, sdk.Subject{"user": "u:1", "content": "c{1}"}); !slices.Equal(got, []string{req.Rules[0].Group, req.Rules[1].Group, req.Rules[2].Group}) {
		t.Errorf("KeyLayout(…) sets = %q, want the request's groups", got)
	}
}

func TestDecisionTranslation(t *testing.T) {
	at := fakeNow.Add(time.Second)
	f := &fakeBackend{result: func(req driver.Request) (driver.Result, error) {
		return driver.Result{Allowed: false, Now: at, NonAtomic: true, Rules: []driver.RuleResult{
			{Allowed: false, Used: 15, Limit: 15, Remaining: 0, ResetAfter: time.Minute, RetryAfter: 6 * time.Second},
			{Allowed: true, Used: 1, Limit: 2, Remaining: 1, ResetAfter: 59 * time.Second},
			{Allowed: false, Used: 15, Limit: 15, Remaining: 0, ResetAfter: 30 * time.Second, RetryAfter: 10 * time.Second},
		}}, nil
	}}
	d, err := sdk.New(f).Allow(context.Background(), pushPolicy(t), sdk.Subject{"user": "u", "content": "c"})
	if err != nil {
		t.Fatalf("Allow(…) = %v", err)
	}
	if d.Allowed || !slices.Equal(d.Denied, []string{"recv-1m", "burst"}) || d.RetryAfter != 10*time.Second ||
		d.CostTooHigh || !d.NonAtomic || !d.At.Equal(at) || d.Degraded {
		t.Errorf("Allow(…) = %+v, want denied by recv-1m and burst, retry 10s, non-atomic, at %v", d, at)
	}
	want := sdk.RuleDecision{Rule: "content-59s", Algorithm: driver.SlidingLog, Allowed: true, Used: 1, Limit: 2, Remaining: 1, ResetAfter: 59 * time.Second}
	if d.Rules[1] != want {
		t.Errorf("Allow(…).Rules[1] = %+v, want %+v", d.Rules[1], want)
	}

	f.result = func(req driver.Request) (driver.Result, error) {
		return driver.Result{Now: at, Rules: []driver.RuleResult{
			{Allowed: true, Used: 1, Limit: 15, Remaining: 14},
			{Allowed: false, Limit: 2, Remaining: 2, CostTooHigh: true},
			{Allowed: false, Used: 15, Limit: 15, RetryAfter: time.Second},
		}}, nil
	}
	d, err = sdk.New(f).Take(context.Background(), pushPolicy(t), sdk.Attempt{Subject: sdk.Subject{"user": "u", "content": "c"}, Cost: 3})
	if err != nil || !d.CostTooHigh || d.RetryAfter != time.Second || !slices.Equal(d.Denied, []string{"content-59s", "burst"}) {
		t.Errorf("Take(…, cost 3) = %+v, %v, want cost too high, retry 1s, denied by content-59s and burst", d, err)
	}

	f.result = func(req driver.Request) (driver.Result, error) {
		return driver.Result{Allowed: true, Now: at, Rules: []driver.RuleResult{{Allowed: true}}}, nil
	}
	if _, err := sdk.New(f).Allow(context.Background(), pushPolicy(t), sdk.Subject{"user": "u", "content": "c"}); err == nil {
		t.Error("Allow(…) with a short backend result = nil error, want one")
	}
}

func TestOps(t *testing.T) {
	f := &fullBackend{}
	p := pushPolicy(t)
	s := sdk.Subject{"user": "u", "content": "c"}
	lim := sdk.New(f)
	ctx := context.Background()

	if _, err := lim.Peek(ctx, p, sdk.Attempt{Subject: s, Cost: 2}); err != nil {
		t.Fatal(err)
	}
	if req := f.last(t); req.op != "peek" || req.Cost != 2 {
		t.Errorf("Peek sent op, Cost = %v, %d, want peek, 2", req.op, req.Cost)
	}

	d, res, err := lim.Reserve(ctx, p, sdk.Attempt{Subject: s, Cost: 2}, time.Minute)
	if err != nil || !d.Allowed || res == nil {
		t.Fatalf("Reserve(…) = %+v, %v, %v, want allowed with a reservation", d, res, err)
	}
	req := f.last(t)
	if req.op != "reserve" || req.Cost != 2 || req.ReservationTTL != time.Minute || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(req.ReservationID) || res.ID() != req.ReservationID {
		t.Errorf("Reserve sent %+v (reservation id %q), want reserve, cost 2, ttl 1m, a 16-hex reservation id", req, res.ID())
	}
	if err := res.Commit(ctx); err != nil {
		t.Errorf("Commit = %v", err)
	}
	if err := res.Cancel(ctx); err != nil {
		t.Errorf("Cancel = %v", err)
	}
	if want := []string{req.ReservationKey + " " + req.ReservationID + " commit", req.ReservationKey + " " + req.ReservationID + " cancel"}; !slices.Equal(f.settled, want) {
		t.Errorf("settled = %q, want %q", f.settled, want)
	}
	_, res2, _ := lim.Reserve(ctx, p, sdk.Attempt{Subject: s}, time.Minute)
	if res2.ID() == res.ID() {
		t.Errorf("two reservations share id %q", res.ID())
	}

	ins, err := lim.Admin().Inspect(ctx, p, sdk.Subject{"user": "u"})
	if err != nil {
		t.Fatal(err)
	}
	req = f.last(t)
	if req.op != "inspect" || req.Cost != 1 || len(req.Rules) != 2 || req.TrailKey == "" {
		t.Errorf("Inspect sent %+v, want inspect, cost 1, 2 rules, a trail key", req)
	}
	if !slices.Equal(ins.Skipped, []string{"content-59s"}) || len(ins.Rules) != 2 || ins.Rules[1].Rule != "burst" || ins.Policy != "push" {
		t.Errorf("Inspect(user only) = %+v, want rules recv-1m, burst and content-59s skipped", ins)
	}

	if err := lim.Admin().Reset(ctx, p, sdk.Subject{"user": "u"}); err != nil {
		t.Fatal(err)
	}
	if r := f.reset[0]; len(r.Rules) != 2 || r.ReservationKey != req.ReservationKey {
		t.Errorf("Reset sent %+v, want 2 rules and the reservation key", r)
	}
	if desc, err := lim.Admin().Describe(ctx); err != nil || desc.Name != "fake" {
		t.Errorf("Describe() = %+v, %v, want fake", desc, err)
	}
}

func TestUnsupported(t *testing.T) {
	lim := sdk.New(&fakeBackend{})
	p := pushPolicy(t)
	s := sdk.Subject{"user": "u", "content": "c"}
	ctx := context.Background()
	// A backend with Take alone: no peeks, no inspection.
	bare := sdk.New(takeFunc(func(ctx context.Context, req driver.Request) (driver.Result, error) {
		return driver.Result{}, errors.New("unused")
	}))
	if _, err := bare.Peek(ctx, p, sdk.Attempt{Subject: s}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Peek(…) without a driver.Peeker = %v, want %v", err, errors.ErrUnsupported)
	}
	if r := bare.PeekBatch(ctx, p, []sdk.Attempt{{Subject: s}}); !errors.Is(r[0].Err, errors.ErrUnsupported) {
		t.Errorf("PeekBatch(…) without a driver.Peeker = %v, want %v", r[0].Err, errors.ErrUnsupported)
	}
	if _, err := bare.Admin().Inspect(ctx, p, s); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Inspect(…) without a driver.Inspector = %v, want %v", err, errors.ErrUnsupported)
	}
	_, _, err := lim.Reserve(ctx, p, sdk.Attempt{Subject: s}, time.Minute)
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reserve(…) = %v, want %v", err, errors.ErrUnsupported)
	}
	if err := lim.Admin().Reset(ctx, p, s); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reset(…) = %v, want %v", err, errors.ErrUnsupported)
	}
	if _, err := lim.Admin().Describe(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Describe() = %v, want %v", err, errors.ErrUnsupported)
	}
}

func TestInvalidInput(t *testing.T) {
	f := &fullBackend{}
	lim := sdk.New(f)
	p := pushPolicy(t)
	ctx := context.Background()
	const secret = "secret-user-id"
	long := strings.Repeat("x", sdk.MaxValueLen+1)
	tests := []struct {
		name string
		p    *sdk.Policy
		s    sdk.Subject
		n    int64
		want error
		msg  string // substring of the error
	}{
		{"nil policy", nil, sdk.Subject{"user": secret}, 1, sdk.ErrInvalidPolicy, ""},
		{"zero policy", &sdk.Policy{}, sdk.Subject{"user": secret}, 1, sdk.ErrInvalidPolicy, ""},
		{"nil subject", p, nil, 1, sdk.ErrInvalidSubject, ""},
		{"missing shard", p, sdk.Subject{"content": secret}, 1, sdk.ErrInvalidSubject, ""},
		{"missing other", p, sdk.Subject{"user": secret}, 1, sdk.ErrInvalidSubject, ""},
		{"empty value", p, sdk.Subject{"user": "", "content": secret}, 1, sdk.ErrInvalidSubject, ""},
		{"long value", p, sdk.Subject{"user": secret, "content": long}, 1, sdk.ErrInvalidSubject, ""},
		{"negative cost", p, sdk.Subject{"user": secret, "content": "c"}, -5, sdk.ErrInvalidCost, ""},
		{"cost above MaxLimit", p, sdk.Subject{"user": secret, "content": "c"}, driver.MaxLimit + 1, sdk.ErrInvalidCost, "cost must be <= 1125899906842624 (MaxLimit)"},
		{"max int64 cost", p, sdk.Subject{"user": secret, "content": "c"}, math.MaxInt64, sdk.ErrInvalidCost, "cost must be <= 1125899906842624 (MaxLimit)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("%s(…) = %v, want %v containing %q", op, err, tc.want, tc.msg)
				}
				if err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), long)) {
					t.Errorf("%s(…) = %v, which leaks a subject value", op, err)
				}
			}
			_, err := lim.Take(ctx, tc.p, sdk.Attempt{Subject: tc.s, Cost: tc.n})
			check("Take", err)
			_, err = lim.Peek(ctx, tc.p, sdk.Attempt{Subject: tc.s, Cost: tc.n})
			check("Peek", err)
			_, _, err = lim.Reserve(ctx, tc.p, sdk.Attempt{Subject: tc.s, Cost: tc.n}, time.Minute)
			check("Reserve", err)
			_, err = lim.Wait(ctx, tc.p, sdk.Attempt{Subject: tc.s, Cost: tc.n})
			check("Wait", err)
		})
	}
	if len(f.reqs) != 0 {
		t.Errorf("backend got %d requests for invalid input, want 0", len(f.reqs))
	}
	// Inspect and Reset need only the shard dimensions.
	for _, s := range []sdk.Subject{nil, {"content": "c"}, {"user": ""}} {
		if _, err := lim.Admin().Inspect(ctx, p, s); !errors.Is(err, sdk.ErrInvalidSubject) {
			t.Errorf("Inspect(%v) = %v, want %v", s, err, sdk.ErrInvalidSubject)
		}
		if err := lim.Admin().Reset(ctx, p, s); !errors.Is(err, sdk.ErrInvalidSubject) {
			t.Errorf("Reset(%v) = %v, want %v", s, err, sdk.ErrInvalidSubject)
		}
	}
	if _, err := lim.Admin().Inspect(ctx, nil, sdk.Subject{"user": "u"}); !errors.Is(err, sdk.ErrInvalidPolicy) {
		t.Errorf("Inspect(nil policy) = %v, want %v", err, sdk.ErrInvalidPolicy)
	}
	if _, _, err := lim.Reserve(ctx, p, sdk.Attempt{Subject: sdk.Subject{"user": "u", "content": "c"}}, 0); err == nil {
		t.Error("Reserve(…, ttl 0) = nil error, want one")
	}
	if _, _, err := lim.Reserve(ctx, p, sdk.Attempt{Subject: sdk.Subject{"user": "u", "content": "c"}}, driver.MaxWindow+1); err == nil || !strings.Contains(err.Error(), "(MaxWindow)") {
		t.Errorf("Reserve(…, ttl MaxWindow+1) = %v, want an error naming MaxWindow", err)
	}
	nilLim := sdk.New(nil)
	a := sdk.Attempt{Subject: sdk.Subject{"user": "u", "content": "c"}}
	for name, call := range map[string]func() error{
		"Allow":   func() error { _, err := nilLim.Allow(ctx, p, a.Subject); return err },
		"Peek":    func() error { _, err := nilLim.Peek(ctx, p, a); return err },
		"Reserve": func() error { _, _, err := nilLim.Reserve(ctx, p, a, time.Minute); return err },
		"Inspect": func() error { _, err := nilLim.Admin().Inspect(ctx, p, a.Subject); return err },
	} {
		if err := call(); err == nil {
			t.Errorf("New(nil).%s(…) = nil error, want one", name)
		}
	}
}

// errBackend fails every call.
type errBackend struct{ err error }

func (e errBackend) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	return driver.Result{}, e.err
}

func (e errBackend) Peek(ctx context.Context, req driver.Request) (driver.Result, error) {
	return e.Take(ctx, req)
}

func (e errBackend) Reserve(ctx context.Context, req driver.Request) (driver.Result, error) {
	return e.Take(ctx, req)
}

func (e errBackend) Inspect(ctx context.Context, req driver.Request) (driver.Result, error) {
	return e.Take(ctx, req)
}

func TestFailurePolicy(t *testing.T) {
	boom := errors.New("connection refused")
	clock := fakeclock.New(fakeNow)
	s := sdk.Subject{"user": "u", "content": "c"}
	ctx := context.Background()

	t.Run("closed", func(t *testing.T) {
		var events []sdk.Event
		lim := sdk.New(errBackend{boom}, sdk.WithClock(clock), sdk.WithObserver(func(e sdk.Event) { events = append(events, e) }))
		d, err := lim.Allow(ctx, pushPolicy(t), s)
		if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "sdk: take: ") || d.Allowed {
			t.Errorf("Allow(…) = %+v, %v, want a denied zero Decision and an error wrapping %v", d, err, boom)
		}
		if len(events) != 1 || !errors.Is(events[0].Err, boom) || events[0].Op != "take" {
			t.Errorf("events = %+v, want one take event with the error", events)
		}
		// Each error names the operation that failed.
		a := sdk.Attempt{Subject: s}
		for _, tc := range []struct {
			op  string
			err error
		}{
			{"take", func() error { _, err := lim.Take(ctx, pushPolicy(t), a); return err }()},
			{"peek", func() error { _, err := lim.Peek(ctx, pushPolicy(t), a); return err }()},
			{"wait", func() error { _, err := lim.Wait(ctx, pushPolicy(t), a); return err }()},
			{"inspect", func() error { _, err := lim.Admin().Inspect(ctx, pushPolicy(t), s); return err }()},
			{"peek batch", lim.PeekBatch(ctx, pushPolicy(t), []sdk.Attempt{a})[0].Err},
			{"take batch", lim.TakeBatch(ctx, pushPolicy(t), []sdk.Attempt{a})[0].Err},
		} {
			if !errors.Is(tc.err, boom) || !strings.HasPrefix(tc.err.Error(), "sdk: "+tc.op+": ") {
				t.Errorf("%s: error %v, want \"sdk: %s: …\" wrapping %v", tc.op, tc.err, tc.op, boom)
			}
		}
	})
	t.Run("open", func(t *testing.T) {
		var events []sdk.Event
		lim := sdk.New(errBackend{boom}, sdk.WithClock(clock), sdk.WithObserver(func(e sdk.Event) { events = append(events, e) }))
		p := pushPolicy(t, sdk.WithFailOpen())
		d, err := lim.Allow(ctx, p, s)
		if err != nil || !d.Allowed || !d.Degraded || !errors.Is(d.Err, boom) || !d.At.Equal(fakeNow) || d.Policy != "push" {
			t.Errorf("Allow(…) = %+v, %v, want allowed, degraded, Err %v, At %v", d, err, boom, fakeNow)
		}
		if len(events) != 1 || !events[0].Decision.Degraded || !errors.Is(events[0].Err, boom) {
			t.Errorf("events = %+v, want one degraded event", events)
		}
		if d, err := lim.Wait(ctx, p, sdk.Attempt{Subject: s}); err != nil || !d.Degraded {
			t.Errorf("Wait(…) = %+v, %v, want degraded and allowed", d, err)
		}
		// Invalid input is still an error.
		if _, err := lim.Allow(ctx, p, sdk.Subject{}); !errors.Is(err, sdk.ErrInvalidSubject) {
			t.Errorf("Allow(empty subject) = %v, want %v", err, sdk.ErrInvalidSubject)
		}
		// Inspect is no decision: it reports the failure.
		if _, err := lim.Admin().Inspect(ctx, p, s); !errors.Is(err, boom) {
			t.Errorf("Inspect(…) = %v, want %v", err, boom)
		}
	})
	t.Run("open reserve", func(t *testing.T) {
		b := &erringReserver{errBackend: errBackend{boom}}
		d, res, err := sdk.New(b).Reserve(ctx, pushPolicy(t, sdk.WithFailOpen()), sdk.Attempt{Subject: s}, time.Minute)
		if err != nil || !d.Degraded || res == nil {
			t.Fatalf("Reserve(…) = %+v, %v, %v, want degraded with a reservation", d, res, err)
		}
		if err := res.Commit(ctx); err != nil {
			t.Errorf("Commit of a degraded reservation = %v, want nil", err)
		}
		if b.settles != 0 {
			t.Errorf("backend got %d Settle calls for a degraded reservation, want 0", b.settles)
		}
	})
}

type erringReserver struct {
	errBackend
	settles int
}

func (e *erringReserver) Commit(ctx context.Context, key, id string) error {
	e.settles++
	return e.err
}

func (e *erringReserver) Cancel(ctx context.Context, key, id string) error {
	e.settles++
	return e.err
}

func TestTimeout(t *testing.T) {
	var deadline bool
	f := &fakeBackend{}
	f.result = func(req driver.Request) (driver.Result, error) { return driver.Result{}, errors.New("unused") }
	deadlineBackend := takeFunc(func(ctx context.Context, req driver.Request) (driver.Result, error) {
		_, deadline = ctx.Deadline()
		return f.Take(ctx, req)
	})
	s := sdk.Subject{"user": "u", "content": "c"}
	_, _ = sdk.New(deadlineBackend, sdk.WithTimeout(time.Second)).Allow(context.Background(), pushPolicy(t), s)
	if !deadline {
		t.Error("WithTimeout(1s): backend context has no deadline, want one")
	}
	_, _ = sdk.New(deadlineBackend).Allow(context.Background(), pushPolicy(t), s)
	if deadline {
		t.Error("no WithTimeout: backend context has a deadline, want none")
	}
}

type takeFunc func(ctx context.Context, req driver.Request) (driver.Result, error)

func (f takeFunc) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	return f(ctx, req)
}

func TestObserver(t *testing.T) {
	var ops []string
	now := fakeNow
	clock := &tickingClock{now: now}
	var lat []time.Duration
	lim := sdk.New(&fullBackend{}, sdk.WithClock(clock), sdk.WithObserver(func(e sdk.Event) {
		ops = append(ops, e.Op)
		lat = append(lat, e.Latency)
		if e.Policy != "push" {
			t.Errorf("Event.Policy = %q, want push", e.Policy)
		}
	}))
	p := pushPolicy(t)
	s := sdk.Subject{"user": "u", "content": "c"}
	ctx := context.Background()
	_, _ = lim.Allow(ctx, p, s)
	_, _ = lim.Take(ctx, p, sdk.Attempt{Subject: s, Cost: 2})
	_, _ = lim.Peek(ctx, p, sdk.Attempt{Subject: s})
	_, _, _ = lim.Reserve(ctx, p, sdk.Attempt{Subject: s}, time.Second)
	_, _ = lim.Wait(ctx, p, sdk.Attempt{Subject: s})
	_, _ = lim.Admin().Inspect(ctx, p, s)
	if want := []string{"take", "take", "peek", "reserve", "wait", "inspect"}; !slices.Equal(ops, want) {
		t.Errorf("observed ops = %q, want %q", ops, want)
	}
	for i, l := range lat {
		if l != time.Millisecond {
			t.Errorf("event %d Latency = %v, want 1ms", i, l)
		}
	}
}

// tickingClock moves 1ms forward on every read.
type tickingClock struct{ now time.Time }

func (c *tickingClock) Now() time.Time { c.now = c.now.Add(time.Millisecond); return c.now }

func (c *tickingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}

// TestObservers: every observer given to New sees every event, in the
// order given, with the policy itself and the subject's shard values as
// its keys hold them (escaped), except for an inspection.
func TestObservers(t *testing.T) {
	p, err := sdk.NewPolicy("obs", []sdk.Rule{sdk.FixedWindow("m", 1, time.Minute).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	var seen []sdk.Event
	lim := sdk.New(memory.New(nil),
		sdk.WithObserver(func(e sdk.Event) { order = append(order, "first"); seen = append(seen, e) }),
		sdk.WithObserver(nil),
		sdk.WithObserver(func(sdk.Event) { order = append(order, "second") }))
	ctx := context.Background()
	s := sdk.Subject{"user": "a:b"}
	if _, err := lim.Allow(ctx, p, s); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Admin().Inspect(ctx, p, s); err != nil {
		t.Fatal(err)
	}
	if want := []string{"first", "second", "first", "second"}; !slices.Equal(order, want) {
		t.Fatalf("observers called %v, want %v", order, want)
	}
	if e := seen[0]; e.PolicyRef != p || e.Shard != "a%3Ab" || e.Op != "take" {
		t.Errorf("take event = PolicyRef %p, Shard %q, Op %q; want %p, %q, take", e.PolicyRef, e.Shard, e.Op, p, "a%3Ab")
	}
	if e := seen[1]; e.PolicyRef != p || e.Shard != "" || e.Op != "inspect" {
		t.Errorf("inspect event = PolicyRef %p, Shard %q, Op %q; want %p, empty, inspect", e.PolicyRef, e.Shard, e.Op, p)
	}
}
