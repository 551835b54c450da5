package serve_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// zonePolicies: calendar rules in UTC, which an attempt's zone replaces.
const zonePolicies = `
policies:
  - name: digest
    rules:
      - {name: daily,   algorithm: fixed_window, calendar: day,   timezone: UTC, limit: 2,  by: [user]}
      - {name: weekly,  algorithm: fixed_window, calendar: week,  timezone: UTC, limit: 10, by: [user]}
      - {name: monthly, algorithm: fixed_window, calendar: month, timezone: UTC, limit: 30, by: [user]}
`

// TestAttemptZone: an attempt's zone (Attempt.zone on the wire) reaches
// the calendar rules on every backend and both protocols: the windows
// are the zone's local day, ISO week and month; a zone the server cannot
// load is refused (REASON_INVALID_ZONE, sdk.ErrInvalidZone through the
// client), alone in a batch, consuming nothing.
func TestAttemptZone(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	ends := func(at time.Time, loc *time.Location) []time.Time {
		l := at.In(loc)
		y, m, d := l.Date()
		back := (int(l.Weekday()) + 6) % 7
		return []time.Time{time.Date(y, m, d+1, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)}
	}
	const tol = 2 * time.Millisecond
	checkEnds := func(t *testing.T, label string, d sdk.Decision, loc *time.Location, used int64) {
		t.Helper()
		for i, end := range ends(d.At, loc) {
			r := d.Rules[i]
			if want := end.Sub(d.At); r.Used != used || r.ResetAfter < want-tol || r.ResetAfter > want+tol {
				t.Errorf("%s rule %s = used %d, reset %v, want used %d, reset %v (until %v)", label, r.Rule, r.Used, r.ResetAfter, used, want, end)
			}
		}
	}
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b, _ := bk.new(t)
			e := startWith(t, b, serve.Config{MaxBatch: 10}, zonePolicies)
			digest := e.policies["digest"]
			ctx := context.Background()
			for _, pr := range protocols {
				t.Run(pr.name, func(t *testing.T) {
					c := client.New(e.url, &client.Options{Protocol: pr.p})
					user := "zone-" + pr.name
					a := sdk.Attempt{Subject: sdk.Subject{"user": user}, Zone: tokyo}
					d, err := c.Take(ctx, digest, a)
					if err != nil || !d.Allowed {
						t.Fatalf("Take(zone Asia/Tokyo) = %+v, %v, want allowed", d, err)
					}
					checkEnds(t, "Take(zone Asia/Tokyo)", d, tokyo, 1)
					d, err = c.Peek(ctx, digest, a)
					if err != nil {
						t.Fatal(err)
					}
					checkEnds(t, "Peek(zone Asia/Tokyo)", d, tokyo, 1)
					d, r, err := c.Reserve(ctx, digest, a, time.Minute)
					if err != nil || !d.Allowed {
						t.Fatalf("Reserve(zone Asia/Tokyo) = %+v, %v, want allowed", d, err)
					}
					checkEnds(t, "Reserve(zone Asia/Tokyo)", d, tokyo, 2)
					if err := r.Cancel(ctx); err != nil {
						t.Fatal(err)
					}
					// Without a zone: the rules' own, UTC (another person).
					other := sdk.Attempt{Subject: sdk.Subject{"user": user + "-utc"}}
					d, err = c.Take(ctx, digest, other)
					if err != nil {
						t.Fatal(err)
					}
					checkEnds(t, "Take(no zone)", d, time.UTC, 1)

					mars := time.FixedZone("Mars/Olympus", 0) // a name the server cannot load
					for name, err := range map[string]error{
						"take": func() error { _, err := c.Take(ctx, digest, sdk.Attempt{Subject: a.Subject, Zone: mars}); return err }(),
						"peek": func() error { _, err := c.Peek(ctx, digest, sdk.Attempt{Subject: a.Subject, Zone: mars}); return err }(),
						"local": func() error {
							_, err := c.Take(ctx, digest, sdk.Attempt{Subject: a.Subject, Zone: time.Local})
							return err
						}(),
						"reserve": func() error {
							_, _, err := c.Reserve(ctx, digest, sdk.Attempt{Subject: a.Subject, Zone: mars}, time.Minute)
							return err
						}(),
					} {
						if connect.CodeOf(err) != connect.CodeInvalidArgument || !errors.Is(err, sdk.ErrInvalidZone) {
							t.Errorf("%s(bad zone) = %v, want invalid_argument wrapping %v", name, err, sdk.ErrInvalidZone)
						}
						if err != nil && strings.Contains(err.Error(), user) {
							t.Errorf("%s(bad zone) = %q: names the subject", name, err)
						}
					}
					rs := c.TakeBatch(ctx, digest, []sdk.Attempt{a, {Subject: a.Subject, Zone: mars}})
					if rs[0].Err != nil || !rs[0].Decision.Allowed || !errors.Is(rs[1].Err, sdk.ErrInvalidZone) {
						t.Fatalf("TakeBatch(good zone, bad zone) = %+v, want the first allowed and the second %v", rs, sdk.ErrInvalidZone)
					}
					checkEnds(t, "TakeBatch(zone Asia/Tokyo)", rs[0].Decision, tokyo, 2)
				})
			}
			t.Run("json field", func(t *testing.T) {
				status, _, out := post(t, e.url, "Take", `{"policy": "digest", "subject": {"user": "zone-raw"}, "zone": "Asia/Tokyo"}`, "")
				if status != http.StatusOK || !strings.Contains(out, `"allowed":true`) {
					t.Errorf("Take with \"zone\" = %d %s, want 200 allowed", status, out)
				}
				status, _, out = post(t, e.url, "TakeBatch", `{"policy": "digest", "attempts": [{"subject": {"user": "zone-raw"}, "zone": "Nowhere/Else"}]}`, "")
				if status != http.StatusOK || !strings.Contains(out, `REASON_INVALID_ZONE`) || !strings.Contains(out, `zone \"Nowhere/Else\"`) {
					t.Errorf("TakeBatch with a bad zone = %d %s, want 200 with the attempt's REASON_INVALID_ZONE naming the zone", status, out)
				}
			})
		})
	}
}
