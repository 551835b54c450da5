package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/serve"
)

// messagingPolicies are the policies of the messaging tests: "classes" (a
// cap of 2 a day, otp exempt and counted, security exempt and not
// counted), "headroom" (5 a day, the last 2 kept for priority 1 and
// above) and "quiet" (quiet hours in UTC from an hour before now for 12
// hours: quietEnd is when they end; alert exempt from them).
func messagingPolicies(t testing.TB, now time.Time) (ps []*sdk.Policy, quietEnd time.Time) {
	t.Helper()
	must := func(p *sdk.Policy, err error) *sdk.Policy {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	start := now.UTC().Truncate(time.Minute).Add(-time.Hour)
	from := start.Sub(start.Truncate(24 * time.Hour))
	ps = []*sdk.Policy{
		must(sdk.NewPolicy("classes", []sdk.Rule{sdk.FixedWindow("cap", 2, 24*time.Hour).By("user")},
			sdk.WithTrail(100, 24*time.Hour), sdk.WithPerson("user"),
			sdk.WithClass(sdk.Class{Name: "otp", AllRules: true, Counted: true}, sdk.Class{Name: "security", AllRules: true}))),
		must(sdk.NewPolicy("headroom", []sdk.Rule{sdk.FixedWindow("daily", 5, 24*time.Hour).By("user").WithHeadroom(2, 1)})),
		must(sdk.NewPolicy("quiet", []sdk.Rule{sdk.FixedWindow("daily", 100, 24*time.Hour).By("user")},
			sdk.WithTrail(100, 24*time.Hour), sdk.WithPerson("user"),
			sdk.WithQuietHours(time.UTC, sdk.QuietPeriod{From: from, To: (from + 12*time.Hour) % (24 * time.Hour)}),
			sdk.WithClass(sdk.Class{Name: "alert", QuietHours: true}))),
	}
	return ps, start.Add(12 * time.Hour)
}

// TestMessagingCaps: an attempt's class, priority, identity and zone
// reach the policy's messaging caps on every backend over both
// protocols, and the answers carry what they made of it: the class and
// the rules it passed (exempt, counted or not), the headroom that denied
// and the rooms per priority, the quiet hours' end and the next eligible
// instant, the trail entries' class, priority and identity; an unknown
// class and a priority out of range are refused (REASON_INVALID_CLASS,
// REASON_INVALID_PRIORITY; the sdk's errors through the client).
func TestMessagingCaps(t *testing.T) {
	ps, quietEnd := messagingPolicies(t, time.Now())
	minus6, err := time.LoadLocation("Etc/GMT+6") // UTC-6: six hours before the quiet hours' UTC
	if err != nil {
		t.Fatal(err)
	}
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b, _ := bk.new(t)
			e := startPolicies(t, b, serve.Config{MaxBatch: 10}, ps)
			classes, headroom, quiet := e.policies["classes"], e.policies["headroom"], e.policies["quiet"]
			ctx := context.Background()
			for _, pr := range protocols {
				t.Run(pr.name, func(t *testing.T) {
					c := client.New(e.url, &client.Options{Protocol: pr.p})
					user := "msg-" + pr.name

					t.Run("policies", func(t *testing.T) {
						got, err := c.Policies(ctx)
						if err != nil || len(got) != len(e.policies) {
							t.Fatalf("Policies = %d policies, %v; want %d", len(got), err, len(e.policies))
						}
						for _, g := range got {
							w := e.policies[g.Name()]
							gl, gq := g.QuietHours()
							wl, wq := w.QuietHours()
							if !reflect.DeepEqual(g.Classes(), w.Classes()) || !reflect.DeepEqual(g.Rules(), w.Rules()) || gl.String() != wl.String() || !reflect.DeepEqual(gq, wq) {
								t.Errorf("Policies: %s = classes %+v, rules %+v, quiet %v %+v; want %+v, %+v, %v %+v",
									g.Name(), g.Classes(), g.Rules(), gl, gq, w.Classes(), w.Rules(), wl, wq)
							}
						}
					})

					t.Run("class", func(t *testing.T) {
						s := sdk.Subject{"user": user}
						for range 2 {
							if d, err := c.Take(ctx, classes, sdk.Attempt{Subject: s}); err != nil || !d.Allowed {
								t.Fatalf("Take = %+v, %v, want allowed", d, err)
							}
						}
						if d, err := c.Take(ctx, classes, sdk.Attempt{Subject: s}); err != nil || d.Allowed {
							t.Fatalf("Take over the cap = %+v, %v, want denied", d, err)
						}
						// The identity, linked to no one, is its own person: the
						// value of the person dimension, user.
						d, err := c.Take(ctx, classes, sdk.Attempt{Class: "otp", Identity: user})
						if err != nil || !d.Allowed || d.Class != "otp" || !slices.Equal(d.Exempted, []string{"cap"}) ||
							d.Rules[0].Exempt != driver.ExemptCounted || len(d.Denied) != 0 {
							t.Fatalf("Take(otp) over the cap = %+v, %v, want allowed, class otp, exempted [cap] (counted)", d, err)
						}
						if got := e.used(t, "classes", s, "cap"); got != 3 {
							t.Errorf("cap used = %d after an otp, want 3 (counted)", got)
						}
						d, err = c.Take(ctx, classes, sdk.Attempt{Subject: s, Class: "security", Priority: 4})
						if err != nil || !d.Allowed || d.Class != "security" || d.Rules[0].Exempt != driver.ExemptUncounted {
							t.Fatalf("Take(security) = %+v, %v, want allowed, class security, exempt uncounted", d, err)
						}
						if got := e.used(t, "classes", s, "cap"); got != 3 {
							t.Errorf("cap used = %d after a security message, want 3 (not counted)", got)
						}
						in, err := c.Admin().Inspect(ctx, classes, s)
						if err != nil {
							t.Fatal(err)
						}
						var otp, sec *sdk.Denial
						for i, dn := range in.Denials {
							switch dn.Class {
							case "otp":
								otp = &in.Denials[i]
							case "security":
								sec = &in.Denials[i]
							}
						}
						if otp == nil || !otp.Exempt || otp.Identity != user || otp.Rule != "cap" {
							t.Errorf("trail = %+v, want an exempt entry of class otp for identity %s", in.Denials, user)
						}
						if sec == nil || !sec.Exempt || sec.Priority != 4 {
							t.Errorf("trail = %+v, want an exempt entry of class security, priority 4", in.Denials)
						}
					})

					t.Run("invalid", func(t *testing.T) {
						for name, tc := range map[string]struct {
							a    sdk.Attempt
							want error
						}{
							"class":    {sdk.Attempt{Class: "marketing"}, sdk.ErrInvalidClass},
							"priority": {sdk.Attempt{Priority: sdk.MaxPriority + 1}, sdk.ErrInvalidPriority},
							"negative": {sdk.Attempt{Priority: -1}, sdk.ErrInvalidPriority},
							"identity": {sdk.Attempt{Identity: "device-1"}, sdk.ErrInvalidPolicy}, // headroom has no person dimension
						} {
							s := sdk.Subject{"user": user + "-bad-" + name}
							tc.a.Subject = s
							_, err := c.Take(ctx, headroom, tc.a)
							if connect.CodeOf(err) != connect.CodeInvalidArgument || !errors.Is(err, tc.want) {
								t.Errorf("Take(bad %s) = %v, want invalid_argument wrapping %v", name, err, tc.want)
							}
							if err != nil && strings.Contains(err.Error(), s["user"]) {
								t.Errorf("Take(bad %s) = %q: names the subject", name, err)
							}
							if _, err := c.Peek(ctx, headroom, tc.a); !errors.Is(err, tc.want) {
								t.Errorf("Peek(bad %s) = %v, want %v", name, err, tc.want)
							}
							if _, _, err := c.Reserve(ctx, headroom, tc.a, time.Minute); !errors.Is(err, tc.want) {
								t.Errorf("Reserve(bad %s) = %v, want %v", name, err, tc.want)
							}
							rs := c.TakeBatch(ctx, headroom, []sdk.Attempt{{Subject: s}, tc.a})
							if rs[0].Err != nil || !rs[0].Decision.Allowed || !errors.Is(rs[1].Err, tc.want) {
								t.Errorf("TakeBatch(good, bad %s) = %+v, want the first allowed and the second %v", name, rs, tc.want)
							}
							if got := e.used(t, "headroom", s, "daily"); got != 1 {
								t.Errorf("bad %s: daily used = %d, want 1 (the batch's good attempt only)", name, got)
							}
						}
					})

					t.Run("headroom", func(t *testing.T) {
						s := sdk.Subject{"user": user}
						for range 3 {
							if d, err := c.Take(ctx, headroom, sdk.Attempt{Subject: s}); err != nil || !d.Allowed {
								t.Fatalf("Take(priority 0) = %+v, %v, want allowed", d, err)
							}
						}
						d, err := c.Take(ctx, headroom, sdk.Attempt{Subject: s})
						wantRooms := []sdk.Room{{Rule: "daily", Priority: 0, Remaining: 0}, {Rule: "daily", Priority: 1, Remaining: 2}}
						if err != nil || d.Allowed || !d.Headroom || !d.Rules[0].Headroom || d.Rules[0].Keep != 2 || !reflect.DeepEqual(d.Rooms, wantRooms) {
							t.Fatalf("Take(priority 0) past its share = %+v, %v, want denied for headroom (keep 2), rooms %v", d, err, wantRooms)
						}
						p, err := c.Peek(ctx, headroom, sdk.Attempt{Subject: s, Priority: 1})
						if err != nil || !p.Allowed || p.Rules[0].Keep != 0 {
							t.Fatalf("Peek(priority 1) = %+v, %v, want allowed, keep 0", p, err)
						}
						rs := c.TakeBatch(ctx, headroom, []sdk.Attempt{{Subject: s, Priority: 1}, {Subject: s, Priority: 0}})
						if rs[0].Err != nil || !rs[0].Decision.Allowed || rs[1].Err != nil || rs[1].Decision.Allowed || !rs[1].Decision.Headroom {
							t.Fatalf("TakeBatch(priority 1, priority 0) = %+v, want the first allowed, the second denied for headroom", rs)
						}
						wantRooms = []sdk.Room{{Rule: "daily", Priority: 0, Remaining: 0}, {Rule: "daily", Priority: 1, Remaining: 1}}
						if got := rs[0].Decision.Rooms; !reflect.DeepEqual(got, wantRooms) {
							t.Errorf("rooms after a priority-1 take = %v, want %v", got, wantRooms)
						}
					})

					t.Run("quiet", func(t *testing.T) {
						s := sdk.Subject{"user": user}
						d, err := c.Take(ctx, quiet, sdk.Attempt{Subject: s})
						if err != nil || d.Allowed || !d.Quiet.Equal(quietEnd) || !d.NextEligible.Equal(quietEnd) {
							t.Fatalf("Take in quiet hours = %+v, %v, want denied, quiet until and next eligible %v", d, err, quietEnd)
						}
						if want := quietEnd.Sub(d.At); d.RetryAfter < want-time.Second || d.RetryAfter > want+time.Second {
							t.Errorf("retry after %v, want about %v (until the quiet hours end)", d.RetryAfter, want)
						}
						if got := e.used(t, "quiet", s, "daily"); got != 0 {
							t.Errorf("daily used = %d after a denial for quiet hours, want 0", got)
						}
						d, err = c.Take(ctx, quiet, sdk.Attempt{Subject: s, Class: "alert"})
						if err != nil || !d.Allowed || !d.Quiet.Equal(quietEnd) || !d.NextEligible.IsZero() {
							t.Fatalf("Take(alert) in quiet hours = %+v, %v, want allowed, quiet until %v, no next eligible", d, err, quietEnd)
						}
						// In the recipient's zone, six hours earlier, it is not quiet.
						d, err = c.Take(ctx, quiet, sdk.Attempt{Subject: s, Zone: minus6, Identity: "device-1"})
						if err != nil || !d.Allowed || !d.Quiet.IsZero() {
							t.Fatalf("Take(zone Etc/GMT+6) = %+v, %v, want allowed, not quiet", d, err)
						}
						rs := c.PeekBatch(ctx, quiet, []sdk.Attempt{{Subject: s, Identity: "device-2"}, {Subject: s, Zone: minus6}})
						if rs[0].Err != nil || rs[0].Decision.Allowed || !rs[0].Decision.NextEligible.Equal(quietEnd) || rs[1].Err != nil || !rs[1].Decision.Allowed {
							t.Fatalf("PeekBatch(quiet, zone Etc/GMT+6) = %+v, want the first denied until %v, the second allowed", rs, quietEnd)
						}
						in, err := c.Admin().Inspect(ctx, quiet, s)
						if err != nil {
							t.Fatal(err)
						}
						if len(in.Denials) != 1 || !in.Denials[0].Quiet || in.Denials[0].Rule != "" {
							t.Errorf("trail = %+v, want one entry, a denial for quiet hours (the take's; peeks write none)", in.Denials)
						}
					})
				})
			}
			t.Run("json fields", func(t *testing.T) {
				status, _, out := post(t, e.url, "Take", `{"policy": "classes", "subject": {"user": "msg-raw"}, "class": "otp", "priority": 2, "identity": "device-9"}`, "")
				if d := decisionJSON(t, out); status != http.StatusOK || d["class"] != "otp" || d["allowed"] != true {
					t.Fatalf("Take with \"class\" = %d %s, want 200 allowed, \"class\": \"otp\"", status, out)
				}
				status, _, out = post(t, e.url, "Take", `{"policy": "quiet", "subject": {"user": "msg-raw"}}`, "")
				want := quietEnd.Format(time.RFC3339)
				if d := decisionJSON(t, out); status != http.StatusOK || d["next_eligible"] != want || d["quiet_until"] != want {
					t.Errorf("Take in quiet hours = %d %s, want 200 with \"next_eligible\" and \"quiet_until\" %q", status, out, want)
				}
				status, _, out = post(t, e.url, "TakeBatch", `{"policy": "classes", "attempts": [{"subject": {"user": "msg-raw"}, "class": "nope"}, {"subject": {"user": "msg-raw"}, "priority": 10}]}`, "")
				if status != http.StatusOK || !strings.Contains(out, `REASON_INVALID_CLASS`) || !strings.Contains(out, `REASON_INVALID_PRIORITY`) {
					t.Errorf("TakeBatch with a bad class and priority = %d %s, want 200 with REASON_INVALID_CLASS and REASON_INVALID_PRIORITY", status, out)
				}
			})
		})
	}
}

// TestNextEligible: on the memory backend and a clock stopped at 20:59:30
// UTC, a minute's cap denies until 21:00, when quiet hours begin (21:00
// to 08:00 UTC): the attempt is next eligible at 08:00 the next morning,
// and its retry-after waits until then (the rule's own says 30 s), over
// both protocols.
func TestNextEligible(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 11, 24, 20, 59, 30, 0, time.UTC))
	b := memory.New(&memory.Options{Clock: clk})
	p, err := sdk.NewPolicy("evening", []sdk.Rule{sdk.FixedWindow("recv-1m", 1, time.Minute).By("user")},
		sdk.WithQuietHours(time.UTC, sdk.QuietPeriod{From: 21 * time.Hour, To: 8 * time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	e := startPolicies(t, b, serve.Config{Limiter: sdk.New(b, sdk.WithPrefix(uniquePrefix()))}, []*sdk.Policy{p})
	ctx := context.Background()
	next := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			c := client.New(e.url, &client.Options{Protocol: pr.p})
			a := sdk.Attempt{Subject: sdk.Subject{"user": "evening-" + pr.name}}
			if d, err := c.Take(ctx, p, a); err != nil || !d.Allowed || !d.NextEligible.IsZero() {
				t.Fatalf("Take = %+v, %v, want allowed, no next eligible", d, err)
			}
			d, err := c.Take(ctx, p, a)
			if err != nil || d.Allowed || len(d.Rules) != 1 || d.Rules[0].RetryAfter != 30*time.Second || d.RetryAfter != next.Sub(d.At) || !d.Quiet.IsZero() || !d.NextEligible.Equal(next) {
				t.Fatalf("Take again = %+v, %v, want denied by recv-1m for 30s, retry after %v, not in quiet hours, next eligible %v", d, err, next.Sub(d.At), next)
			}
		})
	}
	status, _, out := post(t, e.url, "Take", `{"policy": "evening", "subject": {"user": "evening-raw"}, "cost": 2}`, "")
	if d := decisionJSON(t, out); status != http.StatusOK || d["cost_too_high"] != true || d["next_eligible"] != nil {
		t.Errorf("Take(cost 2 of 1) = %d %s, want cost_too_high and \"next_eligible\": null (no instant will do)", status, out)
	}
	post(t, e.url, "Take", `{"policy": "evening", "subject": {"user": "evening-raw"}}`, "")
	status, _, out = post(t, e.url, "Take", `{"policy": "evening", "subject": {"user": "evening-raw"}}`, "")
	if d := decisionJSON(t, out); status != http.StatusOK || d["next_eligible"] != "2026-11-25T08:00:00Z" {
		t.Errorf("Take again = %d %s, want \"next_eligible\": \"2026-11-25T08:00:00Z\"", status, out)
	}
}

// decisionJSON returns the "decision" of a JSON answer.
func decisionJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	var got struct {
		Decision map[string]any `json:"decision"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("answer %q: %v", out, err)
	}
	return got.Decision
}

// TestEnvoyQuietHours: Envoy's descriptors carry dimensions only, so a
// descriptor is an attempt without class, priority or zone: denied in
// the policy's quiet hours (in its own zone), its status waiting until
// they end, as Retry-After does; a "class" entry is a dimension the
// policy lacks, refused.
func TestEnvoyQuietHours(t *testing.T) {
	ps, quietEnd := messagingPolicies(t, time.Now())
	e := startPolicies(t, memory.New(nil), serve.Config{}, ps)
	conn, err := grpc.NewClient(strings.TrimPrefix(e.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(req []byte) (envoyResponse, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out []byte
		if err := conn.Invoke(ctx, shouldRateLimit, &req, &out, grpc.ForceCodec(rawCodec{})); err != nil {
			return envoyResponse{}, err
		}
		return decodeEnvoyResponse(t, out), nil
	}
	r, err := call(envoyRequest("quiet", 0, envoyDescriptor{entries: [][2]string{{"user", "envoy-quiet"}}, hits: -1}))
	if err != nil {
		t.Fatal(err)
	}
	wait := int64(time.Until(quietEnd) / time.Second)
	if r.overall != 2 || len(r.statuses) != 1 || r.statuses[0].code != 2 || r.statuses[0].resetSeconds < wait-2 || r.statuses[0].resetSeconds > wait+2 {
		t.Errorf("ShouldRateLimit in quiet hours = %+v, want OVER_LIMIT until they end (about %d s)", r, wait)
	}
	if ra, _ := strconv.ParseInt(r.headers["retry-after"], 10, 64); ra < wait-2 || ra > wait+2 {
		t.Errorf("retry-after = %q, want about %d", r.headers["retry-after"], wait)
	}
	_, err = call(envoyRequest("quiet", 0, envoyDescriptor{entries: [][2]string{{"user", "envoy-quiet"}, {"class", "alert"}}, hits: -1}))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("ShouldRateLimit with a class entry = %v, want invalid_argument (a dimension the policy lacks)", err)
	}
}

// TestClockSkew: a backend whose clock is two hours from the server's
// cannot decide under quiet hours given for the server's clock: a
// fail-closed policy's Take is refused (failed_precondition,
// REASON_CLOCK_SKEW, sdk.ErrClockSkew through the client), consuming
// nothing.
func TestClockSkew(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	b := memory.New(&memory.Options{Clock: fakeclock.New(at.Add(2 * time.Hour))})
	p, err := sdk.NewPolicy("skewed", []sdk.Rule{sdk.FixedWindow("daily", 10, 24*time.Hour).By("user")},
		sdk.WithQuietHours(time.UTC, sdk.QuietPeriod{From: 21 * time.Hour, To: 8 * time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	e := startPolicies(t, b, serve.Config{Limiter: sdk.New(b, sdk.WithClock(fakeclock.New(at)), sdk.WithPrefix(uniquePrefix()))}, []*sdk.Policy{p})
	for _, pr := range protocols {
		c := client.New(e.url, &client.Options{Protocol: pr.p})
		s := sdk.Subject{"user": "skew-" + pr.name}
		_, err := c.Take(context.Background(), p, sdk.Attempt{Subject: s})
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !errors.Is(err, sdk.ErrClockSkew) {
			t.Errorf("%s: Take = %v, want failed_precondition wrapping %v", pr.name, err, sdk.ErrClockSkew)
		}
		if got := e.used(t, "skewed", s, "daily"); got != 0 {
			t.Errorf("%s: daily used = %d, want 0", pr.name, got)
		}
	}
}
