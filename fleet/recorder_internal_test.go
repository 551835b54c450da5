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
// allowed and a denied decision of a 4-rule policy over 1000 subjects.
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
	for _, allowed := range []bool{true, false} {
		name := "denied"
		if allowed {
			name = "allowed"
		}
		b.Run(name, func(b *testing.B) {
			r, err := NewRecorder(memory.New(nil), &Options{FlushEvery: -1})
			if err != nil {
				b.Fatal(err)
			}
			d := sdk.Decision{Allowed: allowed, Policy: "push", At: time.Now()}
			for i := range rules {
				d.Rules = append(d.Rules, sdk.RuleDecision{Rule: rules[i].Name, Allowed: allowed || i > 0, Limit: 15, Remaining: 3})
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					r.Observe(sdk.Event{Policy: "push", PolicyRef: p, Op: "take", Shard: bases[i%len(bases)], Decision: d})
				}
			})
		})
	}
}
