package sdk_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// wideSpy is the memory backend keeping the rules of the last Take.
type wideSpy struct {
	*memory.Backend
	rules []driver.Rule
}

func (w *wideSpy) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	w.rules = slices.Clone(req.Rules)
	return w.Backend.Take(ctx, req)
}

// TestWithWide: WithWide marks the rules keyed by a declared dimension
// (driver.Rule.Wide), and refuses a shard dimension, a dimension no rule
// has, and no dimension at all.
func TestWithWide(t *testing.T) {
	rules := []sdk.Rule{
		sdk.FixedWindow("user-day", 1000, 24*time.Hour).By("user"),
		sdk.SlidingWindow("campaign-day", 3, 24*time.Hour).By("user", "campaign"),
		sdk.FixedWindow("device-day", 5, 24*time.Hour).By("user", "device"),
	}
	p, err := sdk.NewPolicy("ad", rules, sdk.WithWide("campaign"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Wide(); !slices.Equal(got, []string{"campaign"}) {
		t.Errorf("Wide() = %v, want [campaign]", got)
	}
	spy := &wideSpy{Backend: memory.New(nil)}
	lim := sdk.New(spy)
	if _, err := lim.Take(context.Background(), p, sdk.Attempt{Subject: sdk.Subject{"user": "u", "campaign": "c", "device": "d"}}); err != nil {
		t.Fatal(err)
	}
	var wide []bool
	for _, r := range spy.rules {
		wide = append(wide, r.Wide)
	}
	if !slices.Equal(wide, []bool{false, true, false}) {
		t.Errorf("the backend's rules' Wide = %v, want only campaign-day's", wide)
	}
	for _, tc := range []struct {
		name string
		dims []string
	}{{"shard", []string{"user"}}, {"unknown", []string{"region"}}, {"none", nil}} {
		if _, err := sdk.NewPolicy("ad", rules, sdk.WithWide(tc.dims...)); !errors.Is(err, sdk.ErrInvalidPolicy) {
			t.Errorf("%s: NewPolicy(…, WithWide(%q)) = %v, want ErrInvalidPolicy", tc.name, tc.dims, err)
		}
	}
}
