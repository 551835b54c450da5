package sdk_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// TestStrictnessCost measures what strict sliding windows cost on the
// seed policy (internal/seed, "push": recv-1m 15/1m and recv-24h
// 50/24h per user, content-59s 2/59s and content-59m 5/59m per user and
// content), and checks they never over-admit. The memory backend runs on a
// fake clock; an exact sliding log (units in (now-W, now]) is kept of the
// SAME admitted history, and each attempt is also judged by it:
//
//   - over-admission: the backend admits what the exact log denies (must
//     be zero; so must any closed interval [t-W, t] over the limit);
//   - the cost of strictness: the backend denies what the exact log would
//     admit (printed with -v; docs/DESIGN.md quotes it): at most 1% of
//     the attempts (the seed policy's limits are at most driver.LogLine, so
//     its sliding windows are exact logs: none);
//   - every retry-after and reset-after is at most the rule's window.
//
// The traffic model (seeded, so the figures are reproducible): 200 users
// over 3 days. Each user receives bursts; the gap between a user's bursts
// is exponential, with a mean drawn per user log-uniformly from 1 to 16
// hours (a few heavy users, many light ones). A burst has 1 + geometric
// attempts, exponentially spaced: mean 6 attempts 3s apart, or, one burst
// in five, a storm of mean 24 attempts 2s apart. Each user has 8
// contents, content k drawn with weight 1/(k+1); half the attempts of a
// burst repeat its main content, the others draw again. Every attempt
// costs 1. (About 58,000 attempts; the caps bind often, recv-24h most.)
func TestStrictnessCost(t *testing.T) {
	const (
		users = 200
		days  = 3
	)
	seed := loadPolicies(t)["push"]
	// The seed policy as it is (10 cells per window), then with 60 cells
	// per window: finer cells, a smaller price.
	fine := make([]sdk.Rule, 0, len(seed.Rules()))
	for _, r := range seed.Rules() {
		fine = append(fine, r.WithSubWindows(60))
	}
	push60, err := sdk.NewPolicy("push", fine)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    *sdk.Policy
	}{{"10 cells", seed}, {"60 cells", push60}} {
		t.Run(tc.name, func(t *testing.T) { measureStrictness(t, tc.p, users, days) })
	}
}

func measureStrictness(t *testing.T, push *sdk.Policy, users, days int) {
	ctx := context.Background()
	rules := push.Rules()
	rng := rand.New(rand.NewPCG(2026, 11))

	type attempt struct {
		at      time.Time
		user    int
		content int
	}
	var attempts []attempt
	end := t0.Add(time.Duration(days) * 24 * time.Hour)
	exp := func(mean time.Duration) time.Duration { return time.Duration(rng.ExpFloat64() * float64(mean)) }
	// pick draws one of a user's 8 contents, content k with weight 1/(k+1).
	pick := func() int {
		x := rng.Float64() * 2.717857 // the sum of 1/(k+1), k < 8
		for k := range 8 {
			if x -= 1 / float64(k+1); x < 0 {
				return k
			}
		}
		return 7
	}
	for u := range users {
		gap := time.Duration(float64(time.Hour) * math.Pow(16, rng.Float64())) // 1h to 16h
		for at := t0.Add(exp(gap)); at.Before(end); at = at.Add(exp(gap)) {
			// One burst in five is a storm: mean 24 attempts 2s apart;
			// others mean 6, 3s apart (1 + geometric).
			mean, spacing := 6.0, 3*time.Second
			if rng.Float64() < 0.2 {
				mean, spacing = 24, 2*time.Second
			}
			main := pick()
			n := 1
			for rng.Float64() < mean/(mean+1) {
				n++
			}
			for ; n > 0 && at.Before(end); n-- {
				c := main
				if rng.Float64() >= 0.5 {
					c = pick()
				}
				attempts = append(attempts, attempt{at: at, user: u, content: c})
				at = at.Add(exp(spacing))
			}
		}
	}
	sort.Slice(attempts, func(i, j int) bool { return attempts[i].at.Before(attempts[j].at) })

	clock := newClock(t0)
	lim := newMemLimiter(t, clock)
	// The exact log: admitted instants per rule and key, oldest first.
	logs := map[string][]time.Time{}
	var admitted, exactDenied, costDenied, over, longWait int
	maxIn := map[string]int64{} // rule -> most units in one closed interval of W
	costBy := map[string]int{}  // rule -> strict denials the exact log admits, by denying rule
	for _, a := range attempts {
		clock.Set(a.at)
		s := sdk.Subject{"user": "u" + strconv.Itoa(a.user), "content": "c" + strconv.Itoa(a.content)}
		d, err := lim.Allow(ctx, push, s)
		if err != nil {
			t.Fatalf("Allow(…) = %v", err)
		}
		for i, rd := range d.Rules {
			if rd.RetryAfter > rules[i].Window || rd.ResetAfter > rules[i].Window {
				longWait++
				if longWait <= 3 {
					t.Errorf("%s at %v: retry-after %v, reset-after %v, want at most the window %v", rules[i].Name, d.At, rd.RetryAfter, rd.ResetAfter, rules[i].Window)
				}
			}
		}
		keys := make([]string, len(rules))
		exactOK := true
		fits := map[string]bool{}
		for i, r := range rules {
			keys[i] = r.Name + "|" + s["user"]
			if slices.Contains(r.Dimensions, "content") {
				keys[i] += "|" + s["content"]
			}
			fits[r.Name] = countIn(logs[keys[i]], d.At.Add(-r.Window), d.At, true)+1 <= r.Limit
			exactOK = exactOK && fits[r.Name]
		}
		switch {
		case d.Allowed && !exactOK:
			over++
		case !d.Allowed && exactOK:
			costDenied++
			for _, name := range d.Denied {
				costBy[name]++
			}
		case !exactOK:
			exactDenied++
		}
		if !d.Allowed {
			continue
		}
		admitted++
		for i, r := range rules {
			logs[keys[i]] = append(logs[keys[i]], d.At)
			if n := countIn(logs[keys[i]], d.At.Add(-r.Window), d.At, false); n > maxIn[r.Name] {
				maxIn[r.Name] = n
			}
		}
	}
	n := len(attempts)
	pct := func(k int) float64 { return 100 * float64(k) / float64(n) }
	t.Logf("%d attempts by %d users over %d simulated days: %d admitted, %d denied by the exact log too, "+
		"%d (%.2f%% of attempts) denied that the exact log would admit, %d (%.2f%%) admitted that it denies",
		n, users, days, admitted, exactDenied, costDenied, pct(costDenied), over, pct(over))
	for _, r := range rules {
		t.Logf("%s: at most %d units in any interval of %v (limit %d); denied %d attempts the exact log admits",
			r.Name, maxIn[r.Name], r.Window, r.Limit, costBy[r.Name])
		if maxIn[r.Name] > r.Limit {
			t.Errorf("%s: %d units admitted in one interval of %v, want at most the limit %d", r.Name, maxIn[r.Name], r.Window, r.Limit)
		}
	}
	if over > 0 {
		t.Errorf("%d attempts admitted that an exact sliding log denies, want 0", over)
	}
	if pct(costDenied) > 1 {
		t.Errorf("%d attempts (%.2f%%) denied that an exact sliding log admits, want at most 1%%", costDenied, pct(costDenied))
	}
	if longWait > 0 {
		t.Errorf("%d rule decisions with a retry-after or reset-after above the window, want 0", longWait)
	}
	if n < 10000 || exactDenied == 0 {
		t.Errorf("%d attempts, %d denied: the traffic model does not reach the caps (a bug in the test)", n, costDenied+exactDenied)
	}
}

// countIn returns how many of ts (sorted) lie in (from, to] when open,
// [from, to] otherwise.
func countIn(ts []time.Time, from, to time.Time, open bool) int64 {
	k := sort.Search(len(ts), func(k int) bool {
		if open {
			return ts[k].After(from)
		}
		return !ts[k].Before(from)
	})
	j := sort.Search(len(ts), func(j int) bool { return ts[j].After(to) })
	return int64(j - k)
}
