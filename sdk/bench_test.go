package sdk_test

import (
	"context"
	"strconv"
	"testing"

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
