package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestCheck: Check refuses what Take refuses for its input, with the same
// sentinel, and decides nothing.
func TestCheck(t *testing.T) {
	lim := sdk.New(memory.New(nil))
	p, err := sdk.NewPolicy("p", []sdk.Rule{
		sdk.FixedWindow("a", 1, time.Minute).By("user"),
		sdk.FixedWindow("b", 1, time.Minute).By("user", "path"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ok := sdk.Subject{"user": "u", "path": "/x"}
	tests := []struct {
		name string
		a    sdk.Attempt
		want error
	}{
		{"valid", sdk.Attempt{Subject: ok}, nil},
		{"valid with cost and key", sdk.Attempt{Subject: ok, Cost: 1, IdempotencyKey: "k"}, nil},
		{"dimension missing", sdk.Attempt{Subject: sdk.Subject{"user": "u"}}, sdk.ErrInvalidSubject},
		{"empty value", sdk.Attempt{Subject: sdk.Subject{"user": "u", "path": ""}}, sdk.ErrInvalidSubject},
		{"value too long", sdk.Attempt{Subject: sdk.Subject{"user": strings.Repeat("u", sdk.MaxValueLen+1), "path": "/x"}}, sdk.ErrInvalidSubject},
		{"negative cost", sdk.Attempt{Subject: ok, Cost: -1}, sdk.ErrInvalidCost},
		{"cost above MaxLimit", sdk.Attempt{Subject: ok, Cost: driver.MaxLimit + 1}, sdk.ErrInvalidCost},
		{"key too long", sdk.Attempt{Subject: ok, IdempotencyKey: strings.Repeat("k", sdk.MaxIdempotencyKeyLen+1)}, sdk.ErrInvalidIdempotencyKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := lim.Check(p, tc.a)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Check(%s) = %v, want %v", tc.name, err, tc.want)
			}
			if _, terr := lim.Take(context.Background(), p, tc.a); (terr == nil) != (err == nil) {
				t.Errorf("Check(%s) = %v but Take = %v: they disagree", tc.name, err, terr)
			}
		})
	}
}

// TestCheckDecidesNothing: checking an attempt consumes nothing.
func TestCheckDecidesNothing(t *testing.T) {
	lim := sdk.New(memory.New(nil))
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("a", 1, time.Minute).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": "u"}
	for range 3 {
		if err := lim.Check(p, sdk.Attempt{Subject: s}); err != nil {
			t.Fatalf("Check = %v", err)
		}
	}
	in, err := lim.Admin().Inspect(context.Background(), p, s)
	if err != nil || in.Rules[0].Used != 0 {
		t.Errorf("Inspect after 3 checks = %+v, %v; want used 0", in.Rules, err)
	}
}
