package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// takeOnlyBackend is a backend with no optional interface.
type takeOnlyBackend struct{}

func (takeOnlyBackend) Take(context.Context, driver.Request) (driver.Result, error) {
	return driver.Result{}, errors.New("not called")
}

func TestSetOverrideValidation(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := fakeclock.New(now)
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	rules := []sdk.Rule{sdk.FixedWindow("day", 50, 24*time.Hour).By("user"), sdk.GCRA("rate", 10, time.Second, 2).By("user")}
	p, err := sdk.NewPolicy("p", rules, sdk.WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": "secret-user-value"}
	tests := []struct {
		name    string
		o       driver.Override
		wantErr string // "": accepted
	}{
		{"exempt", driver.Override{Kind: driver.Exempt, Reason: "vip", By: "ops"}, ""},
		{"block until", driver.Override{Kind: driver.Block, Until: now.Add(time.Hour)}, ""},
		{"limit", driver.Override{Kind: driver.Limit, Limits: map[string]int64{"day": 100}}, ""},
		{"unknown kind", driver.Override{Kind: 9}, "unknown kind"},
		{"zero kind", driver.Override{}, "unknown kind"},
		{"limits on exempt", driver.Override{Kind: driver.Exempt, Limits: map[string]int64{"day": 1}}, "only for kind limit"},
		{"limit without limits", driver.Override{Kind: driver.Limit}, "at least one"},
		{"unknown rule", driver.Override{Kind: driver.Limit, Limits: map[string]int64{"nope": 1}}, "no rule"},
		{"limit 0", driver.Override{Kind: driver.Limit, Limits: map[string]int64{"day": 0}}, "from 1 to"},
		{"limit too high", driver.Override{Kind: driver.Limit, Limits: map[string]int64{"day": driver.MaxLimit + 1}}, "from 1 to"},
		{"gcra interval too short", driver.Override{Kind: driver.Limit, Limits: map[string]int64{"rate": 2_000_000}}, "emission interval"},
		{"until past", driver.Override{Kind: driver.Block, Until: now.Add(-time.Second)}, "not after now"},
		{"until now", driver.Override{Kind: driver.Block, Until: now}, "not after now"},
		{"reason too long", driver.Override{Kind: driver.Block, Reason: strings.Repeat("r", 257)}, "reason is 257 bytes"},
		{"by too long", driver.Override{Kind: driver.Block, By: strings.Repeat("b", 65)}, "by is 65 bytes"},
		{"reason line break", driver.Override{Kind: driver.Block, Reason: "a\nb"}, "line break"},
		{"by line break", driver.Override{Kind: driver.Block, By: "a\rb"}, "line break"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lim.Admin().SetOverride(context.Background(), p, s, tc.o)
			if tc.wantErr == "" {
				if err != nil || got.ID == 0 || !got.Created.Equal(now) {
					t.Fatalf("SetOverride(%s) = %+v, %v, want it stored with an ID, created now", tc.name, got, err)
				}
				return
			}
			if !errors.Is(err, sdk.ErrInvalidOverride) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("SetOverride(%s) = %v, want ErrInvalidOverride saying %q", tc.name, err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "secret-user-value") {
				t.Errorf("SetOverride(%s) error %q holds the subject's value", tc.name, err)
			}
		})
	}

	plain, err := sdk.NewPolicy("p", rules)
	if err != nil {
		t.Fatal(err)
	}
	o := driver.Override{Kind: driver.Exempt}
	if _, err := lim.Admin().SetOverride(context.Background(), plain, s, o); !errors.Is(err, sdk.ErrInvalidPolicy) || !strings.Contains(err.Error(), "WithOverrides") {
		t.Errorf("SetOverride(policy without overrides) = %v, want ErrInvalidPolicy naming WithOverrides", err)
	}
	if err := lim.Admin().DeleteOverride(context.Background(), plain, s, 1); !errors.Is(err, sdk.ErrInvalidPolicy) {
		t.Errorf("DeleteOverride(policy without overrides) = %v, want ErrInvalidPolicy", err)
	}
	bare := sdk.New(takeOnlyBackend{}) // store_test.go: no optional interface
	if _, err := bare.Admin().SetOverride(context.Background(), p, s, o); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SetOverride(backend without overrides) = %v, want errors.ErrUnsupported", err)
	}
	if _, err := bare.Admin().Overrides(context.Background(), p, s); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Overrides(backend without overrides) = %v, want errors.ErrUnsupported", err)
	}
	if _, err := lim.Admin().Overrides(context.Background(), p, sdk.Subject{}); !errors.Is(err, sdk.ErrInvalidSubject) {
		t.Errorf("Overrides(no shard value) = %v, want ErrInvalidSubject", err)
	}
	if got := lim.Admin().KeyLayout(p, s).Overrides; !strings.HasSuffix(got, ":p:!o") {
		t.Errorf("KeyLayout(p).Overrides = %q, want the base key and !o", got)
	}
	if got := lim.Admin().KeyLayout(plain, s).Overrides; got != "" {
		t.Errorf("KeyLayout(policy without overrides).Overrides = %q, want none", got)
	}
}

// TestOverrideHotDeny: the hot-deny cache caches a block until its end,
// never an exempt or a limit override's denial, and SetOverride evicts
// the subject.
func TestOverrideHotDeny(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := fakeclock.New(now)
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("r", 1, time.Hour).By("user")}, sdk.WithOverrides(), sdk.WithHotDenyCache(16))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := sdk.Subject{"user": "u"}
	allow := func(label string) sdk.Decision {
		t.Helper()
		d, err := lim.Allow(ctx, p, s)
		if err != nil {
			t.Fatalf("%s: Allow = %v", label, err)
		}
		return d
	}
	allow("first")
	if d := allow("second"); d.Allowed || d.Cached {
		t.Fatalf("Allow #2 = allowed %t, cached %t, want a denial from the backend", d.Allowed, d.Cached)
	}
	if d := allow("third"); !d.Cached {
		t.Fatalf("Allow #3 = cached %t, want the cached denial", d.Cached)
	}
	// An exempt set through the Limiter evicts the cached denial.
	ex, err := lim.Admin().SetOverride(ctx, p, s, driver.Override{Kind: driver.Exempt})
	if err != nil {
		t.Fatal(err)
	}
	if d := allow("under exempt"); !d.Allowed || d.Cached || d.Override.ID != ex.ID || len(d.Denied) != 0 {
		t.Fatalf("Allow under exempt = allowed %t, cached %t, override %d, denied %v, want allowed by #%d", d.Allowed, d.Cached, d.Override.ID, d.Denied, ex.ID)
	}
	if err := lim.Admin().DeleteOverride(ctx, p, s, ex.ID); err != nil {
		t.Fatal(err)
	}
	// A limit override's denial is never cached.
	if _, err := lim.Admin().SetOverride(ctx, p, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"r": 1}}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if d := allow("under limit"); d.Allowed || d.Cached || d.Override.Kind != driver.Limit {
			t.Fatalf("Allow #%d under a limit override = allowed %t, cached %t, override kind %v, want a denial from the backend naming the override", i, d.Allowed, d.Cached, d.Override.Kind)
		}
	}
	// A block is cached until its end.
	blk, err := lim.Admin().SetOverride(ctx, p, s, driver.Override{Kind: driver.Block, Until: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if d := allow("under block"); d.Allowed || d.Cached || d.RetryAfter != time.Minute || d.Override.ID != blk.ID {
		t.Fatalf("Allow under block = allowed %t, cached %t, retry %v, override %d, want denied by #%d for 1m", d.Allowed, d.Cached, d.RetryAfter, d.Override.ID, blk.ID)
	}
	clock.Advance(30 * time.Second)
	if d := allow("under block, again"); !d.Cached || d.RetryAfter != 30*time.Second {
		t.Fatalf("Allow under block 30s later = cached %t, retry %v, want cached with 30s left", d.Cached, d.RetryAfter)
	}
}

// TestWaitEndlessBlock: Wait gives up at once on a block without end.
func TestWaitEndlessBlock(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("r", 5, time.Hour).By("user")}, sdk.WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": "u"}
	if _, err := lim.Admin().SetOverride(context.Background(), p, s, driver.Override{Kind: driver.Block}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if d, err := lim.Wait(ctx, p, sdk.Attempt{Subject: s}); !errors.Is(err, sdk.ErrWaitTooLong) || d.Allowed {
		t.Errorf("Wait under an endless block = %v, %v, want a denial and ErrWaitTooLong", d.Allowed, err)
	}
}

// TestShadowHotDeny: a shadow rule's would-be denials never make the
// hot-deny cache answer.
func TestShadowHotDeny(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	p, err := sdk.NewPolicy("p", []sdk.Rule{
		sdk.FixedWindow("e", 3, time.Hour).By("user"),
		sdk.FixedWindow("s", 1, time.Hour).By("user").AsShadow(),
	}, sdk.WithHotDenyCache(16))
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": "u"}
	for i := 1; i <= 3; i++ {
		d, err := lim.Allow(context.Background(), p, s)
		if err != nil || !d.Allowed || d.Cached {
			t.Fatalf("Allow #%d = allowed %t, cached %t, %v, want allowed from the backend (only the shadow rule would deny)", i, d.Allowed, d.Cached, err)
		}
	}
	if st := lim.Admin().HotDenyStats(p); st.Entries != 0 {
		t.Errorf("HotDenyStats = %+v, want no entry: shadow rules never deny", st)
	}
	d, err := lim.Allow(context.Background(), p, s)
	if err != nil || d.Allowed || len(d.Denied) != 1 || d.Denied[0] != "e" {
		t.Fatalf("Allow #4 = %+v, %v, want denied by e", d, err)
	}
	if d, _ := lim.Allow(context.Background(), p, s); !d.Cached || d.Denied[0] != "e" {
		t.Errorf("Allow #5 = cached %t, denied %v, want e's denial from the cache", d.Cached, d.Denied)
	}
}
