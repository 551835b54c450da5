package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
)

// TestDetectWide: detect says where wide subjects' nested sets live on the
// server and why, with the size past which a root goes wide, the mode and
// how the fields expire: the same sentence as the backend's Describe
// (capability.Wide owns it). Plain Redis sweeps; a server with native
// hash-field expiry (FREQCAP_TEST_HFE) sweeps too and says why (measured
// faster; capability.Config.WideFieldExpiry uses HPEXPIREAT); a TairHash server
// (FREQCAP_TEST_TAIRHASH) sweeps and says why the module's field expiry
// is not used.
func TestDetectWide(t *testing.T) {
	for _, tc := range []struct {
		name, env, mode string
		want            []string
	}{
		{"redis", "", "s", []string{"2048 bytes", "<root key>%w", "HSCAN of 8 fields", "no native hash-field expiry"}},
		{"hfe", "FREQCAP_TEST_HFE", "s", []string{"2048 bytes", "HSCAN of 8 fields", "native hash-field expiry (HPEXPIRE on every master) is not used for them by default"}},
		{"tairhash", "FREQCAP_TEST_TAIRHASH", "s", []string{"2048 bytes", "HSCAN of 8 fields", "TairHash's per-field expiry (EXHSET … PXAT) is not used"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := os.Getenv(tc.env)
			switch {
			case tc.env == "":
				addr = redistest.Standalone(t)
			case addr == "":
				t.Skipf("SKIPPED: %s is not set", tc.env)
			}
			out, err := captureStdout(t, func() error { return runDetect([]string{"--redis", addr}) })
			if err != nil {
				t.Fatalf("detect = %v:\n%s", err, out)
			}
			c := goredis.NewClient(&goredis.Options{Addr: addr})
			defer c.Close()
			d, err := redis.New(c, nil).Describe(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var note string
			for _, n := range d.Notes {
				if strings.HasPrefix(n, "wide subjects: ") {
					note = n
				}
			}
			if !strings.Contains(note, "mode "+tc.mode+": ") {
				t.Fatalf("Describe().Notes = %q, want a wide subjects note of mode %s", d.Notes, tc.mode)
			}
			for _, want := range tc.want {
				if !strings.Contains(note, want) {
					t.Errorf("the wide subjects note %q lacks %q", note, want)
				}
			}
			if !strings.Contains(out, "\n"+note+"\n") {
				t.Errorf("detect output lacks Describe's wide subjects note %q:\n%s", note, out)
			}

			out, err = captureStdout(t, func() error { return runDetect([]string{"--redis", addr, "--json"}) })
			if err != nil {
				t.Fatalf("detect --json = %v:\n%s", err, out)
			}
			var rep struct {
				Wide struct {
					Mode   string `json:"mode"`
					At     int    `json:"at"`
					Reason string `json:"reason"`
				} `json:"wide"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("detect --json: %v\n%s", err, out)
			}
			if rep.Wide.Mode != tc.mode || rep.Wide.At != 2048 || !strings.HasSuffix(note, rep.Wide.Reason) {
				t.Errorf("detect --json wide = %+v, want mode %s, at 2048, the note's reason", rep.Wide, tc.mode)
			}
		})
	}
}
