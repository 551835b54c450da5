package serve_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/client"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/gen/freqcap/v1/freqcapv1connect"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policyfile"
	"github.com/freqcap/freqcap/sdk/policystore"
	"github.com/freqcap/freqcap/serve"
)

func mustLoad(t testing.TB, doc string) []*sdk.Policy {
	t.Helper()
	ps, err := policyfile.Load(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// A server following live policies (Config.Live) decides each call with
// the current version, says which in the decision and ListPolicies, and
// serves policies added and stops serving those removed by a new version,
// without restart, on Redis.
func TestLivePolicies(t *testing.T) {
	b, _ := backendKinds[1].new(t) // redis
	var cur atomic.Pointer[policystore.Snapshot]
	at1 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	cur.Store(&policystore.Snapshot{Version: 1, At: at1, Policies: mustLoad(t, `
policies:
  - name: live
    rules:
      - {name: r, algorithm: fixed_window, limit: 2, window: 1h, by: [user]}
`)})
	e := start(t, b, serve.Config{Live: cur.Load})
	ctx := context.Background()
	raw := freqcapv1connect.NewFreqcapServiceClient(http.DefaultClient, e.url)
	take := func(policy string) (*freqcapv1.Decision, error) {
		t.Helper()
		res, err := raw.Take(ctx, connect.NewRequest(&freqcapv1.TakeRequest{Policy: policy, Subject: map[string]string{"user": "live-1"}}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetDecision(), nil
	}
	check := func(policy string, wantVersion, wantUsed, wantLimit int64, wantAllowed bool) {
		t.Helper()
		d, err := take(policy)
		if err != nil {
			t.Fatalf("Take(%s): %v", policy, err)
		}
		if d.GetPolicyVersion() != wantVersion || d.GetAllowed() != wantAllowed || len(d.GetRules()) != 1 ||
			d.GetRules()[0].GetUsed() != wantUsed || d.GetRules()[0].GetLimit() != wantLimit {
			t.Fatalf("Take(%s) = %v, want version %d, allowed %v, used %d of %d", policy, d, wantVersion, wantAllowed, wantUsed, wantLimit)
		}
	}
	served := func(wantVersion int64, wantAt time.Time, wantNames ...string) {
		t.Helper()
		sp, err := client.New(e.url, &client.Options{Protocol: client.ConnectJSON}).ServedPolicies(ctx)
		if err != nil {
			t.Fatalf("ServedPolicies: %v", err)
		}
		var names []string
		for _, p := range sp.Policies {
			names = append(names, p.Name())
		}
		if sp.Version != wantVersion || !sp.At.Equal(wantAt) || strings.Join(names, ",") != strings.Join(wantNames, ",") {
			t.Fatalf("ServedPolicies = version %d at %v %v, want %d at %v %v", sp.Version, sp.At, names, wantVersion, wantAt, wantNames)
		}
	}

	check("live", 1, 1, 2, true)
	check("live", 1, 2, 2, true)
	check("live", 1, 2, 2, false)
	served(1, at1, "live")

	// Version 2 raises the limit (same rule identity: the count carries)
	// and adds a policy.
	at2 := at1.Add(time.Hour)
	cur.Store(&policystore.Snapshot{Version: 2, At: at2, Policies: mustLoad(t, `
policies:
  - name: live
    rules:
      - {name: r, algorithm: fixed_window, limit: 3, window: 1h, by: [user]}
  - name: extra
    rules:
      - {name: e, algorithm: fixed_window, limit: 1, window: 1h, by: [user]}
`)})
	check("live", 2, 3, 3, true)
	check("extra", 2, 1, 1, true)
	served(2, at2, "live", "extra")

	// Version 3 removes it again.
	cur.Store(&policystore.Snapshot{Version: 3, At: at2.Add(time.Hour), Policies: mustLoad(t, `
policies:
  - name: live
    rules:
      - {name: r, algorithm: fixed_window, limit: 3, window: 1h, by: [user]}
`)})
	if _, err := take("extra"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("Take(extra) after its removal: %v, want not_found", err)
	}
	check("live", 3, 3, 3, false)
}

// Writes to the policy store and to overrides need the admin operation,
// granted by name: "*" operations do not include it; reads need inspect on
// every policy (store) or on the policy (overrides).
func TestAdminScope(t *testing.T) {
	b, _ := backendKinds[0].new(t)
	cs, err := serve.ParseCallers("support:" + supportSecret + ":*@*\tadmin:adm1n-s3cret:admin@*\t" +
		"pushadmin:pushadm1n-s3cret:admin@push\tauditor:" + auditorSecret + ":inspect@push")
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, b, serve.Config{Callers: cs})
	ctx := context.Background()
	push := e.policies["push"]
	s := sdk.Subject{"user": "admin-scope"}
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			cl := func(tok string) *client.Client { return client.New(e.url, &client.Options{Protocol: pr.p, Token: tok}) }
			support, admin, pushAdmin, auditor := cl(supportSecret), cl("adm1n-s3cret"), cl("pushadm1n-s3cret"), cl(auditorSecret)
			apply := func(c *client.Client) error {
				_, err := c.ApplyPolicies(ctx, []byte(testPolicies), 0, false, "test")
				return err
			}
			setOverride := func(c *client.Client) error {
				_, err := c.Admin().SetOverride(ctx, push, s, driver.Override{Kind: driver.Block, Reason: "test"})
				return err
			}
			for _, tc := range []struct {
				name string
				call func() error
				code connect.Code
			}{
				{"*@* may not apply", func() error { return apply(support) }, connect.CodePermissionDenied},
				{"*@* may not roll back", func() error {
					_, err := support.RollbackPolicies(ctx, 1, 0, false, "test")
					return err
				}, connect.CodePermissionDenied},
				{"*@* may not set an override", func() error { return setOverride(support) }, connect.CodePermissionDenied},
				{"*@* may not delete an override", func() error { return support.Admin().DeleteOverride(ctx, push, s, 1) }, connect.CodePermissionDenied},
				{"admin on push may not apply", func() error { return apply(pushAdmin) }, connect.CodePermissionDenied},
				{"inspect on push may not read the store", func() error {
					_, err := auditor.PolicyHistory(ctx, 0)
					return err
				}, connect.CodePermissionDenied},
				{"inspect on push may not set an override", func() error { return setOverride(auditor) }, connect.CodePermissionDenied},
				// Past the scope check: this server serves a file.
				{"admin@* applies (no store here)", func() error { return apply(admin) }, connect.CodeFailedPrecondition},
				{"*@* reads the store (no store here)", func() error {
					_, err := support.PolicyHistory(ctx, 0)
					return err
				}, connect.CodeFailedPrecondition},
			} {
				t.Run(tc.name, func(t *testing.T) {
					if err := tc.call(); connect.CodeOf(err) != tc.code {
						t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
					}
				})
			}
		})
	}
}

// A live snapshot the server cannot index (two policies of one name)
// keeps the set in force, and serves none before the first good one.
func TestLivePoliciesUnindexable(t *testing.T) {
	b, _ := backendKinds[0].new(t)
	ps := mustLoad(t, "policies:\n  - name: a\n    rules:\n      - {name: r, algorithm: fixed_window, limit: 2, window: 1h, by: [user]}\n")
	var cur atomic.Pointer[policystore.Snapshot]
	cur.Store(&policystore.Snapshot{Version: 1, Policies: []*sdk.Policy{ps[0], ps[0]}})
	e := start(t, b, serve.Config{Live: cur.Load})
	c := client.New(e.url, &client.Options{Protocol: client.ConnectJSON})
	ctx := context.Background()
	if _, err := c.Take(ctx, ps[0], sdk.Attempt{Subject: sdk.Subject{"user": "u"}}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("Take under an unindexable first snapshot = %v, want not_found", err)
	}
	cur.Store(&policystore.Snapshot{Version: 2, Policies: ps})
	if d, err := c.Take(ctx, ps[0], sdk.Attempt{Subject: sdk.Subject{"user": "u"}}); err != nil || !d.Allowed {
		t.Fatalf("Take under version 2 = %+v, %v", d, err)
	}
	cur.Store(&policystore.Snapshot{Version: 3, Policies: []*sdk.Policy{ps[0], ps[0]}})
	sp, err := c.ServedPolicies(ctx)
	if err != nil || sp.Version != 2 {
		t.Fatalf("ServedPolicies under an unindexable version 3 = %+v, %v; want version 2 kept", sp, err)
	}
}

// While versions change under load, every decision is made with one
// version: the limits it reports are those of the version it names.
func TestLivePoliciesConsistentPerCall(t *testing.T) {
	b, _ := backendKinds[0].new(t)
	versions := make([]policystore.Snapshot, 8)
	for i := range versions {
		limit := 1000 * (i + 1)
		versions[i] = policystore.Snapshot{Version: int64(i + 1), Policies: mustLoad(t, fmt.Sprintf(`
policies:
  - name: flip
    rules:
      - {name: a, algorithm: fixed_window, limit: %d, window: 1h, by: [user]}
      - {name: b, algorithm: sliding_window, limit: %d, window: 1h, by: [user]}
`, limit, limit+1))}
	}
	var cur atomic.Pointer[policystore.Snapshot]
	cur.Store(&versions[0])
	e := start(t, b, serve.Config{Live: cur.Load})
	raw := freqcapv1connect.NewFreqcapServiceClient(http.DefaultClient, e.url)
	// The flipper installs the next version while a call is in flight.
	flips := make(chan struct{}, 1)
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		i := 0
		for range flips {
			i++
			cur.Store(&versions[i%len(versions)])
		}
	}()
	seen := map[int64]bool{}
	for n := 0; n < 400; n++ {
		select {
		case flips <- struct{}{}:
		default:
		}
		res, err := raw.TakeBatch(context.Background(), connect.NewRequest(&freqcapv1.TakeBatchRequest{Policy: "flip",
			Attempts: []*freqcapv1.Attempt{{Subject: map[string]string{"user": "x"}}, {Subject: map[string]string{"user": "y"}}}}))
		if err != nil {
			t.Fatalf("TakeBatch: %v", err)
		}
		for _, r := range res.Msg.GetResults() {
			d := r.GetDecision()
			v := d.GetPolicyVersion()
			seen[v] = true
			if d.GetRules()[0].GetLimit() != 1000*v || d.GetRules()[1].GetLimit() != 1000*v+1 ||
				res.Msg.GetResults()[0].GetDecision().GetPolicyVersion() != v {
				t.Fatalf("decision under version %d reports limits %d and %d (want %d, %d), batch versions %d and %d",
					v, d.GetRules()[0].GetLimit(), d.GetRules()[1].GetLimit(), 1000*v, 1000*v+1,
					res.Msg.GetResults()[0].GetDecision().GetPolicyVersion(), res.Msg.GetResults()[1].GetDecision().GetPolicyVersion())
			}
		}
	}
	close(flips)
	<-flipped
	if len(seen) < 2 {
		t.Errorf("decisions saw versions %v: the versions did not change under the calls", seen)
	}
}
