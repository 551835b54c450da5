package console

import (
	"bytes"
	"context"
	"html"
	"log/slog"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fcredis "github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
)

// TestOverviewMalformedAnnouncement: on a real Redis, the announcements
// hash holds two services' policies, one run differently from the
// console's file, and fields no recorder wrote (a value that is not a
// time, a name that is not an announcement, a policy name no policy can
// have). The overview still warns about the drift; the bad fields are
// skipped, said once on the page, and logged once however often the page
// is read.
func TestOverviewMalformedAnnouncement(t *testing.T) {
	addr := redistest.Standalone(t)
	rdb := goredis.NewClient(fcredis.NewClientOptions(addr).Simple())
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	prefix := "ann-" + strings.ReplaceAll(t.Name(), "/", "-")
	backend := fcredis.New(rdb, nil)

	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	drift, err := sdk.NewPolicy("push", []sdk.Rule{sdk.SlidingWindow("recv-1m", 20, time.Minute).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := fleet.NewRecorder(backend, &fleet.Options{Prefix: prefix, FlushEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	rec.Announce(drift, pols[1])
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, prefix+":stats:{policies}:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("announcement keys = %v, %v; want one", keys, err)
	}
	bad := map[string]string{
		`{"policy":"sms","shard_by":["phone"],"rules":[]}`: "not-a-time",
		`garbage`: "1767225600000",
		`{"policy":"sms\u202Etxt","shard_by":["phone"],"rules":[]}`: "1767225600000",
	}
	for field, value := range bad {
		if err := rdb.HSet(ctx, keys[0], field, value).Err(); err != nil {
			t.Fatal(err)
		}
	}

	var logs bytes.Buffer
	srv, err := New(Config{Limiter: sdk.New(backend, sdk.WithPrefix(prefix)), Fleet: fleetOf(backend, &fleet.Options{Prefix: prefix}), Policies: pols,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv}
	var body string
	for range 3 {
		body = html.UnescapeString(readBody(t, f.do(t, req{path: "/"})))
	}
	for _, want := range []string{
		"A service runs policy push differently from the console's policy file",
		"rule recv-1m has limit 15 (burst 0) here, 20 (burst 0) there",
		"3 announcements in the backend could not be read and were skipped",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "Announced policies could not be read") {
		t.Errorf("overview hides every announcement for a few bad ones")
	}
	if strings.ContainsRune(body, 0x202E) || strings.Contains(body, "sms") {
		t.Errorf("overview shows a malformed announcement")
	}
	if n := strings.Count(logs.String(), "malformed announcements"); n != 1 {
		t.Errorf("the malformed announcements were logged %d times over 3 overviews, want once:\n%s", n, logs.String())
	}
}
