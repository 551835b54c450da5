package sdk_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
)

// BenchmarkAllowSeed measures the sdk's own cost per decision (key
// building, request, decision) on the seed policy, over the memory
// backend, for 1000 subjects.
func BenchmarkAllowSeed(b *testing.B) {
	push := loadPolicies(b)["push"] // internal/seed/policies.yaml
	lim := sdk.New(memory.New(nil))
	subjects := make([]sdk.Subject, 1000)
	for i := range subjects {
		subjects[i] = sdk.Subject{"user": "1882934" + strconv.Itoa(i), "content": sdk.Fingerprint(strconv.Itoa(i % 4))}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := lim.Allow(ctx, push, subjects[i%len(subjects)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeQuiet is BenchmarkAllowSeed's measure for a messaging
// attempt under quiet hours (a night's and a weekend lunch's, in the
// attempt's zone), on the system clock: the quiet spans the sdk sends
// with each request included.
func BenchmarkTakeQuiet(b *testing.B) {
	berlin, err := sdk.LoadZone("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("f", 1<<40, time.Hour).By("user")},
		sdk.WithQuietHours(berlin, sdk.QuietPeriod{From: 21 * time.Hour, To: 8 * time.Hour},
			sdk.QuietPeriod{From: 12 * time.Hour, To: 13 * time.Hour, Days: []time.Weekday{time.Saturday, time.Sunday}}))
	if err != nil {
		b.Fatal(err)
	}
	lim := sdk.New(memory.New(nil))
	attempts := make([]sdk.Attempt, 1000)
	for i := range attempts {
		attempts[i] = sdk.Attempt{Subject: sdk.Subject{"user": "1882934" + strconv.Itoa(i)}, Zone: berlin}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := lim.Take(ctx, p, attempts[i%len(attempts)]); err != nil {
			b.Fatal(err)
		}
	}
}
