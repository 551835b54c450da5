package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Issue 37's contract on Redis: headroom (driver.Rule.Keep), exempt rules
// (driver.Rule.Exempt) and quiet hours (driver.Request.Quiet).

// keeping returns r keeping k units of headroom.
func keeping(r driver.Rule, k int64) driver.Rule {
	r.Keep = k
	return r
}

// exemptOf returns r exempt as e.
func exemptOf(r driver.Rule, e driver.Exemption) driver.Rule {
	r.Exempt = e
	return r
}

// quietAround returns req with quiet hours holding the server's now when
// in is true (a span from an hour before to end), else only spans
// before and after it.
func quietAround(req request, now time.Time, in bool) (request, time.Time) {
	end := now.Add(time.Hour).Truncate(time.Second)
	if in {
		req.Quiet = []driver.Span{{Start: now.Add(-3 * time.Hour), End: now.Add(-2 * time.Hour)}, {Start: now.Add(-time.Hour), End: end}}
		return req, end
	}
	req.Quiet = []driver.Span{{Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour)}, {Start: end, End: end.Add(time.Hour)}}
	return req, time.Time{}
}

// keepRules returns one rule of each algorithm headroom applies to (all
// but GCRA), of limit L, on s: fixed and calendar windows, sliding window
// counters (a limit above driver.LogLine), an exact log (a sliding window
// at most LogLine), a packed sliding log and a sorted-set log (above
// LogLine).
func keepRules(s subject) []driver.Rule {
	big := int64(driver.LogLine + 50)
	return []driver.Rule{
		s.fixed("fixed", 10, time.Hour),
		{Name: "calendar", Key: s.key("calendar"), Algorithm: driver.FixedWindow, Limit: 10, Window: 24 * time.Hour, Calendar: driver.Day, Location: time.UTC},
		s.sliding("cells", big, time.Hour, 10),
		s.sliding("exact", 10, time.Hour, 10),
		s.log("log", 10, time.Hour),
		s.log("zlog", big, time.Hour),
	}
}

// TestKeep: a rule keeping k units admits an attempt iff used+cost <=
// limit-k, reports its own limit and the room left for the attempt's
// priority (limit-k-used), and an attempt without headroom may still use
// the last k units; a limit at or below k admits nothing (CostTooHigh); a
// limit override's limit is the one headroom comes off. Each algorithm
// but GCRA, through the fast scripts where they run and take.lua.
func TestKeep(t *testing.T) {
	fast, _ := plainStandalone(t)
	slow, _ := plainStandalone(t)
	slow.noFast = true
	for name, b := range map[string]*Backend{"fast": fast, "take.lua": slow} {
		for i := range keepRules(newSubject(t, "x")) {
			s := newSubject(t, "keep")
			r := keepRules(s)[i]
			t.Run(name+"/"+r.Name, func(t *testing.T) {
				L, k := r.Limit, int64(3)
				kr := keeping(r, k)
				res := take(t, b, s.request(opTake, L-k, kr))
				if !res.Allowed || res.Rules[0].Remaining != 0 || res.Rules[0].Limit != L || res.Rules[0].Used != L-k {
					t.Fatalf("Take(%d, keep %d) = %+v, want allowed, used %d, limit %d, remaining 0", L-k, k, res.Rules[0], L-k, L)
				}
				res = take(t, b, s.request(opTake, 1, kr))
				if got := res.Rules[0]; res.Allowed || got.Allowed || got.CostTooHigh || got.RetryAfter <= 0 || got.Remaining != 0 || got.Used != L-k || got.Limit != L {
					t.Fatalf("Take(1, keep %d) = %+v, want denied by headroom, used %d, limit %d, remaining 0", k, got, L-k, L)
				}
				res = take(t, b, s.request(opPeek, 1, keeping(r, 1)))
				if got := res.Rules[0]; !got.Allowed || got.Remaining != k-1 {
					t.Errorf("Peek(1, keep 1) = %+v, want allowed, remaining %d (limit-keep-used)", got, k-1)
				}
				res = take(t, b, s.request(opTake, k, r))
				if !res.Allowed || res.Rules[0].Used != L {
					t.Fatalf("Take(%d) without headroom = %+v, want allowed up to the limit", k, res.Rules[0])
				}
				res = take(t, b, s.request(opPeek, 1, keeping(r, L)))
				if got := res.Rules[0]; got.Allowed || !got.CostTooHigh {
					t.Errorf("Peek(keep = limit) = %+v, want CostTooHigh", got)
				}
				ins := take(t, b, s.request(opInspect, 0, r))
				if len(ins.Trail) != 1 || ins.Trail[0].Rule != r.Name || ins.Trail[0].Limit != L || ins.Trail[0].Used != L-k {
					t.Errorf("Inspect(…).Trail = %+v, want the headroom denial, used %d, limit %d (the rule's)", ins.Trail, L-k, L)
				}
			})
			t.Run(name+"/"+r.Name+"/limit override", func(t *testing.T) {
				s := newSubject(t, "keep-ov")
				r := keepRules(s)[i]
				L2, k := r.Limit+5, int64(2)
				setOverride(t, b, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{r.Name: L2}})
				kr := keeping(r, k)
				res := take(t, b, s.withOverrides(s.request(opTake, L2-k, kr)))
				if got := res.Rules[0]; !res.Allowed || got.Limit != L2 || got.Remaining != 0 {
					t.Fatalf("Take(%d, keep %d) under limit %d = %+v, want allowed, limit %d, remaining 0", L2-k, k, L2, got, L2)
				}
				res = take(t, b, s.withOverrides(s.request(opTake, 1, kr)))
				if got := res.Rules[0]; res.Allowed || got.Limit != L2 || got.Used != L2-k {
					t.Fatalf("Take(1, keep %d) under limit %d = %+v, want denied at %d", k, L2, got, L2-k)
				}
				res = take(t, b, s.withOverrides(s.request(opTake, k, r)))
				if !res.Allowed || res.Rules[0].Used != L2 {
					t.Errorf("Take(%d) without headroom = %+v, want allowed up to the override's limit", k, res.Rules[0])
				}
			})
		}
	}
}

// TestKeepFastScript: a request keeping headroom runs a fast script (its
// rules' keeps are part of the script's key: one per distinct keep).
func TestKeepFastScript(t *testing.T) {
	b, _ := plainStandalone(t)
	s := newSubject(t, "keep-fast")
	r := s.fixed("f", 10, time.Hour)
	src := map[int64]string{}
	for _, k := range []int64{0, 2, 4} {
		req := s.request(opTake, 1, keeping(r, k))
		src[k] = decidingSource(t, b, req)
		if src[k] == lua.Take {
			t.Fatalf("keep %d: take.lua decides, want a fast script", k)
		}
	}
	if src[0] == src[2] || src[2] == src[4] {
		t.Errorf("keeps 0, 2 and 4 share a fast script, want one each")
	}
	if got := decidingSource(t, b, s.request(opTake, 1, exemptOf(r, driver.ExemptCounted))); got != lua.Take {
		t.Errorf("an exempt rule: a fast script decides, want take.lua")
	}
}

// TestExempt: an exempt rule never denies; it reports what it would have
// decided; a take it would have denied writes one entry flagged Exempt,
// allowed or not; counted, it counts whenever the request consumes, past
// its limit; uncounted, never.
func TestExempt(t *testing.T) {
	b, _ := standalone(t)
	for _, e := range []driver.Exemption{driver.ExemptCounted, driver.ExemptUncounted} {
		for i := range keepRules(newSubject(t, "x")) {
			s := newSubject(t, "exempt")
			r := keepRules(s)[i]
			t.Run(e.String()+"/"+r.Name, func(t *testing.T) {
				L := r.Limit
				cap := s.fixed("cap", 100, time.Hour)
				take(t, b, s.request(opTake, L, r)) // full
				want := L
				if e == driver.ExemptCounted {
					want = L + 1
				}
				res := take(t, b, s.request(opTake, 1, exemptOf(r, e), cap))
				if !res.Allowed || res.Rules[0].Allowed || res.Rules[0].Used != want {
					t.Fatalf("Take(exempt %s) = %+v, want allowed, the rule reported denying, used %d", e, res, want)
				}
				res = take(t, b, s.request(opPeek, 1, r))
				if res.Rules[0].Used != want {
					t.Errorf("used after the exempt take = %d, want %d", res.Rules[0].Used, want)
				}
				// Denied by another rule: the exempt rule consumes nothing,
				// its entry is written beside the denying rule's.
				full := s.fixed("full", 1, time.Hour)
				take(t, b, s.request(opTake, 1, full))
				res = take(t, b, s.request(opTake, 1, exemptOf(r, e), full))
				if res.Allowed {
					t.Fatalf("Take(exempt, full) = allowed, want denied by full")
				}
				if got := take(t, b, s.request(opPeek, 1, r)).Rules[0].Used; got != want {
					t.Errorf("used after a denied take = %d, want %d (nothing consumed)", got, want)
				}
				ins := take(t, b, s.request(opInspect, 0, r))
				if len(ins.Trail) != 3 {
					t.Fatalf("Inspect(…).Trail = %+v, want 3 entries", ins.Trail)
				}
				for j, d := range []struct {
					rule   string
					exempt bool
				}{{r.Name, true}, {"full", false}, {r.Name, true}} {
					got := ins.Trail[j]
					if got.Rule != d.rule || got.Exempt != d.exempt || got.Shadow || got.Quiet || got.Limit != map[string]int64{r.Name: L, "full": 1}[d.rule] {
						t.Errorf("trail[%d] = %+v, want %s's entry, exempt %v", j, got, d.rule, d.exempt)
					}
				}
			})
		}
	}
}

// TestQuiet: in quiet hours an attempt is denied (Result.Quiet the span's
// end), nothing consumed, every rule evaluated; a take writes one entry
// flagged Quiet (not the rules'); outside them it decides as usual; a
// block override wins over them, an exempt override loses.
func TestQuiet(t *testing.T) {
	fast, c := plainStandalone(t)
	slow, _ := plainStandalone(t)
	slow.noFast = true
	for name, b := range map[string]*Backend{"fast": fast, "take.lua": slow} {
		t.Run(name, func(t *testing.T) { quietCases(t, b, c) })
	}
}

func quietCases(t *testing.T, b *Backend, c goredis.UniversalClient) {
	t.Run("in and out", func(t *testing.T) {
		s := newSubject(t, "quiet")
		rules := []driver.Rule{s.fixed("f", 2, time.Hour), s.sliding("s", 2, time.Hour, 4)}
		take(t, b, s.request(opTake, 2, rules[0]))
		req, end := quietAround(s.request(opTake, 1, rules...), serverNow(t, c), true)
		res := take(t, b, req)
		if res.Allowed || !res.Quiet.Equal(end) {
			t.Fatalf("Take in quiet hours = allowed %v quiet %v, want denied, quiet %v", res.Allowed, res.Quiet, end)
		}
		checkRule(t, "f (evaluated)", res.Rules[0], false, 2, 2)
		checkRule(t, "s (evaluated, not consumed)", res.Rules[1], true, 0, 2)
		req.op = opPeek
		if res := take(t, b, req); res.Allowed || !res.Quiet.Equal(end) {
			t.Errorf("Peek in quiet hours = %+v, want denied, quiet %v", res, end)
		}
		out, _ := quietAround(s.request(opTake, 1, rules[1]), serverNow(t, c), false)
		res = take(t, b, out)
		if !res.Allowed || !res.Quiet.IsZero() {
			t.Errorf("Take outside quiet hours = %+v, want allowed, no quiet", res)
		}
		checkRule(t, "s", res.Rules[0], true, 1, 2)
		ins := take(t, b, s.request(opInspect, 0, rules...))
		if len(ins.Trail) != 1 {
			t.Fatalf("Inspect(…).Trail = %+v, want the quiet entry alone", ins.Trail)
		}
		if d := ins.Trail[0]; !d.Quiet || d.Rule != "" || d.Exempt || d.Override != 0 || d.Cost != 1 ||
			d.RetryAfter <= 0 || d.RetryAfter > time.Hour || !d.At.Add(d.RetryAfter).Equal(end) {
			t.Errorf("trail[0] = %+v, want a quiet entry, retry until %v", d, end)
		}
	})
	t.Run("block wins", func(t *testing.T) {
		s := newSubject(t, "quiet-block")
		blk := setOverride(t, b, s, driver.Override{Kind: driver.Block})
		req, _ := quietAround(s.withOverrides(s.request(opTake, 1, s.fixed("f", 5, time.Hour))), serverNow(t, c), true)
		res := take(t, b, req)
		if res.Allowed || !res.Quiet.IsZero() || res.Override.ID != blk.ID {
			t.Fatalf("Take = %+v, want denied by block %d, no quiet", res, blk.ID)
		}
		ins := take(t, b, s.request(opInspect, 0, s.fixed("f", 5, time.Hour)))
		if len(ins.Trail) != 1 || ins.Trail[0].Override != blk.ID || ins.Trail[0].Quiet {
			t.Errorf("Inspect(…).Trail = %+v, want the block's entry alone", ins.Trail)
		}
	})
	t.Run("exempt override loses", func(t *testing.T) {
		s := newSubject(t, "quiet-exempt")
		setOverride(t, b, s, driver.Override{Kind: driver.Exempt, Counted: true})
		lim := setOverride(t, b, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"f": 7}})
		req, end := quietAround(s.withOverrides(s.request(opTake, 1, s.fixed("f", 5, time.Hour))), serverNow(t, c), true)
		res := take(t, b, req)
		if res.Allowed || !res.Quiet.Equal(end) || res.Override.ID != lim.ID || res.Rules[0].Limit != 7 {
			t.Fatalf("Take = %+v, want denied for quiet hours, the limit override %d reported", res, lim.ID)
		}
		if used := take(t, b, s.request(opPeek, 1, s.fixed("f", 5, time.Hour))).Rules[0].Used; used != 0 {
			t.Errorf("used = %d, want 0 (nothing consumed)", used)
		}
		req, _ = quietAround(req, serverNow(t, c), false)
		if res := take(t, b, req); !res.Allowed || res.Override.Kind != driver.Exempt {
			t.Errorf("Take outside quiet hours = %+v, want allowed by the exempt override", res)
		}
	})
	t.Run("exempt and shadow entries beside the quiet one", func(t *testing.T) {
		s := newSubject(t, "quiet-trail")
		full := s.fixed("full", 1, time.Hour)
		take(t, b, s.request(opTake, 1, full))
		req, _ := quietAround(s.request(opTake, 1, exemptOf(full, driver.ExemptCounted), shadowOf(s.fixed("sh", 0+1, time.Hour)), s.fixed("other", 0+1, time.Hour)), serverNow(t, c), true)
		take(t, b, s.request(opTake, 1, s.fixed("sh", 1, time.Hour)))
		take(t, b, req)
		ins := take(t, b, s.request(opInspect, 0, full))
		var flags []string
		for _, d := range ins.Trail {
			flags = append(flags, fmt.Sprintf("%s/exempt=%v/shadow=%v/quiet=%v", d.Rule, d.Exempt, d.Shadow, d.Quiet))
		}
		// Newest first: the quiet entry, then the rules' in order (as a
		// block's entry and the rules' are).
		want := []string{"/exempt=false/shadow=false/quiet=true", "full/exempt=true/shadow=false/quiet=false", "sh/exempt=false/shadow=true/quiet=false"}
		if !reflect.DeepEqual(flags, want) {
			t.Errorf("trail = %q, want %q", flags, want)
		}
	})
}

// TestQuietInvalid: spans a request may not carry are refused before
// anything is read or written.
func TestQuietInvalid(t *testing.T) {
	b, _ := standalone(t)
	s := newSubject(t, "quiet-invalid")
	now := time.Now()
	many := make([]driver.Span, driver.MaxQuietSpans+1)
	for i := range many {
		many[i] = driver.Span{Start: now.Add(time.Duration(2*i) * time.Hour), End: now.Add(time.Duration(2*i+1) * time.Hour)}
	}
	for name, spans := range map[string][]driver.Span{
		"too many":    many,
		"empty":       {{Start: now, End: now}},
		"overlapping": {{Start: now, End: now.Add(2 * time.Hour)}, {Start: now.Add(time.Hour), End: now.Add(3 * time.Hour)}},
	} {
		t.Run(name, func(t *testing.T) {
			req := s.request(opTake, 1, s.fixed("f", 5, time.Hour))
			req.Quiet = spans
			if _, err := b.decide(context.Background(), opTake, req.Request); err == nil {
				t.Errorf("Take(quiet %s) = nil error, want refused", name)
			}
		})
	}
	if used := take(t, b, s.request(opPeek, 1, s.fixed("f", 5, time.Hour))).Rules[0].Used; used != 0 {
		t.Errorf("used = %d, want 0", used)
	}
}

// TestMessagingReplay: an idempotent retry replays the decision exactly:
// a quiet denial (Result.Quiet), an exempt admission, a headroom denial.
func TestMessagingReplay(t *testing.T) {
	b, c := standalone(t)
	s := newSubject(t, "msg-replay")
	r := s.fixed("f", 2, time.Hour)
	take(t, b, s.request(opTake, 2, r))
	idem := func(req request, key string) request {
		req.IdempotencyKey, req.IdempotencyTTL = s.base+"!i:"+key, time.Hour
		return req
	}
	quiet, _ := quietAround(idem(s.request(opTake, 1, r), "q"), serverNow(t, c), true)
	for name, req := range map[string]request{
		"quiet":  quiet,
		"exempt": idem(s.request(opTake, 1, exemptOf(r, driver.ExemptCounted)), "x"),
		"keep":   idem(s.request(opTake, 1, keeping(s.fixed("g", 5, time.Hour), 5)), "k"),
	} {
		t.Run(name, func(t *testing.T) {
			first := take(t, b, req)
			if name == "quiet" {
				// The retry comes outside quiet hours: the decision stands.
				req, _ = quietAround(req, serverNow(t, c), false)
			}
			again := take(t, b, req)
			if !again.Replayed {
				t.Fatalf("retry = %+v, want a replay", again)
			}
			again.Replayed = false
			if !reflect.DeepEqual(first, again) {
				t.Errorf("replay = %+v, want %+v", again, first)
			}
		})
	}
	if used := take(t, b, s.request(opPeek, 1, r)).Rules[0].Used; used != 3 {
		t.Errorf("used = %d, want 3 (the counted exempt once)", used)
	}
}

// TestMessagingBatchAndCoalesced: requests with headroom, exempt rules
// and quiet hours in a batch and coalesced decide as single calls do.
func TestMessagingBatchAndCoalesced(t *testing.T) {
	b, c := plainStandalone(t)
	cb, _ := coalescing(t, redistest.Standalone(t), 4)
	ctx := context.Background()
	for name, be := range map[string]*Backend{"batch": b, "coalesced": cb} {
		t.Run(name, func(t *testing.T) {
			s := newSubject(t, "msg-"+name)
			rules := []driver.Rule{s.fixed("f", 3, time.Hour), s.sliding("s", 200, time.Hour, 4)}
			kept := []driver.Rule{keeping(rules[0], 1), rules[1]}
			now := serverNow(t, c)
			quiet, end := quietAround(s.request(opTake, 1, kept...), now, true)
			loud, _ := quietAround(s.request(opTake, 1, kept...), now, false)
			reqs := []driver.Request{loud.Request, loud.Request, quiet.Request, loud.Request,
				s.request(opTake, 1, exemptOf(rules[0], driver.ExemptCounted), rules[1]).Request, s.request(opTake, 1, rules...).Request}
			want := []struct {
				allowed bool
				used    int64
				quiet   bool
			}{{true, 1, false}, {true, 2, false}, {false, 2, true}, {false, 2, false}, {true, 3, false}, {false, 3, false}}
			var out []driver.BatchResult
			if name == "batch" {
				out = be.TakeBatch(ctx, reqs)
			} else {
				for _, r := range reqs { // in order: each decides on the one before's state
					res, err := be.Take(ctx, r)
					out = append(out, driver.BatchResult{Result: res, Err: err})
				}
			}
			for i, w := range want {
				if out[i].Err != nil {
					t.Fatalf("request %d: %v", i, out[i].Err)
				}
				got := out[i].Result
				if got.Allowed != w.allowed || got.Rules[0].Used != w.used || got.Quiet.IsZero() == w.quiet || (w.quiet && !got.Quiet.Equal(end)) {
					t.Errorf("request %d = allowed %v used %d quiet %v, want %v %d quiet %v", i, got.Allowed, got.Rules[0].Used, got.Quiet, w.allowed, w.used, w.quiet)
				}
			}
			pk := be.PeekBatch(ctx, []driver.Request{quiet.Request, loud.Request})
			if pk[0].Err != nil || pk[1].Err != nil {
				t.Fatalf("PeekBatch: %v, %v", pk[0].Err, pk[1].Err)
			}
			if p0, p1 := pk[0].Result, pk[1].Result; p0.Allowed || !p0.Quiet.Equal(end) || p1.Allowed || p1.Rules[0].Remaining != 0 {
				t.Errorf("PeekBatch = %+v, want a quiet denial, then a headroom denial", pk)
			}
		})
	}
}

// TestMessagingCoalescedConcurrent: concurrent fast attempts with quiet
// hours and headroom coalesce into multi-attempt scripts and decide as
// take.lua would: exactly limit-keep admitted outside quiet hours, none
// inside.
func TestMessagingCoalescedConcurrent(t *testing.T) {
	cb, c := coalescing(t, redistest.Standalone(t), 8)
	ctx := context.Background()
	s := newSubject(t, "msg-co")
	r := keeping(s.fixed("f", 30, time.Hour), 10)
	now := serverNow(t, c)
	for _, in := range []bool{true, false} {
		req, _ := quietAround(s.request(opTake, 1, r), now, in)
		errs := make(chan error, 40)
		admitted := make(chan bool, 40)
		for range 40 {
			go func() {
				res, err := cb.Take(ctx, req.Request)
				errs <- err
				admitted <- res.Allowed
			}()
		}
		n := 0
		for range 40 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			if <-admitted {
				n++
			}
		}
		want := map[bool]int{true: 0, false: 20}[in]
		if n != want {
			t.Errorf("quiet %v: %d admitted, want %d", in, n, want)
		}
	}
}

// TestMessagingDeployments: headroom, exempt rules and quiet hours on a
// cluster and through Sentinel, through take.lua and fast scripts.
func TestMessagingDeployments(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		b, c := cluster(t)
		messagingOn(t, b, c)
	})
	t.Run("sentinel", func(t *testing.T) {
		b, c := sentinelBackend(t, redistest.NewSentinel(t))
		messagingOn(t, b, c)
	})
}

func messagingOn(t *testing.T, b *Backend, c goredis.UniversalClient) {
	s := newSubject(t, "msg-deploy")
	r := s.fixed("f", 3, time.Hour)
	if res := take(t, b, s.request(opTake, 2, keeping(r, 1))); !res.Allowed {
		t.Fatalf("Take(2, keep 1) = %+v, want allowed", res)
	}
	if res := take(t, b, s.request(opTake, 1, keeping(r, 1))); res.Allowed {
		t.Fatalf("Take(1, keep 1) = allowed, want denied by headroom")
	}
	if res := take(t, b, s.request(opTake, 2, exemptOf(r, driver.ExemptCounted))); !res.Allowed {
		t.Fatalf("Take(exempt) = denied, want allowed")
	}
	req, end := quietAround(s.request(opTake, 1, s.log("l", 3, time.Hour)), serverNow(t, c), true)
	if res := take(t, b, req); res.Allowed || !res.Quiet.Equal(end) {
		t.Fatalf("Take in quiet hours = %+v, want denied until %v", res, end)
	}
	ins := take(t, b, s.request(opInspect, 0, r))
	if got := ins.Rules[0].Used; got != 4 {
		t.Errorf("used = %d, want 4 (counted past the limit)", got)
	}
	if len(ins.Trail) != 3 || !ins.Trail[0].Quiet || !ins.Trail[1].Exempt || ins.Trail[2].Exempt {
		t.Errorf("trail = %+v, want quiet, exempt, headroom entries", ins.Trail)
	}
}

// TestMessagingBareRefused: bare mode refuses headroom, exempt rules and
// quiet hours (errors.ErrUnsupported) before reading or writing anything.
func TestMessagingBareRefused(t *testing.T) {
	s := newSubject(t, "msg-bare")
	r := driver.Rule{Name: "s", Key: s.key("s"), Algorithm: driver.SlidingWindow, Limit: 5, Window: time.Hour, SubWindows: 4}
	quiet := s.request(opTake, 1, r)
	quiet.Quiet = []driver.Span{{Start: time.Now().Add(-time.Hour), End: time.Now().Add(time.Hour)}}
	for name, req := range map[string]request{
		"keep":   s.request(opTake, 1, keeping(r, 1)),
		"exempt": s.request(opTake, 1, exemptOf(r, driver.ExemptUncounted)),
		"quiet":  quiet,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := newBareReq(req.op, req.Request, bareReport())
			if !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("bare %s = %v, want errors.ErrUnsupported", name, err)
			}
		})
	}
}

// TestFastMessagingMatchesTake: the fast scripts decide headroom and
// quiet hours as take.lua does: each fast policy with headroom on every
// rule but GCRA's, random takes and peeks, some in quiet hours, with and
// without overrides (a limit override that headroom comes off, an exempt
// one that quiet hours beat), the same decisions, quiet ends and trails.
func TestFastMessagingMatchesTake(t *testing.T) {
	fast, c := plainStandalone(t)
	slow, _ := plainStandalone(t)
	slow.noFast = true
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(37, 1))
	for name := range fastPolicies(newSubject(t, "x")) {
		for _, ov := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/overrides=%v", name, ov), func(t *testing.T) {
				subs := []subject{newSubject(t, "a"), newSubject(t, "b")}
				rules := make([][]driver.Rule, 2)
				for i, s := range subs {
					rules[i] = fastPolicies(s)[name]
					for j := range rules[i] {
						if r := &rules[i][j]; r.Algorithm != driver.GCRA {
							r.Keep = int64(j % 2)
						}
					}
					if ov {
						setOverride(t, fast, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{rules[i][0].Name: rules[i][0].Limit + 2}})
						setOverride(t, fast, s, driver.Override{Kind: driver.Exempt, Counted: true, Until: serverNow(t, c).Add(time.Hour)})
					}
				}
				probe, _ := quietAround(subs[0].request(opTake, 1, rules[0]...), serverNow(t, c), true)
				if decidingSource(t, fast, probe) == lua.Take {
					t.Fatalf("policy %s: no fast script", name)
				}
				var most time.Duration
				for step := range 20 {
					o, cost := opTake, int64(1+rnd.IntN(3))
					if rnd.IntN(5) == 0 {
						o = opPeek
					}
					in := rnd.IntN(3) == 0
					now := serverNow(t, c)
					var got [2]driver.Result
					var began, ended [2]time.Time
					for i, s := range subs {
						r := s.request(o, cost, rules[i]...)
						if ov {
							r = s.withOverrides(r)
						}
						r, _ = quietAround(r, now, in)
						began[i] = time.Now()
						res, err := []*Backend{fast, slow}[i].do(ctx, r)
						ended[i] = time.Now()
						if err != nil {
							t.Fatalf("step %d: %v subject %d: %v", step, o, i, err)
						}
						got[i] = res
					}
					most = max(most, apart(began[:], ended[:], 0, 1))
					what := fmt.Sprintf("step %d (%v, cost %d, quiet %v)", step, o, cost, in)
					sameResult(t, what, got[0], got[1], most)
					if !got[0].Quiet.Equal(got[1].Quiet) || got[0].Quiet.IsZero() == in {
						t.Fatalf("%s: quiet %v and %v, want both %v", what, got[0].Quiet, got[1].Quiet, in)
					}
					if a, b := got[0].Override, got[1].Override; a.Kind != b.Kind || !reflect.DeepEqual(a.Limits, b.Limits) {
						t.Fatalf("%s: override %+v, want %+v", what, a, b)
					}
				}
				trails := make([][]string, 2)
				for i, s := range subs {
					tr, err := fast.c.LRange(ctx, s.trail(), 0, -1).Result()
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range tr {
						f := strings.Split(e, "|")
						f[0], f[6] = "", "" // the time, retry-after
						trails[i] = append(trails[i], strings.Join(f, "|"))
					}
				}
				if !slices.Equal(trails[0], trails[1]) {
					t.Errorf("trails differ:\nfast     %q\ntake.lua %q", trails[0], trails[1])
				}
			})
		}
	}
}

// TestMessagingTargetShapeFast: issue 37's target shape, the seed policy
// "push" (four sliding windows over two sets of dimensions) plus quiet
// hours, a headroom rule and a calendar-day rule in the recipient's zone
// (driver.Request.Zone), runs one fast script, and coalesced concurrent
// calls share multi-attempt runs of it: as many admitted as take.lua
// admits.
func TestMessagingTargetShapeFast(t *testing.T) {
	cb, c := coalescing(t, redistest.Standalone(t), 8)
	b, _ := plainStandalone(t)
	ctx := context.Background()
	s := newSubject(t, "msg-target")
	user, content := s.base+"u", s.base+"u:c"
	in := func(g string, r driver.Rule) driver.Rule {
		r.Group = g
		return r
	}
	rules := []driver.Rule{
		in(user, s.sliding("recv-1m", 15, time.Minute, 0)),
		in(user, keeping(s.sliding("recv-24h", 50, 24*time.Hour, 0), 20)),
		in(content, s.sliding("content-59s", 2, 59*time.Second, 0)),
		in(content, s.sliding("content-59m", 5, 59*time.Minute, 0)),
		in(user, driver.Rule{Name: "day", Key: s.key("day"), Algorithm: driver.FixedWindow, Limit: 40, Window: 24 * time.Hour, Calendar: driver.Day, Location: time.UTC}),
	}
	req, _ := quietAround(s.request(opTake, 1, rules...), serverNow(t, c), false)
	req.Zone = newYork
	if decidingSource(t, b, req) == lua.Take || decidingSource(t, cb, req) == lua.Take {
		t.Fatalf("the target shape runs take.lua, want a fast script")
	}
	before := evalshaCalls(t, c)
	const n = 40
	errs, admitted := make(chan error, n), make(chan bool, n)
	for i := range n {
		go func() {
			r := req
			r.Rules = slices.Clone(rules)
			for j := 2; j < 4; j++ { // a content of its own per 2 calls: content-59s admits both
				r.Rules[j].Key += fmt.Sprint(":", i/2)
				r.Rules[j].Group += fmt.Sprint(":", i/2)
			}
			res, err := cb.Take(ctx, r.Request)
			errs <- err
			admitted <- res.Allowed
		}()
	}
	got := 0
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if <-admitted {
			got++
		}
	}
	// recv-1m admits 15; recv-24h's headroom (30) and the day's 40 allow more.
	if got != 15 {
		t.Errorf("%d admitted, want 15 (recv-1m)", got)
	}
	if calls := evalshaCalls(t, c) - before; calls >= n {
		t.Logf("%d EVALSHA calls for %d decisions: none coalesced (a slow machine may serialize them)", calls, n)
	}
}

// TestMessagingModules: headroom, exempt rules and quiet hours on the
// module strategies (take.lua's modsliding and cell fragments): TairHash
// and native hash-field expiry sliding windows count a counted exempt
// past the limit; on redis-cell (GCRA: no headroom) an exempt rule never
// denies, and counts only while CL.THROTTLE admits (docs/MODULES.md).
func TestMessagingModules(t *testing.T) {
	for _, tc := range []struct {
		env     string
		rule    func(s subject) driver.Rule
		counted int64 // used after a full rule's counted exempt take of 1
		want    capability.Strategy
	}{
		{"FREQCAP_TEST_TAIRHASH", func(s subject) driver.Rule { return s.sliding("s", 200, time.Minute, 6) }, 201, capability.TairHashLua},
		{"FREQCAP_TEST_HFE", func(s subject) driver.Rule { return s.sliding("s", 200, time.Minute, 6) }, 201, capability.HFELua},
		{"FREQCAP_TEST_CELL", func(s subject) driver.Rule { return s.gcra("g", 6, time.Hour, 4) }, 5, capability.CellLua},
	} {
		t.Run(tc.env, func(t *testing.T) {
			addr := moduleAddr(t, tc.env)
			b, c := moduleBackend(t, addr, modStrategies)
			s := newSubject(t, "msg-mod")
			r := tc.rule(s)
			wantStrategy(t, b, r.Algorithm, tc.want)
			L := r.ReportedLimit()
			if r.Algorithm != driver.GCRA {
				res := take(t, b, s.request(opTake, L-10, keeping(r, 10)))
				if !res.Allowed || res.Rules[0].Remaining != 0 {
					t.Fatalf("Take(keep 10) = %+v, want allowed, remaining 0", res.Rules[0])
				}
				if res := take(t, b, s.request(opTake, 1, keeping(r, 10))); res.Allowed {
					t.Fatalf("Take(1, keep 10) = allowed, want denied by headroom")
				}
				take(t, b, s.request(opTake, 10, r))
			} else {
				take(t, b, s.request(opTake, L, r))
			}
			for _, e := range []driver.Exemption{driver.ExemptUncounted, driver.ExemptCounted} {
				res := take(t, b, s.request(opTake, 1, exemptOf(r, e)))
				if !res.Allowed || res.Rules[0].Allowed {
					t.Fatalf("Take(exempt %s) = %+v, want allowed, the rule reported denying", e, res)
				}
			}
			if got := take(t, b, s.request(opPeek, 1, r)).Rules[0].Used; got != tc.counted {
				t.Errorf("used = %d, want %d", got, tc.counted)
			}
			req, end := quietAround(s.request(opTake, 1, s.fixed("f", 5, time.Hour), exemptOf(r, driver.ExemptCounted)), serverNow(t, c), true)
			if res := take(t, b, req); res.Allowed || !res.Quiet.Equal(end) {
				t.Errorf("Take in quiet hours = %+v, want denied until %v", res, end)
			}
			if got := take(t, b, s.request(opPeek, 1, r)).Rules[0].Used; got != tc.counted {
				t.Errorf("used after a quiet denial = %d, want %d", got, tc.counted)
			}
			ins := take(t, b, s.request(opInspect, 0, r))
			if len(ins.Trail) < 3 || !ins.Trail[0].Quiet || !ins.Trail[1].Exempt || !ins.Trail[2].Exempt {
				t.Errorf("trail = %+v, want quiet, then exempt entries", ins.Trail)
			}
		})
	}
}
