package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/serve"
)

// TestCampaignThroughServe runs the command as `campaign -serve URL` with
// the secret in $FREQCAP_TOKEN against a live freqcap serve (the
// campaign's push policy, on memory and on a real redis-server) and checks
// the same decisions as in-process: the retried batches are replayed, the
// third copy is denied by content-59s, the next try is answered by the
// server's hot-deny cache, the recipients' ids carry the run's prefix,
// and the server's limiter counted exactly two sends per recipient.
func TestCampaignThroughServe(t *testing.T) {
	const n = 1200
	backends := []struct {
		name string
		new  func(t *testing.T) driver.Backend
	}{
		{"memory", func(t *testing.T) driver.Backend { return memory.New(nil) }},
		{"redis", func(t *testing.T) driver.Backend {
			c := goredis.NewUniversalClient(redis.NewClientOptions(redistest.Standalone(t)))
			t.Cleanup(func() { c.Close() })
			return redis.New(c, &redis.Options{Coalesce: 4})
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			push, err := pushPolicy()
			if err != nil {
				t.Fatal(err)
			}
			lim := sdk.New(b.new(t), sdk.WithPrefix("serve-"+t.Name()), sdk.WithTimeout(30*time.Second))
			caller, err := serve.ParseCaller("campaign:campaign-secret:take,inspect@push")
			if err != nil {
				t.Fatal(err)
			}
			url := startServe(t, serve.Config{Limiter: lim, Policies: []*sdk.Policy{push}, Callers: []serve.Caller{caller}})

			var out strings.Builder
			env := map[string]string{"FREQCAP_TOKEN": "campaign-secret"}
			args := []string{"-serve", url, "-recipients", fmt.Sprint(n), "-prefix", "run-7"}
			if err := campaign(args, func(k string) string { return env[k] }, &out); err != nil {
				t.Fatalf("campaign %q: %v\n%s", args, err, out.String())
			}
			for _, want := range []string{
				fmt.Sprintf("campaign: %d recipients, batches of 500, policy \"push\"", n),
				fmt.Sprintf("msg-1 again: the same batches retried after a timeout      allowed  %4d  denied     0  replayed  %4d", n, n),
				fmt.Sprintf("msg-3: a third copy within 59 s                            allowed     0  denied  %4d  replayed     0  from the hot-deny cache     0  (%d by content-59s)", n, n),
				fmt.Sprintf("msg-3 again, from a sender without idempotency keys        allowed     0  denied  %4d  replayed     0  from the hot-deny cache  %4d  (%d by content-59s)", n, n, n),
				"run-7/user-0 now: recv-1m 2/15, recv-24h 2/50, content-59s 2/2, content-59m 2/5; newest denial by content-59s",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			// The server's own limiter holds the counts.
			content := sdk.Fingerprint("Spring sale: 20% off everything until midnight")
			for _, i := range []int{0, n - 1} {
				in, err := lim.Admin().Inspect(context.Background(), push, sdk.Subject{"user": fmt.Sprintf("run-7/user-%d", i), "content": content})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range in.Rules {
					if r.Used != 2 {
						t.Errorf("server: run-7/user-%d %s used %d, want 2", i, r.Rule, r.Used)
					}
				}
			}

			// A wrong secret is a clear error, not a campaign.
			out.Reset()
			env["FREQCAP_TOKEN"] = "not-the-secret"
			if err := campaign(args, func(k string) string { return env[k] }, &out); err == nil || !strings.Contains(err.Error(), "unauthenticated") {
				t.Errorf("campaign with a wrong secret = %v, want an unauthenticated error\n%s", err, out.String())
			}
		})
	}
	if err := campaign([]string{"-serve", "http://127.0.0.1:1", "-redis", "127.0.0.1:1"}, func(string) string { return "" }, new(strings.Builder)); err == nil || !strings.Contains(err.Error(), "give one of") {
		t.Errorf("campaign -serve -redis = %v, want a usage error", err)
	}
}

// startServe serves cfg on a loopback port until the test ends and
// returns its URL.
func startServe(t *testing.T, cfg serve.Config) string {
	t.Helper()
	srv, err := serve.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}
