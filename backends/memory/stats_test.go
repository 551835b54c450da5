package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver/stats"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestStats: increments add up, values replace, sorted sets keep their
// Keep highest members, keys vanish at their expiry, and the number of
// live keys is bounded.
func TestStats(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := fakeclock.New(t0)
	b := New(&Options{Clock: c})
	exp := t0.Add(time.Minute)
	batch := stats.Batch{
		Hashes: []stats.Hash{{Key: "h", Incr: []stats.Field{{Name: "a", Value: 2}}, Set: []stats.Field{{Name: "s", Value: 7}}, ExpireAt: exp}},
		Tops:   []stats.Top{{Key: "z", Incr: []stats.Field{{Name: "x", Value: 1}, {Name: "y", Value: 5}, {Name: "w", Value: 3}}, Keep: 2, ExpireAt: exp}},
	}
	for range 2 {
		if err := b.FlushStats(ctx, batch); err != nil {
			t.Fatalf("FlushStats = %v", err)
		}
	}
	q := stats.Query{Hashes: []string{"h", "nope"}, Tops: []string{"z"}, TopN: 10}
	d, err := b.ReadStats(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, f := range d.Hashes[0] {
		got[f.Name] = f.Value
	}
	if got["a"] != 4 || got["s"] != 7 || d.Hashes[1] != nil {
		t.Errorf("hashes = %v, %v; want a 4, s 7, and nil", d.Hashes[0], d.Hashes[1])
	}
	// x was trimmed after the first flush (Keep 2), so it restarted at 1
	// and was trimmed again.
	if fmt.Sprint(d.Tops[0]) != "[{y 10} {w 6}]" {
		t.Errorf("top = %v, want y 10, w 6", d.Tops[0])
	}
	c.Advance(time.Minute)
	if d, _ := b.ReadStats(ctx, q); d.Hashes[0] != nil || d.Tops[0] != nil {
		t.Errorf("after expiry: %v, %v; want nothing", d.Hashes[0], d.Tops[0])
	}
	// The bound.
	full := stats.Batch{}
	for i := range MaxStatsKeys + 1 {
		full.Hashes = append(full.Hashes, stats.Hash{Key: fmt.Sprint(i), Incr: []stats.Field{{Name: "a", Value: 1}}, ExpireAt: c.Now().Add(time.Hour)})
	}
	if err := b.FlushStats(ctx, full); !errors.Is(err, ErrStatsFull) {
		t.Errorf("FlushStats(MaxStatsKeys+1 keys) = %v, want ErrStatsFull", err)
	}
	if err := b.FlushStats(ctx, stats.Batch{Hashes: full.Hashes[:MaxStatsKeys]}); err != nil {
		t.Errorf("FlushStats(MaxStatsKeys keys) = %v", err)
	}
}
