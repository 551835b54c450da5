package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestHeadroomSparesFormerRule: a rule's headroom is its own, not its
// former self's. After a change (WithChange) the former rule is enforced
// with its own limit; were the new rule's headroom applied to it, a
// former limit at or below the units kept would admit no attempt of a
// lower priority (driver.Rule.Keep: CostTooHigh) until its reach passed.
func TestHeadroomSparesFormerRule(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	spy := &wideSpy{Backend: memory.New(&memory.Options{Clock: clock})}
	lim := sdk.New(spy, sdk.WithClock(clock))
	from := sdk.SlidingWindow("day", 50, 24*time.Hour).By("user")
	rule := sdk.SlidingWindow("day", 150, 24*time.Hour).By("user").WithHeadroom(100, 1)
	rule.Epoch = 2
	p, err := sdk.NewPolicy("push", []sdk.Rule{rule}, sdk.WithChange("day", sdk.Change{From: from, At: clock.Now(), Version: 2}))
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range []int{0, 1} {
		if _, err := lim.Take(context.Background(), p, sdk.Attempt{Subject: sdk.Subject{"user": "u"}, Priority: pr}); err != nil {
			t.Fatalf("Take(priority %d) = %v", pr, err)
		}
		if len(spy.rules) != 2 {
			t.Fatalf("Take(priority %d) sent %d rules, want the former rule and the rule", pr, len(spy.rules))
		}
		want := int64(100)
		if pr >= 1 {
			want = 0
		}
		if former, cur := spy.rules[0], spy.rules[1]; former.Keep != 0 || cur.Keep != want {
			t.Errorf("Take(priority %d) sent Keep %d (former, limit %d) and %d (rule, limit %d), want 0 and %d", pr, former.Keep, former.Limit, cur.Keep, cur.Limit, want)
		}
	}
}
