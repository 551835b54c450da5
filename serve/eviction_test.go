package serve_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/client"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/serve"
)

// /readyz gives every master's maxmemory, maxmemory-policy and
// evicted_keys, warns of a policy that may evict freqcap's keys (without
// naming the server: /readyz answers anyone), and stays ready unless the
// backend refuses to decide (redis.EvictionRefuse).
func TestReadyzEviction(t *testing.T) {
	srv := redistest.NewServer(t)
	c := goredis.NewUniversalClient(testserver.Patient(redis.NewClientOptions(srv.Addr())))
	t.Cleanup(func() { c.Close() })
	warn := redis.New(c, nil)
	refuse := redis.New(c, &redis.Options{Eviction: redis.EvictionRefuse, EvictionRecheck: 50 * time.Millisecond})
	ew := start(t, warn, serve.Config{Ready: warn.Ready, Timeout: 5 * time.Second})
	er := start(t, refuse, serve.Config{Ready: refuse.Ready, Timeout: 5 * time.Second})

	tests := []struct {
		maxmemory, policy string
		evicts            bool
		memory            string
	}{
		{"3mb", "noeviction", false, "memory: master 1 of 1: maxmemory 3145728, maxmemory-policy noeviction, evicted_keys 0"},
		{"3mb", "allkeys-lru", true, "memory: master 1 of 1: maxmemory 3145728, maxmemory-policy allkeys-lru, evicted_keys 0"},
		{"3mb", "volatile-lru", true, "maxmemory-policy volatile-lru"},
		{"0", "volatile-lru", false, "memory: master 1 of 1: maxmemory 0, maxmemory-policy volatile-lru"},
	}
	for _, tc := range tests {
		t.Run(tc.maxmemory+"/"+tc.policy, func(t *testing.T) {
			srv.Memory(t, tc.maxmemory, tc.policy)
			st, body := get(t, ew.url+"/readyz")
			if st != 200 || !strings.HasPrefix(body, "ready\n") || !strings.Contains(body, tc.memory) ||
				strings.Contains(body, "warning: master 1 of 1 may evict") != tc.evicts || strings.Contains(body, srv.Addr()) {
				t.Errorf("/readyz (warn) = %d %q, want 200 with %q, a warning: %v, and no address", st, body, tc.memory, tc.evicts)
			}
			// Refuse: seen within EvictionRecheck; poll until the verdict follows.
			want := 200
			if tc.evicts {
				want = 503
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				st, body = get(t, er.url+"/readyz")
				if st == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/readyz (refuse) = %d %q, want %d within 20 s", st, body, want)
				}
				time.Sleep(20 * time.Millisecond) // polling the backend's recheck
			}
			if tc.evicts && (!strings.HasPrefix(body, "the backend refuses to decide") || !strings.Contains(body, "warning:") || strings.Contains(body, srv.Addr())) {
				t.Errorf("/readyz (refuse) = %d %q, want the refusal and the warning, no address", st, body)
			}
			if tc.evicts {
				// A decision on the refusing backend: failed_precondition,
				// REASON_BACKEND_REFUSED (not unavailable: retrying does not
				// help), errors.Is driver.ErrRefused, no address in the message.
				for _, pr := range []client.Protocol{client.GRPC, client.ConnectJSON} {
					c := client.New(er.url, &client.Options{Protocol: pr, Timeout: 5 * time.Second})
					_, err := c.Take(context.Background(), er.policies["push"], sdk.Attempt{Subject: sdk.Subject{"user": "u-evict", "content": "c"}})
					if connect.CodeOf(err) != connect.CodeFailedPrecondition || protoconv.ReasonOf(err) != freqcapv1.Reason_REASON_BACKEND_REFUSED ||
						!errors.Is(err, driver.ErrRefused) || strings.Contains(err.Error(), srv.Addr()) {
						t.Errorf("Take (%v) on the refusing backend = %v (%v, %v), want failed_precondition, REASON_BACKEND_REFUSED, errors.Is driver.ErrRefused, no address", pr, err, connect.CodeOf(err), protoconv.ReasonOf(err))
					}
				}
			}
		})
	}
}
