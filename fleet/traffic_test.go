package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestTrafficSample: with Sample 1 every counted attempt of every
// subject is logged (time, cost, op, verdict, hashed values) and read
// back in time order; with Sample 4 about a quarter of the subjects are,
// each with every one of its attempts; peeks are not logged; a negative
// Sample logs nothing.
func TestTrafficSample(t *testing.T) {
	for _, sg := range storages {
		t.Run(sg.name, func(t *testing.T) {
			ctx := context.Background()
			c := fakeclock.New(time.Now())
			b := sg.new(t, c)
			c.Set(time.Now().Truncate(time.Millisecond))
			p, err := sdk.NewPolicy("sampled", []sdk.Rule{
				sdk.FixedWindow("per-day", 2, 24*time.Hour).By("user"), // Redis decides by its clock: no boundary in a test's run
				sdk.FixedWindow("per-content", 5, 24*time.Hour).By("user", "content"),
			})
			if err != nil {
				t.Fatal(err)
			}
			keep := 0
			run := func(sample int, users int) (fleet.Traffic, map[string]int) {
				t.Helper()
				prefix := fmt.Sprintf("tr-%s-%d-%d", sg.name, sample, time.Now().UnixNano())
				rec, err := fleet.NewRecorder(b, &fleet.Options{Prefix: prefix, Now: sg.now(c), FlushEvery: -1, Sample: sample, SampleKeep: keep})
				if err != nil {
					t.Fatal(err)
				}
				lim := sdk.New(b, sdk.WithPrefix(prefix), sdk.WithClock(c), sdk.WithObserver(rec.Observe))
				attempts := map[string]int{}
				for i := range users {
					u := fmt.Sprint("user-", i)
					for k := range 3 { // 2 allowed, 1 denied
						if _, err := lim.Take(ctx, p, sdk.Attempt{Subject: sdk.Subject{"user": u, "content": fmt.Sprint("c", k%2)}}); err != nil {
							t.Fatal(err)
						}
						attempts[u]++
						c.Advance(time.Millisecond)
					}
					if _, err := lim.Peek(ctx, p, sdk.Attempt{Subject: sdk.Subject{"user": u, "content": "c0"}}); err != nil {
						t.Fatal(err)
					}
				}
				if err := rec.Flush(ctx); err != nil {
					t.Fatalf("Flush = %v", err)
				}
				reader, err := fleet.NewReader(b, &fleet.Options{Prefix: prefix, Now: sg.now(c), SampleKeep: keep})
				if err != nil {
					t.Fatal(err)
				}
				tr, err := reader.Traffic(ctx, "sampled", 2*time.Hour)
				if err != nil {
					t.Fatalf("Traffic = %v", err)
				}
				return tr, attempts
			}

			tr, _ := run(1, 3)
			if tr.Sample != 1 || len(tr.Attempts) != 9 || tr.Full != 0 || tr.Malformed != 0 {
				t.Fatalf("Traffic(sample 1) = sample %d, %d attempts, %d full, %d malformed; want 1, 9, 0, 0", tr.Sample, len(tr.Attempts), tr.Full, tr.Malformed)
			}
			for i, a := range tr.Attempts {
				if a.Op != "take" || a.Cost != 1 || a.Allowed != (i%3 < 2) || a.Sample != 1 || len(a.Values) != 2 {
					t.Errorf("attempt %d = %+v, want a take of 1, allowed %v, 2 values", i, a, i%3 < 2)
				}
				if i > 0 && a.At.Before(tr.Attempts[i-1].At) {
					t.Errorf("attempt %d at %v before attempt %d", i, a.At, i-1)
				}
				same := i%3 > 0
				if same && (a.Person != tr.Attempts[i-1].Person || a.Values["user"] != tr.Attempts[i-1].Values["user"]) {
					t.Errorf("attempt %d: person or user hash differs from the same user's attempt before", i)
				}
				if a.Values["user"] == "user-0" || a.Values["user"] == "" {
					t.Errorf("attempt %d records user %q, want a hash", i, a.Values["user"])
				}
			}
			if tr.Attempts[0].Values["content"] == tr.Attempts[1].Values["content"] || tr.Attempts[0].Values["content"] != tr.Attempts[2].Values["content"] {
				t.Errorf("content hashes %q: want c0, c1, c0 told apart", []string{tr.Attempts[0].Values["content"], tr.Attempts[1].Values["content"], tr.Attempts[2].Values["content"]})
			}

			tr, attempts := run(4, 200)
			people := map[uint64]int{}
			for _, a := range tr.Attempts {
				people[a.Person]++
			}
			if tr.Sample != 4 || len(people) < 25 || len(people) > 80 {
				t.Errorf("Traffic(sample 4) = sample %d, %d of 200 people; want 4, about 50", tr.Sample, len(people))
			}
			for person, n := range people {
				if n != 3 {
					t.Errorf("person %x: %d attempts sampled, want all 3", person, n)
				}
			}
			if len(attempts) != 200 {
				t.Fatalf("ran %d users", len(attempts))
			}

			// A list at its bound keeps the newest attempts and says so.
			keep = 4
			tr, _ = run(1, 3)
			var verdicts []bool
			for _, a := range tr.Attempts {
				verdicts = append(verdicts, a.Allowed)
			}
			if !slices.Equal(verdicts, []bool{false, true, true, false}) || tr.Full != 1 {
				t.Errorf("Traffic(keep 4) = allowed %v, %d full; want the newest 4 (denied, allowed, allowed, denied), 1 full", verdicts, tr.Full)
			}
			keep = 0

			tr, _ = run(-1, 3)
			if len(tr.Attempts) != 0 || tr.Sample != 0 {
				t.Errorf("Traffic(no sample) = %d attempts, sample %d; want none", len(tr.Attempts), tr.Sample)
			}
		})
	}
}
