package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// A reservation made by one Limiter is settled by another on the same
// storage, knowing only the policy, the shard values and the id.
func TestReservationOf(t *testing.T) {
	p, err := sdk.NewPolicy("ads", []sdk.Rule{
		sdk.FixedWindow("daily", 2, 24*time.Hour).By("user"),
		sdk.FixedWindow("campaign", 1, 24*time.Hour).By("user", "campaign"),
	}, sdk.WithTrail(7, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	clk := fakeclock.New(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
	b := memory.New(&memory.Options{Clock: clk})
	a, other := sdk.New(b), sdk.New(b)
	ctx := context.Background()
	full := sdk.Subject{"user": "u", "campaign": "c1"}
	shard := sdk.Subject{"user": "u"}

	reserve := func() string {
		t.Helper()
		d, r, err := a.Reserve(ctx, p, sdk.Attempt{Subject: full}, time.Minute)
		if err != nil || !d.Allowed {
			t.Fatalf("Reserve = %+v, %v, want allowed", d, err)
		}
		return r.ID()
	}
	used := func() int64 {
		t.Helper()
		in, err := a.Admin().Inspect(ctx, p, full)
		if err != nil {
			t.Fatal(err)
		}
		return in.Rules[0].Used
	}

	id := reserve()
	r, err := other.ReservationOf(p, shard, id)
	if err != nil {
		t.Fatalf("ReservationOf: %v", err)
	}
	if r.ID() != id {
		t.Errorf("ID() = %q, want %q", r.ID(), id)
	}
	if err := r.Cancel(ctx); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if got := used(); got != 0 {
		t.Errorf("used after Cancel = %d, want 0", got)
	}
	if err := r.Commit(ctx); !errors.Is(err, sdk.ErrReservationNotFound) {
		t.Errorf("Commit after Cancel = %v, want ErrReservationNotFound", err)
	}

	id = reserve()
	r, err = other.ReservationOf(p, full, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if got := used(); got != 1 {
		t.Errorf("used after Commit = %d, want 1", got)
	}

	for _, tc := range []struct {
		name string
		s    sdk.Subject
		id   string
		want error
	}{
		{"unknown id", shard, "0123456789abcdef", sdk.ErrReservationNotFound},
		{"malformed id", shard, "not-an-id", sdk.ErrReservationNotFound},
		{"upper-case id", shard, "0123456789ABCDEF", sdk.ErrReservationNotFound},
		{"no shard value", sdk.Subject{"campaign": "c1"}, id, sdk.ErrInvalidSubject},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := other.ReservationOf(p, tc.s, tc.id)
			if err == nil {
				err = r.Cancel(ctx)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("ReservationOf(…).Cancel = %v, want %v", err, tc.want)
			}
		})
	}

	if max, ttl := p.Trail(); max != 7 || ttl != time.Hour {
		t.Errorf("Trail() = %d, %v, want 7, 1h", max, ttl)
	}
}
