package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
)

// killedServe is a freqcap serve binary started, SIGKILLed and started
// again on one address.
type killedServe struct {
	t    *testing.T
	args []string
	cmd  *exec.Cmd
	logs chan string // the last process's stderr, closed at its end
}

// start starts the binary and waits until it says it listens.
func (k *killedServe) start() {
	t := k.t
	t.Helper()
	cmd := exec.Command(k.args[0], k.args[1:]...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k.cmd = cmd
	lines := bufio.NewScanner(stderr)
	listening := make(chan bool, 1)
	var log strings.Builder
	go func() {
		said := false
		for lines.Scan() {
			log.WriteString(lines.Text() + "\n")
			if !said && strings.Contains(lines.Text(), "freqcap serve on ") {
				said = true
				listening <- true
			}
		}
		if !said {
			listening <- false
		}
	}()
	select {
	case ok := <-listening:
		if !ok {
			cmd.Wait()
			t.Fatalf("freqcap serve exited before listening:\n%s", log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("freqcap serve did not listen within 30 s")
	}
}

// kill SIGKILLs the running process and reaps it.
func (k *killedServe) kill() {
	k.t.Helper()
	if err := k.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		k.t.Fatal(err)
	}
	k.cmd.Wait()
}

// The real binary on a real Redis, under load from client.Client with
// short per-call deadlines, is SIGKILLed mid-load and started again on the
// same address, three times: every take is decided once. No call fails
// (the client re-sends, with the same idempotency key, the calls whose
// replies the kill lost, and those the dead address refused), and each
// person's count in Redis is exactly the takes its callers were told were
// allowed.
func TestServeSIGKILLRetries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	rs := redistest.NewServer(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "freqcap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	policyFile := filepath.Join(dir, "policies.yaml")
	const policies = "policies:\n  - name: bulk\n    rules:\n      - {name: big, algorithm: fixed_window, limit: 1000000, window: 1h, by: [user]}\n"
	if err := os.WriteFile(policyFile, []byte(policies), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const prefix = "sigkill"
	srv := &killedServe{t: t, args: []string{bin, "serve", "--addr", addr, "--redis", rs.Addr(), "--prefix", prefix, "--policies", policyFile}}
	srv.start()
	t.Cleanup(func() { srv.cmd.Process.Kill(); srv.cmd.Wait() })

	bulk, err := sdk.NewPolicy("bulk", []sdk.Rule{sdk.FixedWindow("big", 1000000, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	const workers = 12
	admitted := make([]int64, workers)
	var total, replayed, failed atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		proto := client.GRPC
		if w%2 == 1 {
			proto = client.ConnectJSON
		}
		// Re-sends every 10 to 100 ms while the call's 4 s last: long
		// enough to ride out a restart on a loaded machine.
		c := client.New("http://"+addr, &client.Options{Protocol: proto,
			Retry: &client.Retry{Tries: 100, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, PerTry: 2 * time.Second}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sdk.Subject{"user": fmt.Sprintf("k%d", w)}
			for i := 0; i < 1_000_000 && !stop.Load(); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
				d, err := c.Take(ctx, bulk, sdk.Attempt{Subject: s})
				cancel()
				switch {
				case err != nil:
					if failed.Add(1) <= 5 {
						t.Errorf("worker %d: take: %v", w, err)
					}
				case !d.Allowed:
					t.Errorf("worker %d: denied", w)
					return
				default:
					admitted[w]++
					total.Add(1)
					if d.Replayed {
						replayed.Add(1)
					}
				}
			}
		}()
	}
	// progress waits until the workers have had n more takes answered
	// (polling until a deadline).
	progress := func(n int64) {
		t.Helper()
		want := total.Load() + n
		deadline := time.Now().Add(15 * time.Second)
		for total.Load() < want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if total.Load() < want {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("only %d takes answered in all; waited 15 s for %d more", total.Load(), n)
		}
	}
	const kills = 3
	var restarted []time.Duration
	for range kills {
		progress(300)
		srv.kill()
		began := time.Now()
		srv.start()
		restarted = append(restarted, time.Since(began))
	}
	progress(300)
	stop.Store(true)
	wg.Wait()

	rc := goredis.NewUniversalClient(testserver.Patient(redis.NewClientOptions(rs.Addr())))
	defer rc.Close()
	lim := sdk.New(redis.New(rc, nil), sdk.WithPrefix(prefix))
	var counted int64
	for w := range workers {
		in, err := lim.Admin().Inspect(context.Background(), bulk, sdk.Subject{"user": fmt.Sprintf("k%d", w)})
		if err != nil {
			t.Fatal(err)
		}
		got := in.Rules[0].Used
		counted += got
		if got != admitted[w] {
			t.Errorf("worker %d: %d takes counted in Redis, %d answered allowed", w, got, admitted[w])
		}
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d takes failed: their outcome is unknown to their callers", n)
	}
	t.Logf("%d takes answered through %d SIGKILLs (restarts took %v), %d counted in Redis; %d answers were first decisions replayed after a lost reply",
		total.Load(), kills, restarted, counted, replayed.Load())
}
