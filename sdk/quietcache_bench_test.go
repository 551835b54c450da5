package sdk

import (
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// BenchmarkQuietSpans is the sdk's cost of one attempt's quiet spans
// (driver.Request.Quiet), as each attempt under quiet hours pays it: the
// clock moves a microsecond per call (quiet, day: through the policy's
// memo; uncached: quietFrame around now, as before the memo; a minute
// per call: the memo's worst case, each call a new minute).
func BenchmarkQuietSpans(b *testing.B) {
	berlin, err := LoadZone("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	p, err := NewPolicy("p", []Rule{FixedWindow("f", 5, time.Hour).By("u")},
		WithQuietHours(berlin, QuietPeriod{From: 21 * time.Hour, To: 8 * time.Hour, Days: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}}))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		now  time.Time
		step time.Duration
		f    func(now time.Time) []driver.Span
	}{
		{"quiet", time.Date(2026, 3, 4, 21, 30, 0, 0, berlin), time.Microsecond, nil},
		{"day", time.Date(2026, 3, 4, 12, 0, 0, 0, berlin), time.Microsecond, nil},
		{"uncached/quiet", time.Date(2026, 3, 4, 21, 30, 0, 0, berlin), time.Microsecond, func(now time.Time) []driver.Span {
			q, _ := p.quietFrame(berlin, now.Add(-quietReach), now.Add(quietReach), now)
			return q
		}},
		{"uncached/day", time.Date(2026, 3, 4, 12, 0, 0, 0, berlin), time.Microsecond, func(now time.Time) []driver.Span {
			q, _ := p.quietFrame(berlin, now.Add(-quietReach), now.Add(quietReach), now)
			return q
		}},
		{"minute-per-call", time.Date(2026, 3, 4, 12, 0, 0, 0, berlin), time.Minute, nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f := tc.f
			if f == nil {
				f = func(now time.Time) []driver.Span { return p.quietSpans(berlin, now) }
			}
			now := tc.now
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(tc.step)
				if q := f(now); len(q) < 2 {
					b.Fatalf("quietSpans = %v, want its frames", q)
				}
			}
		})
	}
}
