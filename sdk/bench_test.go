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
	push, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.Sliding("recv-1m", 15, time.Minute).By("user"),
		sdk.Sliding("recv-24h", 50, 24*time.Hour).By("user"),
		sdk.Sliding("content-59s", 2, 59*time.Second).By("user", "content"),
		sdk.Sliding("content-59m", 5, 59*time.Minute).By("user", "content"),
	})
	if err != nil {
		b.Fatal(err)
	}
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
