package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
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
	args := []string{"-redis", addr, "-workers", "2", "-duration", "200ms", "-warmup", "0", "-subjects", "50", "--policies", "../../testdata/seed-log.yaml", "-baseline"}
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
	// Each run's server CPU per decision carries its kernel part, at most
	// the whole.
	cpu := regexp.MustCompile(`(?m)^policy push-log: .*; server CPU ([0-9.]+) µs per decision \(kernel ([0-9.]+)\)`).FindStringSubmatch(out)
	if cpu == nil {
		t.Fatalf("runBench(%q): the policy's line gives no server CPU with its kernel part:\n%s", args, out)
	}
	total, _ := strconv.ParseFloat(cpu[1], 64)
	kernel, _ := strconv.ParseFloat(cpu[2], 64)
	if total <= 0 || kernel > total {
		t.Errorf("runBench(%q): server CPU %v µs per decision, kernel %v: want a positive total and a kernel part at most it", args, total, kernel)
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

// TestBenchUsage: bench -h prints freqcap's usage, and --policies (the
// console's flag) and the deprecated -policy both name the policy file.
func TestBenchUsage(t *testing.T) {
	out, err := captureStderr(t, func() error { return runBench([]string{"-h"}) })
	if !errors.Is(err, flag.ErrHelp) || !strings.HasPrefix(out, "Usage: freqcap bench") || !strings.Contains(out, "-policies FILE") || !strings.Contains(out, "deprecated: use --policies") {
		t.Errorf("bench -h = %v:\n%s", err, out)
	}
	for _, name := range []string{"--policies", "-policy"} {
		_, err := captureStderr(t, func() error {
			return runBench([]string{"--redis", "127.0.0.1:1", name, "/nonexistent/policies.yaml"})
		})
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/policies.yaml") {
			t.Errorf("bench %s FILE = %v, want an error naming the file", name, err)
		}
	}
}

func captureStderr(t *testing.T, f func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&buf, r); close(done) }()
	ferr := f()
	os.Stderr = old
	w.Close()
	<-done
	return buf.String(), ferr
}

// TestBenchAll: -all runs every policy of the file, each against raw(R)
// for its own R, in one invocation.
func TestBenchAll(t *testing.T) {
	if testing.Short() {
		t.Skip("bench runs take a few seconds")
	}
	addr := redistest.NewServer(t).Addr()
	args := []string{"-redis", addr, "-workers", "2", "-duration", "100ms", "-warmup", "0", "-subjects", "50",
		"--policies", "../../testdata/bench-policies.yaml", "-all", "-raw"}
	out, err := captureStdout(t, func() error { return runBench(args) })
	if err != nil {
		t.Fatalf("runBench(%q) = %v, want nil\n%s", args, err, out)
	}
	for _, want := range []struct {
		policy string
		rules  int
	}{{"fixed-1", 1}, {"fixed-4", 4}, {"gcra-4", 4}, {"sliding-4", 4}, {"log-4", 4}, {"push", 4}} {
		l := `(?m)^ratio policy ` + want.policy + ` / raw\(` + strconv.Itoa(want.rules) + `\) INCRBY\+PEXPIRE on [0-9]+ keys: [0-9.]+ `
		if !regexp.MustCompile(l).MatchString(out) {
			t.Errorf("runBench(%q): no line matches %s:\n%s", args, l, out)
		}
	}
	if strings.Contains(out, "first error") {
		t.Errorf("runBench(%q) reported errors:\n%s", args, out)
	}
	if err := runBench([]string{"-redis", addr, "-all", "-name", "push"}); err == nil || !strings.Contains(err.Error(), "-all and -name") {
		t.Errorf("runBench(-all -name) = %v, want an error", err)
	}
}

// TestBenchPrefill: -name takes several policies, -prefill K,… runs each
// at each K, and -prefill-total sets the subjects per K.
func TestBenchPrefill(t *testing.T) {
	if testing.Short() {
		t.Skip("bench runs take a few seconds")
	}
	addr := redistest.NewServer(t).Addr()
	args := []string{"-redis", addr, "-workers", "2", "-duration", "100ms", "-warmup", "0",
		"--policies", "../../testdata/bench-policies.yaml", "-name", "ad-fixed,ad-log", "-prefill", "1,4", "-prefill-total", "40", "-raw"}
	out, err := captureStdout(t, func() error { return runBench(args) })
	if err != nil {
		t.Fatalf("runBench(%q) = %v, want nil\n%s", args, err, out)
	}
	for _, p := range []string{"ad-fixed", "ad-log"} {
		for _, l := range []string{
			`^pre-fill of policy ` + p + `: 40 takes \(40 subjects x 1 values\) in .*, allowed 40, denied 0$`,
			`^pre-fill of policy ` + p + `: 40 takes \(10 subjects x 4 values\) in .*, allowed 40, denied 0$`,
			`^ratio policy ` + p + ` / raw\(2\) INCRBY\+PEXPIRE on 2 keys: [0-9.]+ `,
		} {
			if !regexp.MustCompile("(?m)" + l).MatchString(out) {
				t.Errorf("runBench(%q): no line matches %s:\n%s", args, l, out)
			}
		}
	}
	if strings.Contains(out, "first error") {
		t.Errorf("runBench(%q) reported errors:\n%s", args, out)
	}
	for _, bad := range [][]string{
		{"-prefill", "0"},
		{"-prefill", "1,x"},
		{"-prefill", "2", "-values", "3"},
		{"-prefill-total", "10"},
	} {
		if _, err := captureStderr(t, func() error { return runBench(append([]string{"-redis", addr}, bad...)) }); err == nil {
			t.Errorf("runBench(%q) = nil, want an error", bad)
		}
	}
}
