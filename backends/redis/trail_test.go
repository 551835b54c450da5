package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// TestTrailValues round-trips the trail's values field through the real
// script: hostile values come back unchanged, bounded, and entries written
// before values were recorded still parse.
func TestTrailValues(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	var r [4]byte
	_, _ = rand.Read(r[:])
	lim := sdk.New(b, sdk.WithPrefix("tv-"+hex.EncodeToString(r[:]))) // this run's own keys
	p, err := sdk.NewPolicy("msg", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 100, time.Minute).By("user"),
		sdk.FixedWindow("content-1h", 1, time.Hour).By("user", "content", "campaign"),
	}, sdk.WithTrail(3, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, v string }{
		{"pipe", "a|b|c"},
		{"comma", "x,y"},
		{"equals", "k=v"},
		{"percent", "100%25 %zz %"},
		{"newlines", "line\nbreak\r\n"},
		{"unicode", "ü日本🙂\u202Eexe"},
		{"lua pattern", "%d+ %s [^,]"},
		{"longest", strings.Repeat("|", sdk.MaxValueLen)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sdk.Subject{"user": "u-" + tc.name, "content": tc.v, "campaign": "c1"}
			if d, err := lim.Allow(ctx, p, s); err != nil || !d.Allowed {
				t.Fatalf("Allow(…) = %+v, %v, want allowed", d, err)
			}
			if d, err := lim.Allow(ctx, p, s); err != nil || d.Allowed {
				t.Fatalf("Allow(…) = %+v, %v, want denied", d, err)
			}
			ins, err := lim.Admin().Inspect(ctx, p, sdk.Subject{"user": "u-" + tc.name})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"content": tc.v, "campaign": "c1"}
			if len(ins.Denials) != 1 || !maps.Equal(ins.Denials[0].Values, want) || ins.Denials[0].ValuesPartial || ins.Denials[0].Rule != "content-1h" {
				t.Fatalf("Inspect(…).Denials = %+v, want one content-1h denial with values %q", ins.Denials, want)
			}
		})
	}

	t.Run("old entries", func(t *testing.T) {
		u := sdk.Subject{"user": "old"}
		trail := lim.Admin().KeyLayout(p, u).Trail
		// An entry as written before values were recorded.
		old := "1700000000000000|msg|content-1h|1|1|1|5000000|0"
		if err := c.LPush(ctx, trail, old).Err(); err != nil {
			t.Fatal(err)
		}
		s := sdk.Subject{"user": "old", "content": "new", "campaign": "c"}
		lim.Allow(ctx, p, s)
		lim.Allow(ctx, p, s)
		ins, err := lim.Admin().Inspect(ctx, p, u)
		if err != nil || len(ins.Denials) != 2 {
			t.Fatalf("Inspect(…) = %+v, %v, want 2 denials", ins.Denials, err)
		}
		if d := ins.Denials[1]; d.Values != nil || !d.At.Equal(time.UnixMicro(1700000000000000)) || d.RetryAfter != 5*time.Second {
			t.Errorf("old entry = %+v, want no values, its time and retry", d)
		}
		if d := ins.Denials[0]; d.Values["content"] != "new" {
			t.Errorf("new entry = %+v, want content=new", d)
		}
		if ins.TrailFull || !ins.TrailSince().Equal(time.UnixMicro(1700000000000000)) {
			t.Errorf("TrailFull = %v, TrailSince() = %v; want false, the old entry's time", ins.TrailFull, ins.TrailSince())
		}
	})

	t.Run("bounded length", func(t *testing.T) {
		u := sdk.Subject{"user": "full"}
		for _, ct := range []string{"a", "b", "c", "d", "e"} {
			s := sdk.Subject{"user": "full", "content": ct, "campaign": "c"}
			lim.Allow(ctx, p, s)
			lim.Allow(ctx, p, s)
		}
		ins, err := lim.Admin().Inspect(ctx, p, u)
		if err != nil || len(ins.Denials) != 3 || !ins.TrailFull || ins.Denials[0].Values["content"] != "e" || ins.Denials[2].Values["content"] != "c" {
			t.Fatalf("Inspect(…) = %+v (full %v), %v; want the newest 3 (e, d, c), full", ins.Denials, ins.TrailFull, err)
		}
		if n, err := c.LLen(ctx, lim.Admin().KeyLayout(p, u).Trail).Result(); err != nil || n != 3 {
			t.Errorf("LLEN trail = %d, %v, want 3", n, err)
		}
	})
}
