package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/faulty"
	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// adPolicy is the ad shape: a rule per user, rules per user and campaign
// (a fixed day and a sliding log of an hour, which ends an hour after a
// campaign's last impression), and one per user and slot.
func adPolicy(t *testing.T) *sdk.Policy {
	t.Helper()
	return mustPolicy(t, "ad",
		sdk.FixedWindow("user-day", 100000, 24*time.Hour).By("user"),
		sdk.FixedWindow("camp-day", 3, 24*time.Hour).By("user", "campaign"),
		sdk.SlidingLog("camp-hour", 2, time.Hour).By("campaign", "user"),
		sdk.GCRA("slot-rate", 1000000, time.Minute, 1000).By("user", "slot"),
	)
}

func TestNestedSets(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *sdk.Policy
		want []string
	}{
		{"nil", nil, nil},
		{"shard only", mustPolicy(t, "p", sdk.FixedWindow("a", 1, time.Hour).By("user"), sdk.FixedWindow("b", 1, time.Minute).By("user")), nil},
		{"ad", adPolicy(t), []string{"campaign", "slot"}},
		{"two dimensions", mustPolicy(t, "p", sdk.FixedWindow("a", 1, time.Hour).By("user"), sdk.FixedWindow("b", 1, time.Hour).By("user", "z", "b"), sdk.FixedWindow("c", 1, time.Hour).By("b", "user", "z")), []string{"b,z"}},
		{"no root rule", mustPolicy(t, "p", sdk.FixedWindow("a", 1, time.Hour).By("user", "c"), sdk.FixedWindow("b", 1, time.Hour).By("user", "d")), []string{"c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.NestedSets(); !slices.Equal(got, tc.want) {
				t.Errorf("NestedSets() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestValuesMemory: a person of the ad shape met 300 campaigns, some of
// them twice, a ms apart; an hour later the first 40 have ended. Values
// lists every live one once over its pages, newest first, each with its
// subject, when it was last written, and the set's counters exactly as
// Inspect reports them for that campaign; Prev walks the pages back.
func TestValuesMemory(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := fakeclock.New(t0)
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	p := adPolicy(t)
	person := sdk.Subject{"user": "u:42 ü"}
	camp := func(i int) string { return fmt.Sprintf("c%03d%%:{}", i) } // escaped in keys
	written := map[string]time.Time{}
	take := func(i int) {
		t.Helper()
		s := sdk.Subject{"user": person["user"], "campaign": camp(i), "slot": "s1"}
		if d, err := lim.Take(ctx, p, sdk.Attempt{Subject: s}); err != nil || !d.Allowed {
			t.Fatalf("Take(campaign %d) = %v, %v; want allowed", i, d.Denied, err)
		}
		written[camp(i)] = clock.Now()
		clock.Advance(time.Millisecond)
	}
	for i := range 300 {
		take(i)
	}
	clock.Advance(time.Hour - 300*time.Millisecond)
	for i := 200; i < 300; i += 7 {
		take(i) // again: newer than the rest
	}
	clock.Advance(40 * time.Millisecond) // camp-hour of c000…c039 ended; camp-day lives on
	// camp-day lives until the day's end: all 300 are live; make the
	// first 40 end by resetting their camp-day (the pair's set, whole).
	for i := range 40 {
		if err := lim.Admin().ResetRules(ctx, p, sdk.Subject{"user": person["user"], "campaign": camp(i)}, "camp-day", "camp-hour"); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for i := range 300 {
		if i >= 40 {
			want = append(want, camp(i))
		}
	}
	slices.SortStableFunc(want, func(a, b string) int { return written[b].Compare(written[a]) })

	for _, limit := range []int{20, 7, 0, 1000} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			var pages []sdk.ValuesPage
			var got []string
			cur := ""
			for {
				pg, err := lim.Admin().Values(ctx, p, person, "campaign", sdk.ValuesOptions{Limit: limit, Cursor: cur})
				if err != nil {
					t.Fatalf("Values(page %d) error: %v", len(pages), err)
				}
				pages = append(pages, pg)
				if pg.Total != len(want) || pg.Set != "campaign" || !slices.Equal(pg.Dimensions, []string{"campaign"}) || pg.Policy != "ad" || !pg.At.Equal(clock.Now()) || pg.Partial {
					t.Fatalf("Values(page %d) = total %d, set %q %v, policy %q, at %v, partial %v", len(pages)-1, pg.Total, pg.Set, pg.Dimensions, pg.Policy, pg.At, pg.Partial)
				}
				wantLen := min(max(limit, 0), sdk.MaxValuesLimit)
				if limit == 0 {
					wantLen = sdk.DefaultValuesLimit
				}
				if pg.Next != "" && len(pg.Values) != wantLen {
					t.Errorf("page %d holds %d values, want %d", len(pages)-1, len(pg.Values), wantLen)
				}
				for _, v := range pg.Values {
					got = append(got, v.Subject["campaign"])
					if v.Subject["user"] != person["user"] || len(v.Subject) != 2 {
						t.Fatalf("value subject = %q, want the person's user and a campaign", v.Subject)
					}
					if !v.Written.Equal(written[v.Subject["campaign"]]) || v.ID != "" {
						t.Errorf("%s: written %v (id %q), want %v", v.Subject["campaign"], v.Written, v.ID, written[v.Subject["campaign"]])
					}
				}
				if pg.Next == "" {
					break
				}
				cur = pg.Next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("Values over %d pages = %d values, want %d in write order, newest first:\n got %q\nwant %q", len(pages), len(got), len(want), got[:min(10, len(got))], want[:10])
			}
			for k := len(pages) - 1; k > 0; k-- {
				pg, err := lim.Admin().Values(ctx, p, person, "campaign", sdk.ValuesOptions{Limit: limit, Cursor: pages[k].Prev})
				if err != nil || len(pg.Values) != len(pages[k-1].Values) || pg.Values[0].Subject["campaign"] != pages[k-1].Values[0].Subject["campaign"] {
					t.Fatalf("Values(prev of page %d) = %d values, %v; want page %d", k, len(pg.Values), err, k-1)
				}
			}
		})
	}

	// Every value's counters are Inspect's for it.
	pg, err := lim.Admin().Values(ctx, p, person, "campaign", sdk.ValuesOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range pg.Values {
		ins, err := lim.Admin().Inspect(ctx, p, v.Subject)
		if err != nil {
			t.Fatal(err)
		}
		var setRules []sdk.RuleDecision
		for _, rd := range ins.Rules {
			if rd.Rule == "camp-day" || rd.Rule == "camp-hour" {
				setRules = append(setRules, rd)
			}
		}
		if !slices.Equal(v.Rules, setRules) {
			t.Errorf("%s: rules %+v, want Inspect's %+v", v.Subject["campaign"], v.Rules, setRules)
		}
		if v.Rules[0].Used < 1 || !v.Expires.After(clock.Now()) {
			t.Errorf("%s: used %d, expires %v: want live state", v.Subject["campaign"], v.Rules[0].Used, v.Expires)
		}
	}

	// The other set: slot s1's GCRA state ended long ago; s2 is taken
	// now. The person's campaign given is ignored (the person is the
	// shard values).
	if _, err := lim.Take(ctx, p, sdk.Attempt{Subject: sdk.Subject{"user": person["user"], "campaign": "late", "slot": "s2"}}); err != nil {
		t.Fatal(err)
	}
	if pg, err := lim.Admin().Values(ctx, p, sdk.Subject{"user": person["user"], "campaign": camp(1)}, "slot", sdk.ValuesOptions{}); err != nil || pg.Total != 1 || len(pg.Values) != 1 || pg.Values[0].Subject["slot"] != "s2" || len(pg.Values[0].Rules) != 1 {
		t.Errorf("Values(slot) = %+v, %v; want slot s2 and its rule", pg, err)
	}
	// Another person has none.
	if pg, err := lim.Admin().Values(ctx, p, sdk.Subject{"user": "u:43 ü"}, "campaign", sdk.ValuesOptions{}); err != nil || pg.Total != 0 {
		t.Errorf("Values(another user) = %+v, %v; want none", pg, err)
	}
	// And after the day ends, neither has this one.
	clock.Advance(24 * time.Hour)
	if pg, err := lim.Admin().Values(ctx, p, person, "campaign", sdk.ValuesOptions{}); err != nil || pg.Total != 0 || len(pg.Values) != 0 {
		t.Errorf("Values(a day later) = total %d, %d values, %v; want none", pg.Total, len(pg.Values), err)
	}
}

// inspectOnly is a backend with Inspector but no ValueLister.
type inspectOnly struct{ m *memory.Backend }

func (b inspectOnly) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	return b.m.Take(ctx, req)
}

func (b inspectOnly) Inspect(ctx context.Context, req driver.Request) (driver.Result, error) {
	return b.m.Inspect(ctx, req)
}

// TestValuesErrors: what Values refuses, and how it says so.
func TestValuesErrors(t *testing.T) {
	ctx := context.Background()
	p := adPolicy(t)
	flat := mustPolicy(t, "flat", sdk.FixedWindow("a", 1, time.Hour).By("user"))
	person := sdk.Subject{"user": "u1"}
	boom := errors.New("dial tcp 10.0.0.7:6379: connection refused")
	mem := sdk.New(memory.New(nil)).Admin()
	for _, tc := range []struct {
		name    string
		ad      *sdk.Admin
		p       *sdk.Policy
		s       sdk.Subject
		set     string
		cursor  string
		want    error  // errors.Is
		wantMsg string // and the message holds it
	}{
		{"zero Admin", &sdk.Admin{}, p, person, "campaign", "", nil, "sdk.New"},
		{"Admin of a zero Limiter", (&sdk.Limiter{}).Admin(), p, person, "campaign", "", nil, "no backend"},
		{"no value lister", sdk.New(inspectOnly{memory.New(nil)}).Admin(), p, person, "campaign", "", errors.ErrUnsupported, "cannot list"},
		{"no inspector", sdk.New(takeOnlyBackend{}).Admin(), p, person, "campaign", "", errors.ErrUnsupported, "inspection"},
		{"backend down", sdk.New(faulty.Down(boom)).Admin(), p, person, "campaign", "", boom, "sdk: values:"},
		{"nil policy", mem, nil, person, "campaign", "", sdk.ErrInvalidPolicy, ""},
		{"no nested sets", mem, flat, person, "campaign", "", sdk.ErrInvalidRule, `policy "flat" has no dimension set nested under its shard dimensions (user)`},
		{"unknown set", mem, p, person, "device", "", sdk.ErrInvalidRule, `no nested dimension set "device" (its nested sets: campaign; slot)`},
		{"the shard set", mem, p, person, "", "", sdk.ErrInvalidRule, "its nested sets"},
		{"no shard value", mem, p, sdk.Subject{"campaign": "c"}, "campaign", "", sdk.ErrInvalidSubject, `dimension "user" missing`},
		{"bad cursor", mem, p, person, "campaign", "nope", sdk.ErrInvalidCursor, "invalid cursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.ad.Values(ctx, tc.p, tc.s, tc.set, sdk.ValuesOptions{Cursor: tc.cursor})
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("Values(…) error = %v, want %v holding %q", err, tc.want, tc.wantMsg)
			}
			if err != nil && strings.Contains(err.Error(), "u1") {
				t.Errorf("Values(…) error %q holds the subject's value", err)
			}
		})
	}
	// A set named with its dimensions in any order.
	two := mustPolicy(t, "two", sdk.FixedWindow("a", 1, time.Hour).By("user"), sdk.FixedWindow("b", 1, time.Hour).By("user", "z", "b"))
	if _, err := mem.Values(ctx, two, person, "z,b", sdk.ValuesOptions{}); err != nil {
		t.Errorf("Values(\"z,b\") error = %v, want the set b,z", err)
	}
}
