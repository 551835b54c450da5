package serve_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/serve"
)

// Every operation over gRPC and HTTP/JSON, against memory, Redis and a
// Redis Cluster, through the Go client: the answers are the sdk's.
func TestOperations(t *testing.T) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b, ready := bk.new(t)
			e := start(t, b, serve.Config{Ready: ready})
			for _, pr := range protocols {
				t.Run(pr.name, func(t *testing.T) {
					testOperations(t, e, client.New(e.url, &client.Options{Protocol: pr.p}), "u-"+pr.name)
				})
			}
		})
	}
}

func testOperations(t *testing.T, e *env, c *client.Client, user string) {
	ctx := context.Background()
	push, ads := e.policies["push"], e.policies["ads"]
	s := sdk.Subject{"user": user, "content": "c1"}

	t.Run("take", func(t *testing.T) {
		for i := 1; i <= 2; i++ {
			d, err := c.Take(ctx, push, sdk.Attempt{Subject: s})
			if err != nil || !d.Allowed {
				t.Fatalf("Take #%d = %+v, %v, want allowed", i, d, err)
			}
			if d.Policy != "push" || len(d.Rules) != 4 || d.At.IsZero() {
				t.Fatalf("Take #%d = %+v: want policy push, 4 rules, a time", i, d)
			}
			if r := d.Rules[2]; r.Rule != "content-59s" || r.Used != int64(i) || r.Limit != 2 || r.Remaining != int64(2-i) ||
				r.Algorithm != driver.SlidingWindow || r.ResetAfter <= 0 || !r.Allowed {
				t.Errorf("Take #%d rule content-59s = %+v", i, r)
			}
		}
		d, err := c.Take(ctx, push, sdk.Attempt{Subject: s})
		if err != nil || d.Allowed {
			t.Fatalf("Take #3 = %+v, %v, want denied", d, err)
		}
		if !slices.Equal(d.Denied, []string{"content-59s"}) || d.RetryAfter <= 0 || d.Rules[2].RetryAfter <= 0 || d.Rules[2].Allowed {
			t.Errorf("Take #3 = denied %v retry %v, want content-59s with a retry-after", d.Denied, d.RetryAfter)
		}
		if got := e.used(t, "push", s, "recv-1m"); got != 2 {
			t.Errorf("recv-1m used = %d, want 2 (a denial consumes nothing)", got)
		}
	})

	t.Run("allow and peek", func(t *testing.T) {
		s2 := sdk.Subject{"user": user, "content": "c2"}
		d, err := c.Allow(ctx, push, s2)
		if err != nil || !d.Allowed || d.Rules[0].Used != 3 {
			t.Fatalf("Allow = %+v, %v, want allowed, recv-1m used 3", d, err)
		}
		d, err = c.Peek(ctx, push, sdk.Attempt{Subject: s2, Cost: 2})
		if err != nil || d.Allowed || !slices.Equal(d.Denied, []string{"content-59s"}) {
			t.Fatalf("Peek(cost 2) = %+v, %v, want denied by content-59s", d, err)
		}
		d, err = c.Peek(ctx, push, sdk.Attempt{Subject: s2})
		if err != nil || !d.Allowed || d.Rules[0].Used != 3 {
			t.Fatalf("Peek = %+v, %v, want allowed with recv-1m still at 3", d, err)
		}
		if got := e.used(t, "push", s2, "recv-1m"); got != 3 {
			t.Errorf("recv-1m used after peeks = %d, want 3", got)
		}
	})

	t.Run("cost too high is a decision", func(t *testing.T) {
		d, err := c.Take(ctx, push, sdk.Attempt{Subject: sdk.Subject{"user": user, "content": "c3"}, Cost: 20})
		if err != nil || d.Allowed || !d.CostTooHigh || d.RetryAfter != 0 {
			t.Fatalf("Take(cost 20) = %+v, %v, want a CostTooHigh denial", d, err)
		}
	})

	t.Run("idempotency key", func(t *testing.T) {
		a := sdk.Attempt{Subject: sdk.Subject{"user": user, "content": "idem"}, IdempotencyKey: "send-1"}
		d1, err := c.Take(ctx, push, a)
		if err != nil || !d1.Allowed || d1.Replayed {
			t.Fatalf("Take = %+v, %v, want allowed, not replayed", d1, err)
		}
		d2, err := c.Take(ctx, push, a)
		if err != nil || !d2.Allowed || !d2.Replayed || !d2.At.Equal(d1.At) {
			t.Fatalf("retried Take = %+v, %v, want the first decision replayed", d2, err)
		}
		if got := e.used(t, "push", a.Subject, "content-59s"); got != 1 {
			t.Errorf("content-59s used = %d, want 1", got)
		}
	})

	t.Run("reserve commit cancel", func(t *testing.T) {
		as := sdk.Subject{"user": user, "campaign": "k1"}
		d, r, err := c.Reserve(ctx, ads, sdk.Attempt{Subject: as}, time.Minute)
		if err != nil || !d.Allowed || len(r.ID()) != 16 {
			t.Fatalf("Reserve = %+v, %v, %v, want allowed with an id", d, r, err)
		}
		if err := r.Commit(ctx); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		if err := r.Commit(ctx); !errors.Is(err, sdk.ErrReservationNotFound) || connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("second Commit = %v, want ErrReservationNotFound, code not_found", err)
		}
		_, r, err = c.Reserve(ctx, ads, sdk.Attempt{Subject: as}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.used(t, "ads", as, "daily"); got != 2 {
			t.Errorf("daily used while reserved = %d, want 2", got)
		}
		// Settled through a Reservation built from the shard value alone
		// (another process, another replica).
		r2, err := c.ReservationOf(ads, sdk.Subject{"user": user}, r.ID())
		if err != nil {
			t.Fatalf("ReservationOf: %v", err)
		}
		if err := r2.Cancel(ctx); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		if got := e.used(t, "ads", as, "daily"); got != 1 {
			t.Errorf("daily used after Cancel = %d, want 1", got)
		}
		if _, _, err := c.Reserve(ctx, ads, sdk.Attempt{Subject: as}, 0); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Reserve(ttl 0) = %v, want invalid_argument", err)
		}
	})

	t.Run("batches", func(t *testing.T) {
		bs := sdk.Subject{"user": user, "content": "batch"}
		as := []sdk.Attempt{
			{Subject: bs},
			{Subject: sdk.Subject{"user": user, "colour": "red"}},
			{Subject: bs},
			{Subject: bs},
			{Subject: sdk.Subject{"content": "x"}},
		}
		rs := c.TakeBatch(ctx, push, as)
		if len(rs) != len(as) {
			t.Fatalf("TakeBatch: %d results, want %d", len(rs), len(as))
		}
		for i, want := range []struct {
			allowed bool
			used    int64
			err     error
		}{{true, 1, nil}, {false, 0, sdk.ErrInvalidSubject}, {true, 2, nil}, {false, 2, nil}, {false, 0, sdk.ErrInvalidSubject}} {
			r := rs[i]
			if !errors.Is(r.Err, want.err) || (want.err != nil) != (r.Err != nil) {
				t.Errorf("TakeBatch[%d].Err = %v, want %v", i, r.Err, want.err)
				continue
			}
			if want.err != nil {
				if connect.CodeOf(r.Err) != connect.CodeInvalidArgument {
					t.Errorf("TakeBatch[%d] code = %v, want invalid_argument", i, connect.CodeOf(r.Err))
				}
				continue
			}
			if r.Decision.Allowed != want.allowed || r.Decision.Rules[2].Used != want.used {
				t.Errorf("TakeBatch[%d] = allowed %v used %d, want %v %d", i, r.Decision.Allowed, r.Decision.Rules[2].Used, want.allowed, want.used)
			}
		}
		ps := c.PeekBatch(ctx, push, []sdk.Attempt{{Subject: bs}, {Subject: sdk.Subject{"user": user, "content": "fresh"}}})
		if len(ps) != 2 || ps[0].Err != nil || ps[0].Decision.Allowed || ps[1].Err != nil || !ps[1].Decision.Allowed {
			t.Fatalf("PeekBatch = %+v, want denied then allowed", ps)
		}
		if got := e.used(t, "push", bs, "content-59s"); got != 2 {
			t.Errorf("content-59s used = %d, want 2", got)
		}
		if rs := c.TakeBatch(ctx, push, nil); len(rs) != 0 {
			t.Errorf("TakeBatch(nil) = %v, want no results", rs)
		}
	})

	t.Run("inspect", func(t *testing.T) {
		in, err := c.Admin().Inspect(ctx, push, sdk.Subject{"user": user})
		if err != nil {
			t.Fatal(err)
		}
		want, err := e.lim.Admin().Inspect(ctx, push, sdk.Subject{"user": user})
		if err != nil {
			t.Fatal(err)
		}
		if in.Policy != "push" || len(in.Rules) != 2 || !slices.Equal(in.Skipped, []string{"content-59s", "content-59m"}) ||
			in.TrailMax != want.TrailMax || in.TrailTTL != want.TrailTTL || len(in.Denials) != len(want.Denials) || len(in.Denials) == 0 {
			t.Fatalf("Inspect = %+v, want %+v", in, want)
		}
		if in.Rules[0].Used != want.Rules[0].Used {
			t.Errorf("Inspect recv-1m used = %d, want %d", in.Rules[0].Used, want.Rules[0].Used)
		}
		d := in.Denials[0]
		if d.Rule != want.Denials[0].Rule || d.Values["content"] != want.Denials[0].Values["content"] || !d.At.Equal(want.Denials[0].At) {
			t.Errorf("Inspect denial = %+v, want %+v", d, want.Denials[0])
		}
	})

	t.Run("reset", func(t *testing.T) {
		before := len(e.audits())
		if err := c.Admin().Reset(ctx, push, sdk.Subject{"user": user}); err != nil {
			t.Fatal(err)
		}
		if got := e.used(t, "push", s, "recv-1m"); got != 0 {
			t.Errorf("recv-1m used after Reset = %d, want 0", got)
		}
		if got := e.used(t, "push", s, "content-59s"); got != 2 {
			t.Errorf("content-59s used after Reset = %d, want 2 (kept)", got)
		}
		au := e.audits()
		if len(au) != before+1 {
			t.Fatalf("audit entries = %d, want %d", len(au), before+1)
		}
		if a := au[len(au)-1]; a.Caller != "local" || a.Policy != "push" || a.Subject["user"] != user || a.Outcome != "ok" ||
			!slices.Equal(a.Rules, []string{"recv-1m", "recv-24h"}) || !slices.Equal(a.Kept, []string{"content-59s", "content-59m"}) {
			t.Errorf("audit entry = %+v", a)
		}
	})

	t.Run("policies", func(t *testing.T) {
		ps, err := c.Policies(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != len(e.policies) {
			t.Fatalf("Policies: %d, want %d", len(ps), len(e.policies))
		}
		for _, p := range ps {
			want := e.policies[p.Name()]
			if want == nil || !slices.Equal(fleet.AnnouncementOf(p).Diff(fleet.AnnouncementOf(want)), nil) || p.FailOpen() != want.FailOpen() ||
				p.ReadsOverrides() != want.ReadsOverrides() {
				t.Errorf("policy %q differs from the server's: %v", p.Name(), fleet.AnnouncementOf(p).Diff(fleet.AnnouncementOf(want)))
			}
		}
	})
}
