package redis

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// TestWideSprays: batches of takes over 40 to 90 contents of one person
// (a root with many sections: wide, lua.WideAt), each counted as a fixed
// window of 100 ms counts them, on fast scripts and on take.lua. A
// batch is one script of up to batchAttempts attempts at one TIME,
// during which the server's clock goes on: the wide hash and root outlive
// their contents by lua.WideSlackMs (without it, 596 of about 9 700
// takes found their content's count gone in one run: a window had ended,
// by the server's clock, during their script).
func TestWideSprays(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		t.Run("noFast="+strconv.FormatBool(noFast), func(t *testing.T) {
			b, _ := plainStandalone(t)
			b.noFast = noFast
			s := newSubject(t, "sprays")
			ctx := context.Background()
			const W = 100 * time.Millisecond
			rules := func(cn string) []driver.Rule {
				return []driver.Rule{
					{Name: "a", Key: s.key("a"), Group: s.base + "=", Algorithm: driver.SlidingWindow, Limit: 1_000_000, Window: time.Second, SubWindows: 10},
					{Name: "b", Key: s.key("b", cn), Group: s.base + "=c:" + cn, Algorithm: driver.FixedWindow, Limit: 13, Window: W},
				}
			}
			type count struct{ win, n int64 }
			want := map[string]count{}
			rng := rand.New(rand.NewPCG(1, 2))
			bad := 0
			for k := range 150 {
				n := 40 + rng.IntN(51)
				perm := rng.Perm(150)[:n]
				reqs := make([]request, n)
				for i, c := range perm {
					reqs[i] = request{op: opTake, Request: driver.Request{Policy: "p", Rules: rules("v" + strconv.Itoa(c)), Cost: 1}}
				}
				for i, o := range b.batch(ctx, reqs) {
					cn := "v" + strconv.Itoa(perm[i])
					if o.Err != nil {
						t.Fatalf("batch %d, take %d: %v", k, i, o.Err)
					}
					win := o.Result.Now.UnixMicro() / W.Microseconds()
					w := want[cn]
					if w.win != win {
						w = count{win, 0}
					}
					w.n++
					if got := o.Result.Rules[1].Used; got != w.n {
						if bad++; bad <= 5 {
							t.Errorf("batch %d, take %d (%s): used %d, want %d", k, i, cn, got, w.n)
						}
						w.n = got
					}
					want[cn] = w
				}
			}
			if bad > 0 {
				t.Errorf("%d takes counted wrong", bad)
			}
		})
	}
}
