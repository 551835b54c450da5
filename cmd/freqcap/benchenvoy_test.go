package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/internal/bench"
)

// envoyBinEnv names a prebuilt binary of Envoy's rate-limit service for
// TestBenchEnvoy (else the test builds it, as the bench does).
const envoyBinEnv = "FREQCAP_ENVOY_RLS_BIN"

// TestBenchEnvoy runs `freqcap bench -envoy` end to end, in short runs:
// Envoy's rate-limit service and the binary's serve, each on a
// redis-server of its own, loaded alike; both decide every call, allow
// it, and hold in Redis exactly the counts of the decisions they allowed
// (the bench checks and prints it; the test reads the figures back).
//
// It needs Envoy's service: $FREQCAP_ENVOY_RLS_BIN, or the one the bench
// keeps in the user cache directory, built there with `go install` when
// missing. Building needs the Go module proxy, so a missing service
// skips the test loudly even under FREQCAP_REQUIRE_SERVERS=1 (which
// requires the servers a test can start from this machine alone).
func TestBenchEnvoy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts four servers")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		msg := "redis-server not found in PATH: SKIPPING the Envoy comparison; set FREQCAP_REQUIRE_SERVERS=1 to make this fatal"
		if os.Getenv("FREQCAP_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	envoyBin := os.Getenv(envoyBinEnv)
	if envoyBin == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var log bytes.Buffer
		var err error
		if envoyBin, err = bench.EnsureEnvoyRLS(ctx, &log); err != nil {
			t.Skipf("SKIPPING the Envoy comparison: Envoy's rate-limit service could not be found or built (set %s to a prebuilt one; not required by FREQCAP_REQUIRE_SERVERS: building it needs the Go module proxy): %v\n%s", envoyBinEnv, err, log.String())
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "freqcap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	args := []string{"bench", "-envoy", "-envoy-bin", envoyBin, "-workers", "8", "-conns", "2", "-subjects", "500", "-warmup", "200ms", "-duration", "500ms", "-rounds", "2"}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("freqcap %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	text := string(out)
	// Each service, each R, each round: decisions made, every one
	// allowed, none failed, and the hour window's counts in Redis equal
	// to the allowed decisions of the run and its warm-up (serve's
	// are not checked in a run that crossed an hour boundary: its
	// window restarted).
	run := regexp.MustCompile(`(?m)^(envoyproxy/ratelimit|freqcap serve), R=([14]): ([0-9]+) decisions .*; allowed ([0-9]+), over limit 0, errors 0; service CPU [0-9.]+ µs per decision; Redis CPU [0-9.]+ µs per decision;.*\n  check: ok(?:: the hour window holds ([0-9]+) units in Redis over [0-9]+ users = the ([0-9]+) decisions allowed|, not checked: the run crossed an hour boundary)`)
	runs := map[string]int{}
	for _, m := range run.FindAllStringSubmatch(text, -1) {
		if m[3] != m[4] || m[3] == "0" || m[5] != m[6] {
			t.Errorf("%s, R=%s: %s decisions, %s allowed; %s units counted for %s allowed", m[1], m[2], m[3], m[4], m[5], m[6])
		}
		runs[m[1]+" R="+m[2]]++
	}
	for _, k := range []string{"envoyproxy/ratelimit R=1", "envoyproxy/ratelimit R=4", "freqcap serve R=1", "freqcap serve R=4"} {
		if runs[k] != 2 {
			t.Errorf("%s: %d checked runs, want 2 (one per round)", k, runs[k])
		}
	}
	for _, l := range []string{
		`^freqcap bench -envoy: 8 callers over 2 gRPC connections per service, 500 users, every decision allowed; 200ms warm-up, then 500ms measured per run; 2 round\(s\), alternating`,
		`^envoyproxy/ratelimit: github\.com/envoyproxy/ratelimit/src/service_cmd@` + regexp.QuoteMeta(bench.EnvoyRLSVersion) + ` \(` + regexp.QuoteMeta(envoyBin) + `\)`,
		`^freqcap serve: ` + regexp.QuoteMeta(bin) + ` serve --addr 127\.0\.0\.1:0 --redis 127\.0\.0\.1:[0-9]+ --policies \S+ \(its default flags otherwise\)`,
		`^round 2/2$`,
		`^ratio serve / Envoy, R=4: decisions/s [0-9.]+; service CPU per decision [0-9.]+; Redis CPU per decision [0-9.]+$`,
		`^\| freqcap serve \| [0-9]+ / [0-9]+ \| [0-9]+ / [0-9]+ \| [0-9–]+ / [0-9–]+ µs \| [0-9–]+ / [0-9–]+ µs \|$`,
		`^\| ratio serve / Envoy \| `,
	} {
		if !regexp.MustCompile("(?m)" + l).MatchString(text) {
			t.Errorf("no line matches %s:\n%s", l, text)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", text)
	}
}

// TestBenchEnvoyMissingBinary: -envoy-bin naming nothing fails before
// anything starts, saying how to build Envoy's service.
func TestBenchEnvoyMissingBinary(t *testing.T) {
	err := runBench([]string{"-envoy", "-envoy-bin", filepath.Join(t.TempDir(), "none")})
	if err == nil || !strings.Contains(err.Error(), "go install "+bench.EnvoyRLSPackage+"@"+bench.EnvoyRLSVersion) {
		t.Errorf("bench -envoy -envoy-bin MISSING = %v, want an error with the go install command", err)
	}
	if err := runBench([]string{"-envoy", "-redis", "127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "own redis-servers") {
		t.Errorf("bench -envoy -redis ADDR = %v, want an error: -envoy starts its own", err)
	}
}
