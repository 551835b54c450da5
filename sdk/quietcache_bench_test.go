package sdk

import (
	"testing"
	"time"
)

// BenchmarkQuietSpans is the sdk's cost of one attempt's quiet spans
// (driver.Request.Quiet), as each attempt under quiet hours pays it: the
// clock moves a microsecond per call.
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
	}{
		{"quiet", time.Date(2026, 3, 4, 21, 30, 0, 0, berlin)},
		{"day", time.Date(2026, 3, 4, 12, 0, 0, 0, berlin)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			now := tc.now
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				if q := p.quietSpans(berlin, now); len(q) < 2 {
					b.Fatalf("quietSpans = %v, want its frames", q)
				}
			}
		})
	}
}
