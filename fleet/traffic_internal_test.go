package fleet

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestSampleFormat: an entry decodes to what was encoded; values are
// hashed alike in every entry; entries no Recorder wrote are refused.
func TestSampleFormat(t *testing.T) {
	at := time.UnixMilli(1764172800123)
	s := sdk.Subject{"user": "u|1,=%", "content": "c"}
	tests := []struct {
		name string
		a    SampledAttempt
		n    int
		s    sdk.Subject
	}{
		{"allowed", SampledAttempt{At: at, Cost: 3, Op: "take", Allowed: true, Person: 0xfeed}, 16, s},
		{"denied cached", SampledAttempt{At: at, Cost: 1, Op: "wait", Cached: true, Person: 1}, 1, s},
		{"exempt", SampledAttempt{At: at, Cost: 1, Op: "reserve", Allowed: true, Override: driver.Exempt, Person: 2}, 2, s},
		{"block", SampledAttempt{At: at, Cost: 1, Op: "take", Override: driver.Block, Person: 3}, 4, s},
		{"limit", SampledAttempt{At: at, Cost: 1, Op: "take", Override: driver.Limit, Person: 4}, 8, nil},
		{"class, priority, zone", SampledAttempt{At: at, Cost: 1, Op: "take", Allowed: true, Person: 5, Class: "otp.v-2_x", Priority: 9, Zone: "America/Argentina/Buenos_Aires"}, 1, s},
		{"priority only", SampledAttempt{At: at, Cost: 2, Op: "wait", Person: 6, Priority: 1}, 2, s},
		{"zone only", SampledAttempt{At: at, Cost: 1, Op: "reserve", Person: 7, Zone: "UTC"}, 4, nil},
		{"class only", SampledAttempt{At: at, Cost: 1, Op: "take", Person: 8, Class: "-"}, 1, s},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := encodeSample(tc.a, tc.n, tc.s)
			if plain := tc.a.Class == "" && tc.a.Priority == 0 && tc.a.Zone == ""; plain != strings.HasPrefix(e, sampleFormat+"|") {
				t.Errorf("encodeSample(%+v) = %q: want format %s exactly when the attempt has no class, priority or zone", tc.a, e, sampleFormat)
			}
			got, ok := decodeSample(e)
			if !ok {
				t.Fatalf("decodeSample(%q) failed", e)
			}
			want := tc.a
			want.Sample = tc.n
			if len(tc.s) > 0 {
				want.Values = map[string]string{}
				for d, v := range tc.s {
					want.Values[d] = encodeValue(v)
				}
			}
			if !got.At.Equal(want.At) || got.Cost != want.Cost || got.Op != want.Op || got.Allowed != want.Allowed || got.Cached != want.Cached ||
				got.Override != want.Override || got.Person != want.Person || got.Sample != want.Sample || !maps.Equal(got.Values, want.Values) || got.Partial ||
				got.Class != want.Class || got.Priority != want.Priority || got.Zone != want.Zone {
				t.Errorf("decodeSample(encodeSample(%+v)) = %+v, want %+v", tc.a, got, want)
			}
		})
	}
	many := sdk.Subject{}
	for i := range MaxSampleValues + 3 {
		many[string(rune('a'+i))] = "v"
	}
	if got, ok := decodeSample(encodeSample(SampledAttempt{At: at, Cost: 1, Op: "take"}, 1, many)); !ok || !got.Partial || len(got.Values) != MaxSampleValues {
		t.Errorf("decodeSample(%d values) = %d values, partial %v, ok %v; want %d, partial", len(many), len(got.Values), got.Partial, ok, MaxSampleValues)
	}
	for _, bad := range []string{"", "2|1|1|take|a|1|1|", "2|1|1|take|a|1|1||||", "2|1|1|take|a|1|1||otp|10|", "2|1|1|take|a|1|1||otp|x|", "2|1|1|take|a|1|1||otp|01|", "2|1|1|take|a|1|1||otp|-1|", "1|1|1|take|a|1|1||otp|1|", "1|x|1|take|a|1|1|", "1|1|0|take|a|1|1|", "1|1|1|take|a|3|1|", "1|1|1|take|aq|1|1|", "1|1|1|take||1|1|", "1|1|1|take|a|1|1|user"} {
		if _, ok := decodeSample(bad); ok {
			t.Errorf("decodeSample(%q) ok, want refused", bad)
		}
	}
}

// encodeValue is a value as entries record it.
func encodeValue(v string) string { return hex(valueHash(v)) }
