package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver/stats"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestStoreUniquesAndLogs: every storage counts distinct members over a
// group of keys (a union; a member added twice counts once; nearly exact
// for small sets, within 3% for 20 000 members), keeps the newest Keep
// entries of a list in order, and forgets both at their expiry.
func TestStoreUniquesAndLogs(t *testing.T) {
	for _, sg := range storages {
		t.Run(sg.name, func(t *testing.T) {
			ctx := context.Background()
			c := fakeclock.New(time.Now())
			st := sg.new(t, c).(stats.Counters)
			now := time.Now() // after the servers started
			c.Set(now)
			tag := fmt.Sprintf("st-%s-%d", sg.name, time.Now().UnixNano())
			k1, k2, big := "{"+tag+"}:u1", "{"+tag+"}:u2", "{"+tag+"}:big"
			lk, short := "{"+tag+"}:log", "{"+tag+"}:short"
			var many []string
			for i := range 20000 {
				many = append(many, "m"+strconv.Itoa(i))
			}
			batch := stats.Batch{
				Uniques: []stats.Unique{
					{Key: k1, Add: []string{"a", "b", "c", "a"}, ExpireAt: now.Add(time.Hour)},
					{Key: k2, Add: []string{"c", "d"}, ExpireAt: now.Add(time.Hour)},
					{Key: big, Add: many, ExpireAt: now.Add(time.Hour)},
				},
				Logs: []stats.Log{
					{Key: lk, Append: []string{"e1", "e2", "e3"}, Keep: 4, ExpireAt: now.Add(time.Hour)},
					{Key: short, Append: []string{"x"}, ExpireAt: now.Add(2 * time.Second)},
				},
			}
			if err := st.FlushStats(ctx, batch); err != nil {
				t.Fatalf("FlushStats = %v", err)
			}
			if err := st.FlushStats(ctx, stats.Batch{Logs: []stats.Log{{Key: lk, Append: []string{"e4", "e5"}, Keep: 4, ExpireAt: now.Add(time.Hour)}}}); err != nil {
				t.Fatalf("FlushStats = %v", err)
			}
			q := stats.Query{Uniques: [][]string{{k1}, {k1, k2}, {k2, "{" + tag + "}:none"}, {big}, nil}, Logs: []string{lk, short, "{" + tag + "}:nolog"}}
			d, err := st.ReadStats(ctx, q)
			if err != nil {
				t.Fatalf("ReadStats = %v", err)
			}
			if want := []int64{3, 4, 2}; !slices.Equal(d.Uniques[:3], want) {
				t.Errorf("ReadStats uniques = %v, want %v first", d.Uniques, want)
			}
			if n := d.Uniques[3]; n < 19400 || n > 20600 {
				t.Errorf("ReadStats uniques of 20000 members = %d, want within 3%%", n)
			}
			if d.Uniques[4] != 0 {
				t.Errorf("ReadStats uniques of no keys = %d, want 0", d.Uniques[4])
			}
			if want := []string{"e2", "e3", "e4", "e5"}; !slices.Equal(d.Logs[0], want) {
				t.Errorf("ReadStats log = %q, want %q", d.Logs[0], want)
			}
			if !slices.Equal(d.Logs[1], []string{"x"}) || d.Logs[2] != nil {
				t.Errorf("ReadStats logs = %q, %q, want [x], nil", d.Logs[1], d.Logs[2])
			}
			// After its expiry a key reads as missing (Redis: by its own
			// clock, polled until a deadline).
			c.Advance(3 * time.Second)
			deadline := time.Now().Add(10 * time.Second)
			for {
				d, err = st.ReadStats(ctx, stats.Query{Logs: []string{short}})
				if err != nil {
					t.Fatal(err)
				}
				if d.Logs[0] == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("log %q still read after its expiry: %q", short, d.Logs[0])
				}
				time.Sleep(50 * time.Millisecond) // polling a server's clock
			}
		})
	}
}
