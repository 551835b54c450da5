package lua

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/fast/*.lua from what Fast builds now")

// goldenShapes are representative fast-script shapes: each algorithm
// alone, mixes of them on one and on two dimension sets, two sets nested
// in a third, two in a root of no rule, the largest script, and names and tags that need escaping;
// each with and without
// overrides; and the messaging shape (quiet hours, headroom, a
// calendar day: FastOptions.Quiet). (Peek or take, a trail or none, are
// ARGV: the same script.)
var goldenShapes = []struct {
	name  string
	rules []FastRule
	quiet bool
}{
	{"fixed-1", []FastRule{{Code: CodeFixed, Name: "per-min", Limit: 15, P1: 60_000_000, Tag: "aaaa", Key: 1, Window: 60_000_000}}, false},
	{"sliding-1", []FastRule{{Code: CodeSliding, Name: "sw", Limit: 100, P1: 3_600_000_000, P2: 60_000_000, Tag: "bbbb", Key: 1, Window: 3_600_000_000}}, false},
	{"gcra-1", []FastRule{{Code: CodeGCRA, Name: "g", Limit: 10, P1: 6_000_000, P2: 60_000_000, Tag: "cccc", Key: 1, Window: 60_000_000}}, false},
	{"log-1", []FastRule{{Code: CodeLog, Name: "log", Limit: 5, P1: 10_000_000, Tag: "dddd", Key: 1, Window: 10_000_000}}, false},
	{"mixed-4-one-set", []FastRule{
		{Code: CodeFixed, Name: "f", Limit: 3, P1: 1_000_000, Tag: "t001", Key: 1, Window: 1_000_000},
		{Code: CodeSliding, Name: "s", Limit: 50, P1: 60_000_000, P2: 6_000_000, Tag: "t002", Key: 1, Window: 60_000_000},
		{Code: CodeGCRA, Name: "g", Limit: 20, P1: 3_000_000, P2: 57_000_000, Tag: "t003", Key: 1, Window: 60_000_000},
		{Code: CodeLog, Name: "l", Limit: 8, P1: 86_400_000_000, Tag: "t004", Key: 1, Window: 86_400_000_000},
	}, false},
	{"mixed-4-two-sets", []FastRule{
		{Code: CodeFixed, Name: "user/min", Limit: 15, P1: 60_000_000, Tag: "u\x00\x01m", Key: 1, Window: 60_000_000},
		{Code: CodeGCRA, Name: "ip'burst\\", Limit: 40, P1: 1_500_000, P2: 58_500_000, Tag: "i\xffb'", Key: 2, Window: 60_000_000},
		{Code: CodeLog, Name: "user/day", Limit: 100, P1: 86_400_000_000, Tag: "u\x02dd", Key: 1, Window: 86_400_000_000},
		{Code: CodeSliding, Name: "ip/hour", Limit: 1000, P1: 3_600_000_000, P2: 360_000_000, Tag: "i\x03hh", Key: 2, Window: 3_600_000_000},
	}, false},
	{"nested-push", []FastRule{ // the seed policy: the user+content set nested in the user's
		{Code: CodeLog, Name: "content-59s", Limit: 2, P1: 59_000_000, Tag: "c59s", Key: 1, Root: 2, Window: 59_000_000},
		{Code: CodeLog, Name: "recv-1m", Limit: 15, P1: 60_000_000, Tag: "r01m", Key: 2, Window: 60_000_000},
		{Code: CodeLog, Name: "recv-24h", Limit: 50, P1: 86_400_000_000, Tag: "r24h", Key: 2, Window: 86_400_000_000},
		{Code: CodeFixed, Name: "content-1h", Limit: 5, P1: 3_600_000_000, Tag: "c01h", Key: 1, Root: 2, Window: 3_600_000_000},
		{Code: CodeGCRA, Name: "channel", Limit: 10, P1: 6_000_000, P2: 60_000_000, Tag: "chan", Key: 3, Root: 2, Window: 60_000_000},
	}, false},
	{"nested-rootless", []FastRule{ // sets nested in a root the policy has no rule of
		{Code: CodeLog, Name: "content-59s", Limit: 2, P1: 59_000_000, Tag: "c59s", Key: 1, Root: 3, Window: 59_000_000},
		{Code: CodeFixed, Name: "channel-1h", Limit: 5, P1: 3_600_000_000, Tag: "ch1h", Key: 2, Root: 3, Window: 3_600_000_000},
	}, false},
	{"fixed-6", []FastRule{
		{Code: CodeFixed, Name: "a", Limit: 1, P1: 1_000_000, Tag: "f001", Key: 1, Window: 1_000_000},
		{Code: CodeFixed, Name: "b", Limit: 2, P1: 2_000_000, Tag: "f002", Key: 2, Window: 2_000_000},
		{Code: CodeFixed, Name: "c", Limit: 3, P1: 3_000_000, Tag: "f003", Key: 1, Window: 3_000_000},
		{Code: CodeFixed, Name: "d", Limit: 4, P1: 4_000_000, Tag: "f004", Key: 3, Window: 4_000_000},
		{Code: CodeFixed, Name: "e", Limit: 5, P1: 5_000_000, Tag: "f005", Key: 2, Window: 5_000_000},
		{Code: CodeFixed, Name: "f", Limit: 6, P1: 6_000_000, Tag: "f006", Key: 3, Window: 6_000_000},
	}, false},
	{"messaging", []FastRule{ // issue 37's target shape: the seed policy, a headroom, a calendar day
		{Code: CodeLog, Name: "recv-1m", Limit: 15, P1: 60_000_000, Tag: "r01m", Key: 1, Window: 60_000_000},
		{Code: CodeLog, Name: "recv-24h", Limit: 50, P1: 86_400_000_000, Tag: "r24h", Key: 1, Window: 86_400_000_000, Keep: 10},
		{Code: CodeLog, Name: "content-59s", Limit: 2, P1: 59_000_000, Tag: "c59s", Key: 2, Root: 1, Window: 59_000_000},
		{Code: CodeLog, Name: "content-59m", Limit: 5, P1: 3_540_000_000, Tag: "c59m", Key: 2, Root: 1, Window: 3_540_000_000},
		{Code: CodeCalendar, Name: "day", Limit: 20, Tag: "dayc", Key: 1, Window: 86_400_000_000},
	}, true},
}

// TestFastGolden: the scripts Fast and FastOverrides build for
// goldenShapes, after their helpers (prelude.lua's and holds.lua's own
// text, which TestFastLazyHelpers covers), are testdata/fast/<shape>[-ov].lua,
// byte for byte, and free of tokens (go test -run FastGolden -update
// rewrites them: then read the diff, and run the backend's Fast and
// Differential tests, which run the scripts).
func TestFastGolden(t *testing.T) {
	for _, sh := range goldenShapes {
		for _, v := range []struct {
			suffix string
			ov     bool
		}{{"", false}, {"-ov", true}} {
			t.Run(sh.name+v.suffix, func(t *testing.T) {
				src, err := FastWith(sh.rules, FastOptions{Overrides: v.ov, Quiet: sh.quiet})
				if err != nil {
					t.Fatal(err)
				}
				if m := token.FindString(strings.Join(codeLines(src), "\n")); m != "" {
					t.Errorf("token %s left in the built script", m)
				}
				got := afterHelpers(t, src)
				file := filepath.Join("testdata", "fast", sh.name+v.suffix+".lua")
				if *update {
					if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if got != string(want) {
					t.Errorf("%s: the script differs from %s (go test -run FastGolden -update rewrites it)", sh.name+v.suffix, file)
				}
			})
		}
	}
}

// afterHelpers returns a fast script's text after its helpers (lazy's
// L(), which ends them).
func afterHelpers(t *testing.T, src string) string {
	t.Helper()
	const end = "\n  return lib\nend\n\n"
	i := strings.Index(src, end)
	if i < 0 {
		t.Fatalf("no end of L() in the script")
	}
	return src[i+len(end):]
}

// BenchmarkFast builds the script of the largest golden shape, the
// messaging one with overrides (what a fast-script cache miss costs; a
// decision's path builds none).
func BenchmarkFast(b *testing.B) {
	sh := goldenShapes[len(goldenShapes)-1]
	for b.Loop() {
		if _, err := FastWith(sh.rules, FastOptions{Overrides: true, Quiet: sh.quiet}); err != nil {
			b.Fatal(err)
		}
	}
}
