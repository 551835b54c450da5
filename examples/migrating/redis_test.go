package migrating_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestDifferencesOnRedis checks the guide's differences on a real
// redis-server, on the server's clock: the examples show them on the
// memory backend with a fixed clock, and users migrate from Redis-based
// peers. Rates are slow (one unit per minute or hour), so that the time the
// calls take on a loaded machine changes no answer.
func TestDifferencesOnRedis(t *testing.T) {
	c := goredis.NewUniversalClient(redis.NewClientOptions(redistest.Standalone(t)))
	t.Cleanup(func() { c.Close() })
	lim := sdk.New(redis.New(c, nil), sdk.WithTimeout(30*time.Second))
	ctx := context.Background()
	run := fmt.Sprint(time.Now().UnixNano())
	subject := func(t *testing.T) sdk.Subject { return sdk.Subject{"key": t.Name() + run} }
	policy := func(t *testing.T, r sdk.Rule) *sdk.Policy {
		t.Helper()
		p, err := sdk.NewPolicy("migrating", []sdk.Rule{r.By("key")})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	take := func(t *testing.T, p *sdk.Policy, s sdk.Subject, cost int64) sdk.Decision {
		t.Helper()
		d, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	t.Run("cost 0 takes one unit", func(t *testing.T) {
		p, s := policy(t, sdk.GCRA("g", 1, time.Hour, 2)), subject(t)
		for want := int64(2); want >= 0; want-- {
			if d := take(t, p, s, 0); !d.Allowed || d.Rules[0].Remaining != want {
				t.Fatalf("Take(Cost 0) = allowed %v, remaining %d; want allowed, remaining %d", d.Allowed, d.Rules[0].Remaining, want)
			}
		}
		d, err := lim.Peek(ctx, p, sdk.Attempt{Subject: s})
		if err != nil || d.Allowed || d.Rules[0].Remaining != 0 {
			t.Fatalf("Peek after three Cost 0 takes = allowed %v, remaining %d, %v; want denied, 0", d.Allowed, d.Rules[0].Remaining, err)
		}
	})

	t.Run("GCRA burst b admits b+1 at once", func(t *testing.T) {
		for _, burst := range []int64{0, 9, 10} {
			p, s := policy(t, sdk.GCRA("g", 1, time.Hour, burst)), subject(t)
			s["key"] += fmt.Sprint(burst)
			admitted := int64(0)
			for ; admitted <= burst+2; admitted++ {
				if d := take(t, p, s, 1); !d.Allowed {
					if d.Rules[0].Limit != burst+1 {
						t.Errorf("burst %d: Limit = %d, want %d", burst, d.Rules[0].Limit, burst+1)
					}
					break
				}
			}
			if admitted != burst+1 {
				t.Errorf("burst %d: %d admitted at once, want %d", burst, admitted, burst+1)
			}
		}
	})

	t.Run("a raised GCRA rate keeps the old rate's debt", func(t *testing.T) {
		slow, fast, s := policy(t, sdk.GCRA("g", 1, time.Hour, 0)), policy(t, sdk.GCRA("g", 60, time.Hour, 0)), subject(t)
		if d := take(t, slow, s, 1); !d.Allowed {
			t.Fatalf("first take at 1/h denied")
		}
		d := take(t, fast, s, 1)
		if d.Allowed || d.RetryAfter < 59*time.Minute {
			t.Fatalf("take at 60/h after one at 1/h = allowed %v, retry after %v; want denied for the old rate's hour (more than 59m)", d.Allowed, d.RetryAfter)
		}
	})

	t.Run("a raised window limit applies at once", func(t *testing.T) {
		rules := []func(limit int64) sdk.Rule{
			func(limit int64) sdk.Rule { return sdk.FixedWindow("f", limit, 24*time.Hour) },
			func(limit int64) sdk.Rule { return sdk.SlidingWindow("s", limit, time.Hour) },
			func(limit int64) sdk.Rule { return sdk.SlidingLog("l", limit, time.Hour) },
		}
		for _, rule := range rules {
			low, high := policy(t, rule(1)), policy(t, rule(60))
			t.Run(rule(1).Algorithm.String(), func(t *testing.T) {
				// A fixed window may end between two takes (at midnight
				// UTC): then the counts start again, and so does the check.
				for attempt := 0; attempt < 3; attempt++ {
					s := subject(t)
					s["key"] += fmt.Sprint(attempt)
					first, second, raised := take(t, low, s, 1), take(t, low, s, 1), take(t, high, s, 1)
					if !first.At.Truncate(24 * time.Hour).Equal(raised.At.Truncate(24 * time.Hour)) {
						continue
					}
					if !first.Allowed || second.Allowed || !raised.Allowed || raised.Rules[0].Used != 2 {
						t.Errorf("take at limit 1, 1, then at 60 = allowed %v %v %v, used %d; want allowed, denied, allowed, used 2",
							first.Allowed, second.Allowed, raised.Allowed, raised.Rules[0].Used)
					}
					return
				}
				t.Fatal("three attempts crossed a window's end")
			})
		}
	})

	t.Run("fixed windows are epoch-aligned", func(t *testing.T) {
		for _, w := range []time.Duration{time.Minute, time.Hour, 7 * time.Second} {
			p, s := policy(t, sdk.FixedWindow("f", 5, w)), subject(t)
			s["key"] += w.String()
			d := take(t, p, s, 1)
			end := d.At.Add(d.Rules[0].ResetAfter)
			if !d.Allowed || d.Rules[0].ResetAfter <= 0 || d.Rules[0].ResetAfter > w || end.UnixMicro()%w.Microseconds() != 0 {
				t.Errorf("window %v: first take at %v resets after %v (at %v); want the window to end on a multiple of %v since the epoch",
					w, d.At.Format(time.RFC3339Nano), d.Rules[0].ResetAfter, end.Format(time.RFC3339Nano), w)
			}
		}
	})

	t.Run("denials do not count", func(t *testing.T) {
		rules := []sdk.Rule{
			sdk.FixedWindow("f", 10, 24*time.Hour),
			sdk.SlidingWindow("s", 10, 24*time.Hour),
			sdk.SlidingLog("l", 10, 24*time.Hour),
			sdk.GCRA("g", 10, 24*time.Hour, 9),
		}
		for _, r := range rules {
			t.Run(r.Algorithm.String(), func(t *testing.T) {
				p := policy(t, r)
				// A fixed window may end between two takes (at midnight
				// UTC): then the counts start again, and so does the check.
				for attempt := 0; attempt < 3; attempt++ {
					s := subject(t)
					s["key"] += fmt.Sprint(attempt)
					d5, d6, d1 := take(t, p, s, 5), take(t, p, s, 6), take(t, p, s, 1)
					if r.Algorithm == driver.FixedWindow && !d5.At.Truncate(24*time.Hour).Equal(d1.At.Truncate(24*time.Hour)) {
						continue
					}
					if !d5.Allowed || d6.Allowed || !d1.Allowed || d6.Rules[0].Used != 5 || d1.Rules[0].Used != 6 {
						t.Errorf("take 5, 6, 1 = allowed %v %v %v, used %d %d %d; want allowed, denied, allowed, used 5 5 6",
							d5.Allowed, d6.Allowed, d1.Allowed, d5.Rules[0].Used, d6.Rules[0].Used, d1.Rules[0].Used)
					}
					return
				}
				t.Fatal("three attempts crossed a window's end")
			})
		}
	})
}
