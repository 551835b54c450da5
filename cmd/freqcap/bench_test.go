package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/internal/redistest"
)

// TestBenchModes runs each mode of `freqcap bench` briefly against a
// dedicated server (-memory flushes it) and checks the report's lines.
func TestBenchModes(t *testing.T) {
	if testing.Short() {
		t.Skip("bench runs take a few seconds")
	}
	addr := redistest.NewServer(t).Addr()
	common := []string{"-redis", addr, "-workers", "4", "-duration", "200ms", "-warmup", "0", "-subjects", "200"}
	tests := []struct {
		name  string
		args  []string
		want  []string // substrings of the report
		lines []string // regular expressions, each matching one whole line
	}{
		{"batch", []string{"-batch", "50", "-rounds", "2"}, []string{
			"policy push, AllowBatch of 50:", "ratio policy push, AllowBatch of 50 / policy push:", "median ratio", "errors 0;"}, nil},
		{"floor and pipelined baseline", []string{"-floor", "-batch", "30"}, nil, []string{
			`^baseline INCRBY\+PEXPIRE EVALSHA: .* errors 0; .* 1\.0000 round trips, 1\.00 scripts .* 2\.00 commands inside scripts`,
			`^baseline, pipelines of 30: .* errors 0; .* 0\.0333 round trips, 1\.00 scripts .* 2\.00 commands inside scripts`,
			`^floor, 1 hash x 8 fields: .* errors 0; .* 4\.00 commands inside scripts`,
			`^floor, 2 keys x 4 fields: .* errors 0; .* 7\.00 commands inside scripts`,
			`^floor, 4 keys x 2 fields: .* errors 0; .* 13\.00 commands inside scripts`,
			`^floor, 4 keys x 2 fields, pipelines of 30: .* errors 0; .* 0\.0333 round trips, 1\.00 scripts .* 13\.00 commands inside scripts`,
			`^ratio baseline, pipelines of 30 / baseline INCRBY\+PEXPIRE EVALSHA: [0-9.]+ `,
			`^ratio floor, 1 hash x 8 fields / baseline INCRBY\+PEXPIRE EVALSHA: [0-9.]+ `,
			`^ratio floor, 2 keys x 4 fields / baseline INCRBY\+PEXPIRE EVALSHA: [0-9.]+ `,
			`^ratio floor, 4 keys x 2 fields / baseline INCRBY\+PEXPIRE EVALSHA: [0-9.]+ `,
			`^ratio floor, 4 keys x 2 fields, pipelines of 30 / floor, 4 keys x 2 fields: [0-9.]+ `}},
		{"hot", []string{"-hot", "-hot-subjects", "3"}, []string{
			"hot, no cache:", "hot, HotDenyCache:", "hot-deny cache: size 10000"}, []string{
			// Most of the cached run never reaches Redis.
			`^Redis round trips per decision: 1\.00[0-9]* without the cache, 0\.[0-4][0-9]* with it \(([5-9][0-9]|100)\.[0-9]% of decisions answered from the cache\)`}},
		{"hot batch", []string{"-hot", "-batch", "20"}, []string{"hot, batch 20, HotDenyCache:"}, nil},
		{"memory log", []string{"-memory", "-memory-takes", "2", "-policy", "../../testdata/seed-log.yaml"}, []string{
			`policy "push-log"`, "sliding_log:"}, []string{`^memory: [1-9][0-9]* bytes per subject \(2 decision\(s\) each for 200 subjects`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := captureStdout(t, func() error { return runBench(append(common, tc.args...)) })
			if err != nil {
				t.Fatalf("runBench(%q) = %v, want nil\n%s", tc.args, err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("runBench(%q) output lacks %q:\n%s", tc.args, w, out)
				}
			}
			for _, l := range tc.lines {
				if !regexp.MustCompile("(?m)" + l + ".*$").MatchString(out) {
					t.Errorf("runBench(%q): no line matches %s:\n%s", tc.args, l, out)
				}
			}
			if strings.Contains(out, "first error") {
				t.Errorf("runBench(%q) reported errors:\n%s", tc.args, out)
			}
		})
	}
}

func captureStdout(t *testing.T, f func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&buf, r); close(done) }()
	ferr := f()
	os.Stdout = old
	w.Close()
	<-done
	return buf.String(), ferr
}
