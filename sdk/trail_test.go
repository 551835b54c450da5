package sdk_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// hostileValues are dimension values a trail entry must carry through
// unchanged: its separators, the escape character, line breaks, unicode,
// key syntax, and the longest value, entirely of bytes to escape.
var hostileValues = []struct{ name, v string }{
	{"pipe", "a|b|c"},
	{"comma", "x,y"},
	{"equals", "k=v"},
	{"percent", "100%25 %zz %"},
	{"newlines", "line\nbreak\r\n"},
	{"unicode", "ü日本🙂\u202Eexe"},
	{"key syntax", "{tag}:x y"},
	{"plus", "+"},
	{"longest", strings.Repeat("|", sdk.MaxValueLen)},
}

func TestTrailValuesMemory(t *testing.T) {
	clock := fakeclock.New(fakeNow)
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	p, err := sdk.NewPolicy("msg", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 100, time.Minute).By("user"),
		sdk.SlidingWindow("content-59s", 1, 59*time.Second).By("user", "content", "campaign"),
	}, sdk.WithTrail(4, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range hostileValues {
		t.Run(tc.name, func(t *testing.T) {
			user := "u-" + tc.name
			s := sdk.Subject{"user": user, "content": tc.v, "campaign": "c1"}
			if d, err := lim.Allow(ctx, p, s); err != nil || !d.Allowed {
				t.Fatalf("Allow(…) = %+v, %v, want allowed", d, err)
			}
			if d, err := lim.Allow(ctx, p, s); err != nil || d.Allowed {
				t.Fatalf("Allow(…) = %+v, %v, want denied", d, err)
			}
			ins, err := lim.Admin().Inspect(ctx, p, sdk.Subject{"user": user})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"content": tc.v, "campaign": "c1"}
			if len(ins.Denials) != 1 || !maps.Equal(ins.Denials[0].Values, want) || ins.Denials[0].ValuesPartial {
				t.Fatalf("Inspect(…).Denials = %+v, want one denial with values %q", ins.Denials, want)
			}
			if d := ins.Denials[0]; d.Rule != "content-59s" || !d.At.Equal(clock.Now()) || !d.Until().Equal(d.At.Add(d.RetryAfter)) || d.RetryAfter <= 0 {
				t.Errorf("denial = %+v, want content-59s at %v with a retry-after", d, clock.Now())
			}
		})
	}

	t.Run("history", func(t *testing.T) {
		s := sdk.Subject{"user": "h"}
		start := clock.Now()
		for i := range 5 {
			s["content"], s["campaign"] = fmt.Sprint("m", i), "c"
			lim.Allow(ctx, p, s)
			lim.Allow(ctx, p, s)
			ins, err := lim.Admin().Inspect(ctx, p, sdk.Subject{"user": "h"})
			if err != nil {
				t.Fatal(err)
			}
			// Newest first; full once it holds TrailMax (4) entries.
			n := min(i+1, 4)
			if len(ins.Denials) != n || ins.TrailFull != (n == 4) || ins.TrailMax != 4 || ins.TrailTTL != time.Hour {
				t.Fatalf("after %d denials: %d entries, full %v, max %d, ttl %v; want %d, %v, 4, 1h", i+1, len(ins.Denials), ins.TrailFull, ins.TrailMax, ins.TrailTTL, n, n == 4)
			}
			if got := ins.Denials[0].Values["content"]; got != fmt.Sprint("m", i) {
				t.Errorf("newest denial's content = %q, want m%d", got, i)
			}
			if want := start.Add(time.Duration(i+1-n) * time.Second); !ins.TrailSince().Equal(want) {
				t.Errorf("after %d denials: TrailSince() = %v, want %v", i+1, ins.TrailSince(), want)
			}
			clock.Advance(time.Second)
		}
	})

	t.Run("no values", func(t *testing.T) {
		// A denial by a rule of the shard dimensions alone records the
		// attempt's other values all the same; an attempt without any
		// records none.
		q, err := sdk.NewPolicy("solo", []sdk.Rule{sdk.FixedWindow("one", 1, time.Hour).By("user")})
		if err != nil {
			t.Fatal(err)
		}
		s := sdk.Subject{"user": "n"}
		lim.Allow(ctx, q, s)
		lim.Allow(ctx, q, s)
		ins, err := lim.Admin().Inspect(ctx, q, s)
		if err != nil || len(ins.Denials) != 1 || ins.Denials[0].Values != nil {
			t.Fatalf("Inspect(…) = %+v, %v, want one denial without values", ins.Denials, err)
		}
	})
}

// TestTrailValuesBounds: at most 8 values, at most 1,024 bytes
// (Denial.Values); what is left out is said.
func TestTrailValuesBounds(t *testing.T) {
	clock := fakeclock.New(fakeNow)
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	dims := []string{"user"}
	for i := range 10 {
		dims = append(dims, fmt.Sprintf("d%02d", i))
	}
	p, err := sdk.NewPolicy("wide", []sdk.Rule{
		sdk.FixedWindow("all", 1, time.Hour).By(dims...),
		sdk.FixedWindow("user", 100, time.Hour).By("user"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		value   func(i int) string
		wantN   int
		partial bool
	}{
		{"short values", func(i int) string { return fmt.Sprint("v", i) }, 8, true},
		{"longest values, all escaped", func(int) string { return strings.Repeat(",", sdk.MaxValueLen) }, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sdk.Subject{"user": tc.name}
			for i, d := range dims[1:] {
				s[d] = tc.value(i)
			}
			lim.Allow(ctx, p, s)
			lim.Allow(ctx, p, s)
			ins, err := lim.Admin().Inspect(ctx, p, sdk.Subject{"user": tc.name})
			if err != nil || len(ins.Denials) != 1 {
				t.Fatalf("Inspect(…) = %+v, %v, want one denial", ins.Denials, err)
			}
			d := ins.Denials[0]
			if len(d.Values) != tc.wantN || d.ValuesPartial != tc.partial {
				t.Errorf("denial values = %d (partial %v), want %d (partial %v)", len(d.Values), d.ValuesPartial, tc.wantN, tc.partial)
			}
			for i, dim := range dims[1 : 1+tc.wantN] { // the first ones, in policy order
				if d.Values[dim] != tc.value(i) {
					t.Errorf("value of %s = %q, want %q", dim, d.Values[dim], tc.value(i))
				}
			}
		})
	}
}
