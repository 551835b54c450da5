package sdk

import (
	"maps"
	"strings"
	"testing"
	"time"
)

func TestTrailValuesEncoding(t *testing.T) {
	p, err := NewPolicy("p", []Rule{
		SlidingWindow("a", 1, time.Minute).By("user", "content", "campaign"),
		SlidingWindow("b", 1, time.Minute).By("user"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    Subject
		want string
	}{
		{"none", Subject{"user": "u"}, ""},
		{"shard values are not recorded", Subject{"user": "u|,", "content": "c"}, "content=c"},
		{"policy order, extra dimensions ignored", Subject{"user": "u", "campaign": "k", "content": "c", "x": "y"}, "content=c,campaign=k"},
		{"separators escaped", Subject{"user": "u", "content": "a|b,c=d%\n"}, "content=a%7Cb%2Cc%3Dd%25%0A"},
		{"unicode passes", Subject{"user": "u", "content": "日本"}, "content=日本"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := trailValues(p, tc.s)
			if got != tc.want {
				t.Fatalf("trailValues(…) = %q, want %q", got, tc.want)
			}
			if strings.ContainsAny(got, "|\r\n") {
				t.Errorf("trailValues(…) = %q holds a separator", got)
			}
			vals, partial := parseTrailValues(got)
			want := map[string]string{}
			for _, d := range []string{"content", "campaign"} {
				if v, ok := tc.s[d]; ok {
					want[d] = v
				}
			}
			if len(want) == 0 {
				want = nil
			}
			if !maps.Equal(vals, want) || partial {
				t.Errorf("parseTrailValues(%q) = %q, %v, want %q, false", got, vals, partial, want)
			}
		})
	}
	// Malformed fields (never written by this sdk) decode what they can.
	for _, f := range []string{"content", "=x", "content=%zz", "content=%4", "+"} {
		if vals, partial := parseTrailValues(f); vals != nil || !partial {
			t.Errorf("parseTrailValues(%q) = %q, %v, want nil, true", f, vals, partial)
		}
	}
	if got := len(trailValues(p, Subject{"user": "u", "content": strings.Repeat("|", MaxValueLen), "campaign": strings.Repeat("%", MaxValueLen)})); got > maxTrailValuesLen {
		t.Errorf("encoded values are %d bytes, want <= %d", got, maxTrailValuesLen)
	}
}

// BenchmarkTrailValues is the cost a consuming request pays to record
// what it would block (the seed's push policy: one content value).
func BenchmarkTrailValues(b *testing.B) {
	p, err := NewPolicy("push", []Rule{
		SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
	})
	if err != nil {
		b.Fatal(err)
	}
	s := Subject{"user": "18829340001", "content": Fingerprint("hello")}
	b.ReportAllocs()
	for b.Loop() {
		if trailValues(p, s) == "" {
			b.Fatal("no values")
		}
	}
}
