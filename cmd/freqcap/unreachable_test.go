package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// mainArgsEnv, when set, makes the test binary run freqcap's main with
// the JSON list of arguments it holds (TestMainProcess), so that a test
// sees everything the command prints, go-redis's own lines included.
const mainArgsEnv = "FREQCAP_TEST_MAIN_ARGS"

// TestMainProcess is freqcap itself when the test binary is run by
// runFreqcap; otherwise it does nothing.
func TestMainProcess(t *testing.T) {
	js := os.Getenv(mainArgsEnv)
	if js == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(js), &args); err != nil {
		t.Fatal(err)
	}
	os.Args = append([]string{"freqcap"}, args...)
	main()
	os.Exit(0)
}

// runFreqcap runs freqcap with args in a process of its own and returns
// what it wrote to stderr and its exit code.
func runFreqcap(t *testing.T, args ...string) (stderr string, code int) {
	t.Helper()
	js, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMainProcess$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(js))
	var out strings.Builder
	cmd.Stderr = &out
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("freqcap %q: %v", args, err)
	}
	return out.String(), code
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestUnreachableServer: console, detect and bench pointed at a port
// nothing listens on print one line that says what failed, where and
// why, and nothing of go-redis's own.
func TestUnreachableServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs freqcap in processes of its own")
	}
	addr := closedPort(t)
	for _, tc := range []struct {
		cmd  string
		args []string
	}{
		{"console", []string{"console", "--addr", "127.0.0.1:0", "--redis", addr}},
		{"detect", []string{"detect", "--redis", addr}},
		{"bench", []string{"bench", "--redis", addr, "-duration", "1s", "-warmup", "0"}},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			stderr, code := runFreqcap(t, tc.args...)
			want := "freqcap: " + tc.cmd + ": cannot reach Redis at " + addr + ": connection refused\n"
			if code != 1 || stderr != want {
				t.Errorf("freqcap %s against a closed port: exit %d, stderr:\n%s\nwant exit 1 and only:\n%s", tc.cmd, code, stderr, want)
			}
		})
	}
}
