package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/serve"
)

// t0 is where the tests' clocks stand: the sdk's and the server's
// memory backends decide at the same instants.
var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// clientPolicies are the policies of these tests: push reads overrides,
// and its two rules are keyed by different dimensions (ResetRules can
// name one); open fails open.
func clientPolicies(t *testing.T) (push, open *sdk.Policy) {
	t.Helper()
	push, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 3, time.Minute).By("user"),
		sdk.FixedWindow("content-1h", 2, time.Hour).By("user", "content"),
	}, sdk.WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	open, err = sdk.NewPolicy("open", []sdk.Rule{sdk.FixedWindow("daily", 5, 24*time.Hour).By("user")}, sdk.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	return push, open
}

// startServe runs serve on a memory backend on clock, over HTTP/1.1 and
// clear-text HTTP/2, until t ends; it returns the server's URL.
func startServe(t *testing.T, clock *fakeclock.Clock, callers []serve.Caller, policies ...*sdk.Policy) string {
	t.Helper()
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	srv, err := serve.New(serve.Config{Limiter: lim, Policies: policies, Callers: callers, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), Protocols: new(http.Protocols), ErrorLog: log.New(io.Discard, "", 0)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String()
}

// step is one call of the script both limiters run: what it returned,
// made comparable (times in UTC, errors as the sentinels they wrap).
type step struct {
	name string
	got  any
}

// sentinels are the errors a call may wrap, in the order errOf tries
// them.
var sentinels = []error{
	sdk.ErrInvalidSubject, sdk.ErrInvalidCost, sdk.ErrInvalidIdempotencyKey, sdk.ErrInvalidOverride,
	sdk.ErrInvalidRule, sdk.ErrInvalidPolicy, sdk.ErrReservationNotFound, sdk.ErrOverrideNotFound,
}

// errOf names the sentinel err wraps ("<nil>" for none, "other: …" for
// an error that wraps none).
func errOf(err error) string {
	if err == nil {
		return "<nil>"
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "other: " + err.Error()
}

func utcDecision(d sdk.Decision) sdk.Decision {
	d.At = d.At.UTC()
	d.Override = utcOverride(d.Override)
	return d
}

func utcOverride(o driver.Override) driver.Override {
	o.Created, o.Until = o.Created.UTC(), o.Until.UTC()
	return o
}

func utcInspection(in sdk.Inspection) sdk.Inspection {
	in.At = in.At.UTC()
	for i := range in.Denials {
		in.Denials[i].At = in.Denials[i].At.UTC()
	}
	return in
}

// script runs every call the sdk and the client have in common, through
// the interfaces both satisfy, with its errors; reserve and reservationOf
// stand for Reserve and ReservationOf, whose reservation types differ.
func script(ctx context.Context, clock *fakeclock.Clock, push *sdk.Policy, lim client.Limiter, adm client.Administrator,
	reserve func(sdk.Attempt) (sdk.Decision, interface{ Commit(context.Context) error }, string, error),
	reservationOf func(s sdk.Subject, id string) (interface{ Cancel(context.Context) error }, error)) []step {
	var out []step
	add := func(name string, got ...any) { out = append(out, step{name, got}) }
	u := func(id string) sdk.Subject { return sdk.Subject{"user": id, "content": "c"} }
	decision := func(name string, d sdk.Decision, err error) { add(name, utcDecision(d), errOf(err)) }

	for i := range 4 {
		d, err := lim.Allow(ctx, push, u("a"))
		decision(fmt.Sprint("Allow #", i+1), d, err)
	}
	d, err := lim.Take(ctx, push, sdk.Attempt{Subject: u("b"), Cost: 2})
	decision("Take cost 2", d, err)
	d, err = lim.Take(ctx, push, sdk.Attempt{Subject: u("b"), Cost: 2, IdempotencyKey: "k1"})
	decision("Take denied, keyed", d, err)
	d, err = lim.Take(ctx, push, sdk.Attempt{Subject: u("b"), Cost: 2, IdempotencyKey: "k1"})
	decision("Take replayed", d, err)
	d, err = lim.Take(ctx, push, sdk.Attempt{Subject: sdk.Subject{"content": "c"}})
	decision("Take without user", d, err)
	d, err = lim.Take(ctx, push, sdk.Attempt{Subject: u("b"), Cost: -1})
	decision("Take negative cost", d, err)
	d, err = lim.Peek(ctx, push, sdk.Attempt{Subject: u("a")})
	decision("Peek denied", d, err)
	d, err = lim.Peek(ctx, push, sdk.Attempt{Subject: u("c"), Cost: 2})
	decision("Peek allowed", d, err)

	batch := func(name string, rs []sdk.BatchResult) {
		for i, r := range rs {
			decision(fmt.Sprint(name, " #", i), r.Decision, r.Err)
		}
	}
	as := []sdk.Attempt{{Subject: u("d")}, {Subject: u("d")}, {Subject: u("d")}, {Subject: sdk.Subject{"user": "d"}}}
	batch("TakeBatch", lim.TakeBatch(ctx, push, as))
	batch("PeekBatch", lim.PeekBatch(ctx, push, as))

	d, r, id, err := reserve(sdk.Attempt{Subject: u("e")})
	decision("Reserve", d, err)
	add("Reserve id", len(id))
	add("Commit", errOf(r.Commit(ctx)))
	add("Commit again", errOf(r.Commit(ctx)))
	d, _, id, err = reserve(sdk.Attempt{Subject: u("e"), Cost: 2})
	decision("Reserve 2", d, err)
	ro, err := reservationOf(sdk.Subject{"user": "e"}, id)
	add("ReservationOf", errOf(err))
	if err == nil {
		add("ReservationOf Cancel", errOf(ro.Cancel(ctx)))
		add("ReservationOf Cancel again", errOf(ro.Cancel(ctx)))
	}
	_, err = reservationOf(sdk.Subject{"user": "e"}, "zz")
	add("ReservationOf malformed id", errOf(err))
	_, err = reservationOf(sdk.Subject{"content": "c"}, id)
	add("ReservationOf without the shard dimension", errOf(err))
	d, err = lim.Peek(ctx, push, sdk.Attempt{Subject: u("e")})
	decision("Peek after the reservations", d, err)

	in, err := adm.Inspect(ctx, push, u("a"))
	add("Inspect", utcInspection(in), errOf(err))
	in, err = adm.Inspect(ctx, push, sdk.Subject{"user": "a"})
	add("Inspect by user", utcInspection(in), errOf(err))
	_, err = adm.Inspect(ctx, push, sdk.Subject{"content": "c"})
	add("Inspect without user", errOf(err))

	add("ResetRules content-1h", errOf(adm.ResetRules(ctx, push, u("b"), "content-1h")))
	d, err = lim.Peek(ctx, push, sdk.Attempt{Subject: u("b")})
	decision("Peek after ResetRules", d, err)
	add("ResetRules unknown", errOf(adm.ResetRules(ctx, push, u("b"), "nope")))
	add("ResetRules none", errOf(adm.ResetRules(ctx, push, u("b"))))
	add("ResetRules without content", errOf(adm.ResetRules(ctx, push, sdk.Subject{"user": "b"}, "content-1h")))
	add("Reset", errOf(adm.Reset(ctx, push, u("a"))))
	d, err = lim.Peek(ctx, push, sdk.Attempt{Subject: u("a")})
	decision("Peek after Reset", d, err)
	add("Reset without user", errOf(adm.Reset(ctx, push, sdk.Subject{"content": "c"})))

	o, err := adm.SetOverride(ctx, push, sdk.Subject{"user": "f"}, driver.Override{Kind: driver.Block, Reason: "abuse", By: "local", Until: t0.Add(time.Hour)})
	add("SetOverride", utcOverride(o), errOf(err))
	d, err = lim.Allow(ctx, push, u("f"))
	decision("Allow blocked", d, err)
	os, err := adm.Overrides(ctx, push, sdk.Subject{"user": "f"})
	for i := range os {
		os[i] = utcOverride(os[i])
	}
	add("Overrides", os, errOf(err))
	add("DeleteOverride", errOf(adm.DeleteOverride(ctx, push, sdk.Subject{"user": "f"}, o.ID)))
	add("DeleteOverride again", errOf(adm.DeleteOverride(ctx, push, sdk.Subject{"user": "f"}, o.ID)))
	_, err = adm.SetOverride(ctx, push, sdk.Subject{"user": "f"}, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"nope": 5}})
	add("SetOverride unknown rule", errOf(err))
	_, err = adm.SetOverride(ctx, push, sdk.Subject{"user": "f"}, driver.Override{})
	add("SetOverride without kind", errOf(err))
	d, err = lim.Allow(ctx, push, u("f"))
	decision("Allow after DeleteOverride", d, err)

	clock.Advance(time.Minute)
	d, err = lim.Allow(ctx, push, u("a"))
	decision("Allow a minute later", d, err)
	return out
}

// TestSameAsSDK: every call the client shares with the sdk returns what
// the sdk returns in-process (decisions, inspections, overrides, and the
// sentinel its errors wrap), over gRPC and the Connect protocol's JSON.
func TestSameAsSDK(t *testing.T) {
	ctx := context.Background()
	push, open := clientPolicies(t)

	sdkClock := fakeclock.New(t0)
	lim := sdk.New(memory.New(&memory.Options{Clock: sdkClock}))
	want := script(ctx, sdkClock, push, lim, lim.Admin(),
		func(a sdk.Attempt) (sdk.Decision, interface{ Commit(context.Context) error }, string, error) {
			d, r, err := lim.Reserve(ctx, push, a, time.Minute)
			return d, r, r.ID(), err
		},
		func(s sdk.Subject, id string) (interface{ Cancel(context.Context) error }, error) {
			return lim.ReservationOf(push, s, id)
		})

	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			// An admin named "local", as the sdk's overrides are set By.
			admin := []serve.Caller{{Name: "local", Secret: "local-secret", Grants: []serve.Grant{{Ops: []serve.Op{"*", serve.OpAdmin}, Policies: []string{"push"}}}}}
			c := client.New(startServe(t, clock, admin, push, open), &client.Options{Protocol: pr.p, Token: "local-secret"})
			got := script(ctx, clock, push, c, c.Admin(),
				func(a sdk.Attempt) (sdk.Decision, interface{ Commit(context.Context) error }, string, error) {
					d, r, err := c.Reserve(ctx, push, a, time.Minute)
					return d, r, r.ID(), err
				},
				func(s sdk.Subject, id string) (interface{ Cancel(context.Context) error }, error) {
					return c.ReservationOf(push, s, id)
				})
			if len(got) != len(want) {
				t.Fatalf("the script ran %d steps through the client, %d through the sdk", len(got), len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("%s:\nclient: %+v\nsdk:    %+v", want[i].name, got[i].got, want[i].got)
				}
			}
		})
	}
}

// TestPolicies: Policies and ServedPolicies return the policies the
// server serves to the caller, built as it loaded them, and version 0
// for policies given as values (no store).
func TestPolicies(t *testing.T) {
	ctx := context.Background()
	push, open := clientPolicies(t)
	callers := []serve.Caller{{Name: "pusher", Secret: "pusher-secret", Grants: []serve.Grant{{Ops: []serve.Op{"*"}, Policies: []string{"push"}}}}}
	url := startServe(t, fakeclock.New(t0), callers, push, open)

	c := client.New(url, &client.Options{Token: "pusher-secret"})
	ps, err := c.Policies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Name() != "push" || !slices.Equal(ps[0].RuleIDs(), push.RuleIDs()) || !ps[0].ReadsOverrides() {
		t.Errorf("Policies = %v, want push alone (the caller's only grant), as the server loaded it", ps)
	}
	sp, err := c.ServedPolicies(ctx)
	if err != nil || sp.Version != 0 || len(sp.Policies) != 1 {
		t.Errorf("ServedPolicies = %+v, %v; want version 0 and push", sp, err)
	}
	if _, err := client.New(url, &client.Options{Token: "wrong-secret"}).Policies(ctx); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Policies with an unknown secret = %v, want unauthenticated", err)
	}
}

// TestClientErrors: what only a remote limiter can meet. A caller
// without the grant is refused (permission_denied) by every call, the
// administrative ones included; a policy the server does not serve
// wraps sdk.ErrInvalidPolicy; a server that cannot be reached is an
// error under a fail-closed policy and a degraded allowed decision under
// a fail-open one (its reservation settles as a no-op).
func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	push, open := clientPolicies(t)
	callers := []serve.Caller{{Name: "peeker", Secret: "peeker-secret", Grants: []serve.Grant{{Ops: []serve.Op{serve.OpPeek}, Policies: []string{"*"}}}}}
	url := startServe(t, fakeclock.New(t0), callers, push, open)
	c := client.New(url, &client.Options{Token: "peeker-secret"})
	s := sdk.Subject{"user": "a", "content": "c"}

	denied := map[string]func() error{
		"Take":    func() error { _, err := c.Take(ctx, push, sdk.Attempt{Subject: s}); return err },
		"Allow":   func() error { _, err := c.Allow(ctx, push, s); return err },
		"Reserve": func() error { _, _, err := c.Reserve(ctx, push, sdk.Attempt{Subject: s}, time.Minute); return err },
		"TakeBatch": func() error {
			return c.TakeBatch(ctx, push, []sdk.Attempt{{Subject: s}})[0].Err
		},
		"Inspect":    func() error { _, err := c.Admin().Inspect(ctx, push, s); return err },
		"Reset":      func() error { return c.Admin().Reset(ctx, push, s) },
		"ResetRules": func() error { return c.Admin().ResetRules(ctx, push, s, "recv-1m") },
		"SetOverride": func() error {
			_, err := c.Admin().SetOverride(ctx, push, s, driver.Override{Kind: driver.Exempt})
			return err
		},
		"DeleteOverride": func() error { return c.Admin().DeleteOverride(ctx, push, s, 1) },
		"Overrides":      func() error { _, err := c.Admin().Overrides(ctx, push, s); return err },
	}
	for name, call := range denied {
		if err := call(); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s without the grant = %v, want permission_denied", name, err)
		}
	}
	if d, err := c.Peek(ctx, push, sdk.Attempt{Subject: s}); err != nil || !d.Allowed {
		t.Errorf("Peek with the grant = %+v, %v; want allowed", d, err)
	}
	if rs := c.PeekBatch(ctx, push, []sdk.Attempt{{Subject: s}}); rs[0].Err != nil || !rs[0].Decision.Allowed {
		t.Errorf("PeekBatch with the grant = %+v, want allowed", rs[0])
	}

	other, err := sdk.NewPolicy("other", []sdk.Rule{sdk.FixedWindow("f", 1, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Peek(ctx, other, sdk.Attempt{Subject: s}); !errors.Is(err, sdk.ErrInvalidPolicy) || connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Peek of a policy the server does not serve = %v, want not_found wrapping sdk.ErrInvalidPolicy", err)
	}
	if _, err := c.ReservationOf(nil, s, "0123456789abcdef"); !errors.Is(err, sdk.ErrInvalidPolicy) {
		t.Errorf("ReservationOf(nil policy) = %v, want sdk.ErrInvalidPolicy", err)
	}

	// Nothing listens on a closed listener's address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	down := client.New(gone, &client.Options{Retry: &client.Retry{Tries: 1}})
	if _, err := down.Take(ctx, push, sdk.Attempt{Subject: s}); err == nil || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("Take, fail-closed, server unreachable = %v, want unavailable", err)
	}
	d, err := down.Take(ctx, open, sdk.Attempt{Subject: s})
	if err != nil || !d.Allowed || !d.Degraded || d.Err == nil {
		t.Errorf("Take, fail-open, server unreachable = %+v, %v; want allowed, degraded, with the error", d, err)
	}
	d, r, err := down.Reserve(ctx, open, sdk.Attempt{Subject: s}, time.Minute)
	if err != nil || !d.Degraded || r == nil || r.ID() != "" || r.Commit(ctx) != nil || r.Cancel(ctx) != nil {
		t.Errorf("Reserve, fail-open, server unreachable = %+v, %v, %v; want degraded, a reservation that settles as a no-op", d, r, err)
	}
	if rs := down.TakeBatch(ctx, open, []sdk.Attempt{{Subject: s}}); rs[0].Err != nil || !rs[0].Decision.Degraded {
		t.Errorf("TakeBatch, fail-open, server unreachable = %+v, want degraded", rs[0])
	}
	if _, err := down.Admin().Inspect(ctx, open, s); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("Inspect, server unreachable = %v, want unavailable (administration never fails open)", err)
	}
}
