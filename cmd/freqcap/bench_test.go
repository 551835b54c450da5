package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"testing"

	"github.com/freqcap/freqcap/internal/redistest"
)

// TestBenchCommand runs `freqcap bench` once through its flags: the modes
// themselves are internal/bench's tests.
func TestBenchCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("a bench run takes a second")
	}
	addr := redistest.NewServer(t).Addr()
	args := []string{"-redis", addr, "-workers", "2", "-duration", "200ms", "-warmup", "0", "-subjects", "50", "-policy", "../../testdata/seed-log.yaml", "-baseline"}
	out, err := captureStdout(t, func() error { return runBench(args) })
	if err != nil {
		t.Fatalf("runBench(%q) = %v, want nil\n%s", args, err, out)
	}
	for _, l := range []string{
		`^freqcap bench: ` + regexp.QuoteMeta(addr) + `, policy "push-log" \(4 rules\), 2 workers, 200ms per run, 50 subjects`,
		`^policy push-log: [0-9]+ decisions .* errors 0;`,
		`^ratio policy push-log / baseline INCRBY\+PEXPIRE EVALSHA: [0-9.]+ `,
	} {
		if !regexp.MustCompile("(?m)" + l).MatchString(out) {
			t.Errorf("runBench(%q): no line matches %s:\n%s", args, l, out)
		}
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
