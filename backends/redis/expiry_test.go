package redis

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// TestExpiryInLongScript: a batch is one script at one TIME, and Redis
// 7.0 deletes a key at once when PEXPIREAT names an instant its own clock
// has passed, though the script still decides at its TIME. A sorted-set
// log written early in a long batch, with a window shorter than the
// script, must still count for the batch's later takes of the same person
// (without the slack on its expiry, lua.ExpirySlackMs, it was deleted and
// they counted from nothing: found by the wide differential test's
// sprays).
func TestExpiryInLongScript(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		t.Run("noFast="+strconv.FormatBool(noFast), func(t *testing.T) {
			b, _ := plainStandalone(t)
			b.noFast = noFast
			ctx := context.Background()
			const (
				people = 30
				per    = 25
				W      = time.Millisecond
			)
			subs := make([]subject, people)
			for i := range subs {
				subs[i] = newSubject(t, "long"+strconv.Itoa(i))
			}
			rule := func(s subject) []driver.Rule {
				// A limit past driver.LogLine: a log in a sorted set.
				return []driver.Rule{{Name: "z", Key: s.key("z"), Group: s.base + "=", Algorithm: driver.SlidingLog, Limit: 1000, Window: W}}
			}
			rng := rand.New(rand.NewPCG(3, 4))
			bad := 0
			admitted := make([][]int64, people) // each person's takes' µs in the window
			for k := range 20 {
				order := make([]int, 0, people*per)
				for i := range people {
					for range per {
						order = append(order, i)
					}
				}
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				reqs := make([]request, len(order))
				for i, p := range order {
					reqs[i] = request{op: opTake, Request: driver.Request{Policy: "p", Rules: rule(subs[p]), Cost: 1}}
				}
				for i, o := range b.batch(ctx, reqs) {
					if o.Err != nil {
						t.Fatalf("batch %d, take %d: %v", k, i, o.Err)
					}
					p, now := order[i], o.Result.Now.UnixMicro()
					live := admitted[p][:0]
					for _, at := range admitted[p] {
						if at > now-W.Microseconds() {
							live = append(live, at)
						}
					}
					admitted[p] = append(live, now)
					if got, want := o.Result.Rules[0].Used, int64(len(admitted[p])); got != want {
						if bad++; bad <= 5 {
							t.Errorf("batch %d, take %d (person %d): used %d, want %d", k, i, p, got, want)
						}
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d takes counted wrong", bad)
			}
		})
	}
}
