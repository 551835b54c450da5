package memory

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestListValues: the values of one person's set, each once whatever its
// rules, newest take first, with the expiry of its latest state; another
// set's, another person's, a set whose name extends this one's and dead
// state are not listed.
func TestListValues(t *testing.T) {
	clock := fakeclock.New(t0)
	b := New(&Options{Clock: clock})
	ctx := context.Background()
	base := "fc:{u1}:ad:"
	take := func(base, set, v string, w time.Duration) {
		t.Helper()
		g := base + set + ":" + v
		req := driver.Request{Policy: "ad", Cost: 1, Rules: []driver.Rule{
			{Name: "day", Key: base + "day.abc:" + v, Group: g, Algorithm: driver.FixedWindow, Limit: 3, Window: w},
			{Name: "min", Key: base + "min.abc:" + v, Group: g, Algorithm: driver.SlidingWindow, Limit: 1000, Window: time.Minute},
		}}
		if _, err := b.Take(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	take(base, "=campaign", "a", time.Hour)
	clock.Advance(time.Millisecond)
	take(base, "=campaign", "b", 2*time.Hour)
	clock.Advance(time.Millisecond)
	take(base, "=campaign", "short", time.Second)
	clock.Advance(time.Millisecond)
	take(base, "=campaign", "a", time.Hour) // a again: newest
	take(base, "=campaign,slot", "a:1", time.Hour)
	take("fc:{u2}:ad:", "=campaign", "z", time.Hour)
	clock.Advance(2 * time.Minute) // short's states end (its sliding window's last cell leaves after 66 s)

	req := driver.ValuesRequest{Root: base + "=", Set: base + "=campaign", Limit: 10}
	page, err := b.ListValues(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range page.Values {
		got = append(got, v.Group[len(req.Set):])
	}
	if want := []string{":a", ":b"}; !slices.Equal(got, want) || page.Total != 2 || page.Next != "" || page.Prev != "" {
		t.Fatalf("ListValues(…) = %v (total %d, next %q, prev %q), want %v", got, page.Total, page.Next, page.Prev, want)
	}
	if a, b := page.Values[0], page.Values[1]; !a.Written.Equal(t0.Add(3*time.Millisecond)) || !b.Written.Equal(t0.Add(time.Millisecond)) {
		t.Errorf("written = %v, %v; want the takes' times", a.Written, b.Written)
	}
	if e := page.Values[1].Expires; !e.Equal(t0.Truncate(2 * time.Hour).Add(2 * time.Hour)) {
		t.Errorf("b expires %v, want its 2h window's end", e)
	}
	if !page.Now.Equal(clock.Now()) {
		t.Errorf("Now = %v, want %v", page.Now, clock.Now())
	}

	req.Limit = 1
	p1, err := b.ListValues(ctx, req)
	if err != nil || len(p1.Values) != 1 || p1.Next == "" {
		t.Fatalf("ListValues(limit 1) = %+v, %v", p1, err)
	}
	req.Cursor = p1.Next
	p2, err := b.ListValues(ctx, req)
	if err != nil || len(p2.Values) != 1 || p2.Values[0].Group != page.Values[1].Group || p2.Next != "" || p2.Prev == "" {
		t.Fatalf("ListValues(second page) = %+v, %v", p2, err)
	}
	req.Cursor = "bogus"
	if _, err := b.ListValues(ctx, req); !errors.Is(err, driver.ErrInvalidCursor) {
		t.Errorf("ListValues(bad cursor) error = %v, want ErrInvalidCursor", err)
	}
	if _, err := b.ListValues(ctx, driver.ValuesRequest{Root: base + "=", Set: base + "=", Limit: 1}); err == nil {
		t.Error("ListValues(Set = Root) succeeded, want an error")
	}
}
