package fleet

import (
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
)

// BenchmarkRecord is the recorder's own cost per decision (what a Limiter
// with a recorder adds to a decision), on all CPUs at once, for an
// allowed and a denied decision of a 4-rule policy over 1000 subjects,
// without the traffic sample (sample=0) and with the default one (1 in
// 16 subjects logged, the recorder flushing every second).
func BenchmarkRecord(b *testing.B) {
	var rules []sdk.Rule
	for i := range 4 {
		rules = append(rules, sdk.SlidingWindow("r"+strconv.Itoa(i), 15, time.Minute).By("user"))
	}
	p, err := sdk.NewPolicy("push", rules)
	if err != nil {
		b.Fatal(err)
	}
	bases := make([]string, 1000)
	for i := range bases {
		bases[i] = "1882934" + strconv.Itoa(i) // the subjects' shard values
	}
	for _, sample := range []int{-1, DefaultSample} {
		for _, allowed := range []bool{true, false} {
			name := "denied"
			if allowed {
				name = "allowed"
			}
			name += "/sample=" + strconv.Itoa(max(sample, 0))
			b.Run(name, func(b *testing.B) {
				// With a sample, the recorder's goroutine flushes every
				// second, as in a service (the sampled entries go).
				every := time.Duration(-1)
				if sample > 0 {
					every = time.Second
				}
				r, err := NewRecorder(memory.New(nil), &Options{FlushEvery: every, Sample: sample})
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				d := sdk.Decision{Allowed: allowed, Policy: "push", At: time.Now()}
				for i := range rules {
					d.Rules = append(d.Rules, sdk.RuleDecision{Rule: rules[i].Name, Allowed: allowed || i > 0, Limit: 15, Remaining: 3})
				}
				subject := sdk.Subject{"user": "u"}
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for i := 0; pb.Next(); i++ {
						r.Observe(sdk.Event{Policy: "push", PolicyRef: p, Op: "take", Shard: bases[i%len(bases)], Decision: d, Subject: subject, Cost: 1})
					}
				})
			})
		}
	}
}

// BenchmarkSampleEntry is what logging one attempt of a sampled subject
// costs (its entry's encoding and queueing, a flush draining the queue
// every 10 000 entries): an attempt of a subject outside the sample pays
// none of it, so the default sample adds about 1/16 of it per decision.
func BenchmarkSampleEntry(b *testing.B) {
	p, err := sdk.NewPolicy("push", []sdk.Rule{sdk.SlidingWindow("r", 15, time.Minute).By("user", "content")})
	if err != nil {
		b.Fatal(err)
	}
	r, err := NewRecorder(memory.New(nil), &Options{FlushEvery: -1, Sample: 1})
	if err != nil {
		b.Fatal(err)
	}
	ps := r.stats(p)
	e := sdk.Event{Policy: "push", PolicyRef: p, Op: "take", Shard: "1882934", Cost: 1,
		Subject:  sdk.Subject{"user": "1882934", "content": "fp-0a1b2c3d"},
		Decision: sdk.Decision{Allowed: true, Policy: "push", At: time.Now(), Rules: []sdk.RuleDecision{{Rule: "r", Allowed: true, Limit: 15}}}}
	b.ReportAllocs()
	for i := range b.N {
		if i%10000 == 0 {
			ps.sample.drain()
		}
		r.sample(ps, &e, 42)
	}
}
