package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/internal/redistest"
)

// TestDetectEviction: detect on a server with maxmemory 3mb and
// allkeys-lru gives its maxmemory, maxmemory-policy and evicted_keys and
// warns that it may evict freqcap's keys (it used to say nothing about
// memory); under noeviction it gives the same facts without a warning.
func TestDetectEviction(t *testing.T) {
	srv := redistest.NewServer(t)
	for _, tc := range []struct {
		policy string
		evicts bool
	}{{"allkeys-lru", true}, {"volatile-lru", true}, {"noeviction", false}} {
		t.Run(tc.policy, func(t *testing.T) {
			srv.Memory(t, "3mb", tc.policy)
			out, err := captureStdout(t, func() error { return runDetect([]string{"--redis", srv.Addr()}) })
			if err != nil {
				t.Fatalf("detect = %v:\n%s", err, out)
			}
			want := srv.Addr() + "  maxmemory 3.0 MiB (3145728 B), maxmemory-policy " + tc.policy + ", evicted_keys 0"
			if !strings.Contains(out, want) {
				t.Errorf("detect output lacks %q:\n%s", want, out)
			}
			if got := strings.Contains(out, "WARNINGS:\n  - "+srv.Addr()+" may evict freqcap's keys"); got != tc.evicts {
				t.Errorf("detect output warns: %v, want %v:\n%s", got, tc.evicts, out)
			}

			out, err = captureStdout(t, func() error { return runDetect([]string{"--redis", srv.Addr(), "--json"}) })
			if err != nil {
				t.Fatalf("detect --json = %v:\n%s", err, out)
			}
			var rep struct {
				Nodes []struct {
					Memory struct {
						MaxMemory int64  `json:"maxmemory"`
						Policy    string `json:"maxmemory_policy"`
					} `json:"memory"`
				} `json:"nodes"`
				Warnings []string `json:"warnings"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("detect --json: %v\n%s", err, out)
			}
			if len(rep.Nodes) != 1 || rep.Nodes[0].Memory.MaxMemory != 3<<20 || rep.Nodes[0].Memory.Policy != tc.policy || (len(rep.Warnings) > 0) != tc.evicts {
				t.Errorf("detect --json = %+v, want maxmemory 3 MiB, policy %s, warnings %v", rep, tc.policy, tc.evicts)
			}
		})
	}
}
