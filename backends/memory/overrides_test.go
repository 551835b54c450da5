package memory

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestOverridesStore: IDs from one counter, the block that ends last
// decides, ended overrides vanish, the key lives until the latest end.
func TestOverridesStore(t *testing.T) {
	clock := fakeclock.New(t0)
	b := New(&Options{Clock: clock})
	ctx := context.Background()
	const key = "{u}:p:!o"
	set := func(o driver.Override) driver.Override {
		t.Helper()
		got, err := b.SetOverride(ctx, key, o)
		if err != nil {
			t.Fatalf("SetOverride(%+v) = %v", o, err)
		}
		return got
	}
	short := set(driver.Override{Kind: driver.Block, Until: at(time.Minute), Reason: "short"})
	long := set(driver.Override{Kind: driver.Block, Until: at(time.Hour), Reason: "long"})
	shorter := set(driver.Override{Kind: driver.Block, Until: at(30 * time.Second)})
	if !(short.ID < long.ID && long.ID < shorter.ID) || !short.Created.Equal(t0) {
		t.Fatalf("IDs %d, %d, %d, created %v, want increasing, created at the backend's clock", short.ID, long.ID, shorter.ID, short.Created)
	}
	if other, err := b.SetOverride(ctx, "{v}:p:!o", driver.Override{Kind: driver.Exempt}); err != nil || other.ID != shorter.ID+1 {
		t.Fatalf("SetOverride on another key = %+v, %v, want ID %d (one counter)", other, err, shorter.ID+1)
	}
	r := driver.Rule{Name: "r", Key: "{u}:p:r.x", Algorithm: driver.FixedWindow, Limit: 5, Window: time.Hour}
	res, err := b.Take(ctx, driver.Request{Policy: "p", Rules: []driver.Rule{r}, Cost: 1, OverrideKey: key})
	if err != nil || res.Allowed || res.Override.ID != long.ID {
		t.Fatalf("Take under three blocks = %+v, %v, want denied by the one ending last (#%d)", res, err, long.ID)
	}
	clock.Set(at(2 * time.Minute))
	if list, _ := b.Overrides(ctx, key); len(list) != 1 || list[0].ID != long.ID {
		t.Errorf("Overrides 2m later = %+v, want #%d alone", list, long.ID)
	}
	if err := b.DeleteOverride(ctx, key, short.ID); !errors.Is(err, driver.ErrOverrideNotFound) {
		t.Errorf("DeleteOverride(ended) = %v, want ErrOverrideNotFound", err)
	}
	if _, err := b.SetOverride(ctx, key, driver.Override{Kind: driver.Block, Until: at(time.Minute)}); err == nil {
		t.Errorf("SetOverride(until past) = nil error, want one")
	}
	clock.Set(at(time.Hour))
	b.Sweep()
	if n := b.Len(); n != 1 { // the other key's endless exempt (the blocked take stored nothing)
		t.Errorf("Len after every block ended = %d, want 1 (the ended override set is gone)", n)
	}
}
