package serve_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/client"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/gen/freqcap/v1/freqcapv1connect"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policystore"
	"github.com/freqcap/freqcap/serve"
)

const (
	storeV1 = `
policies:
  - name: news
    rules:
      - {name: daily, algorithm: fixed_window, limit: 2, window: 1h, by: [user]}
`
	storeV2 = `
policies:
  - name: news
    rules:
      - {name: daily, algorithm: fixed_window, limit: 3, window: 1h, by: [user]}
`
	storeRekey = `
policies:
  - name: news
    rules:
      - {name: daily, algorithm: fixed_window, limit: 3, window: 1h, by: [user, topic]}
`
	storeBad = `
policies:
  - name: news
    rules:
      - {name: daily, algorithm: fixed_window, limit: 3, windw: 1h, by: [user]}
`
)

// storeEnv is a server following a policy store on b, with version 1
// applied, and an admin and a sender credential.
func storeEnv(t *testing.T, b driver.Backend) (*env, *policystore.Store) {
	t.Helper()
	ctx := context.Background()
	prefix := uniquePrefix()
	lim := sdk.New(b, sdk.WithPrefix(prefix))
	st := policystore.New(b, policystore.WithPrefix(prefix))
	plan, err := st.Plan(ctx, []byte(storeV1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, plan, "setup", "version 1"); err != nil {
		t.Fatal(err)
	}
	live, err := st.Watch(ctx, policystore.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close() })
	cs, err := serve.ParseCallers("admin:adm1n-s3cret:admin@*\tsender:" + senderSecret + ":take@news")
	if err != nil {
		t.Fatal(err)
	}
	return start(t, b, serve.Config{Limiter: lim, Live: live.Current, Store: st, Callers: cs}), st
}

// takeVersion takes one unit for user under news, through the wire, and
// returns the decision with the version that made it.
func takeVersion(t *testing.T, e *env, user string) *freqcapv1.Decision {
	t.Helper()
	raw := freqcapv1connect.NewFreqcapServiceClient(http.DefaultClient, e.url)
	req := connect.NewRequest(&freqcapv1.TakeRequest{Policy: "news", Subject: map[string]string{"user": user}})
	req.Header().Set("Authorization", "Bearer "+senderSecret)
	res, err := raw.Take(context.Background(), req)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return res.Msg.GetDecision()
}

// awaitVersion polls (peeks) until the server decides with version v,
// failing after a deadline far above the watch's 2 s bound (the machine
// may be loaded); it returns how long it took.
func awaitVersion(t *testing.T, e *env, v int64) time.Duration {
	t.Helper()
	start := time.Now()
	c := client.New(e.url, &client.Options{Protocol: client.ConnectJSON, Token: senderSecret})
	for {
		sp, err := c.ServedPolicies(context.Background())
		if err != nil {
			t.Fatalf("ServedPolicies: %v", err)
		}
		if sp.Version == v {
			return time.Since(start)
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("the server still serves version %d 15 s after version %d was applied", sp.Version, v)
		}
		time.Sleep(20 * time.Millisecond) // polling a server, not letting time pass
	}
}

// Through the real server on Redis: plan, apply (the next decisions use
// the new version within the watch bound, with the counts carried),
// conflicts on the expected version, invalid documents with their fault,
// unconfirmed re-keys, history, a version's document, rollback; each
// write audited with the caller's name.
func TestPolicyStoreAPI(t *testing.T) {
	b, _ := backendKinds[1].new(t) // redis
	e, _ := storeEnv(t, b)
	ctx := context.Background()
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			admin := client.New(e.url, &client.Options{Protocol: pr.p, Token: "adm1n-s3cret"})
			_, err := admin.PlanPolicies(ctx, []byte(storeBad))
			var de *client.DocumentError
			if !errors.As(err, &de) || len(de.Faults) != 1 || !strings.Contains(de.Faults[0].Message, "line 5") || !strings.Contains(de.Faults[0].Message, "windw") {
				t.Errorf("PlanPolicies(bad) = %v, want a DocumentError with one fault naming line 5 and windw", err)
			}
			_, err = admin.ApplyPolicies(ctx, []byte(storeBad), 1, false, "bad")
			de = nil
			if !errors.As(err, &de) || len(de.Faults) != 1 || connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("ApplyPolicies(bad) = %v, want invalid_argument with one fault", err)
			}
		})
	}

	admin := client.New(e.url, &client.Options{Token: "adm1n-s3cret"})
	if d := takeVersion(t, e, "u1"); d.GetPolicyVersion() != 1 || !d.GetAllowed() {
		t.Fatalf("Take = %v, want allowed under version 1", d)
	}
	takeVersion(t, e, "u1")
	if d := takeVersion(t, e, "u1"); d.GetAllowed() {
		t.Fatalf("third Take under version 1 (limit 2) = %v, want denied", d)
	}

	plan, err := admin.PlanPolicies(ctx, []byte(storeV2))
	if err != nil {
		t.Fatalf("PlanPolicies: %v", err)
	}
	if plan.Base != 1 || len(plan.Rekeyed()) != 0 || len(plan.Diffs) != 1 || plan.Diffs[0].Policy != "news" || len(plan.Diffs[0].Rules) != 1 ||
		plan.Diffs[0].Rules[0].Rule != "daily" || plan.Diffs[0].Rules[0].Kind != policystore.Modified || plan.Diffs[0].Rules[0].Carry != policystore.CarriesExactly ||
		!slices.Contains(plan.Diffs[0].Rules[0].Fields, "limit 2 → 3") || !strings.Contains(plan.String(), "plan: version 2 (against version 1)") ||
		!strings.Contains(plan.String(), "rule daily: modified: limit 2 → 3; carries exactly") {
		t.Fatalf("PlanPolicies = %+v, want base 1 and the limit change of news/daily, carried exactly:\n%s", plan, plan)
	}
	if _, err := admin.ApplyPolicies(ctx, []byte(storeV2), 0, false, "stale"); !errors.Is(err, policystore.ErrVersionConflict) || connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("ApplyPolicies(expected 0) = %v, want aborted, ErrVersionConflict", err)
	}
	if _, err := admin.ApplyPolicies(ctx, []byte(storeV2), 1, false, ""); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("ApplyPolicies without a reason = %v, want invalid_argument", err)
	}
	v, err := admin.ApplyPolicies(ctx, []byte(storeV2), 1, false, "more news")
	if err != nil || v.Version != 2 || v.By != "admin" || v.Reason != "more news" {
		t.Fatalf("ApplyPolicies = %+v, %v; want version 2 by admin", v, err)
	}
	took := awaitVersion(t, e, 2)
	t.Logf("version 2 served %v after ApplyPolicies returned", took)
	if d := takeVersion(t, e, "u1"); d.GetPolicyVersion() != 2 || !d.GetAllowed() || d.GetRules()[0].GetUsed() != 3 || d.GetRules()[0].GetLimit() != 3 {
		t.Fatalf("Take under version 2 = %v, want allowed, 3 of 3 (the count carried)", d)
	}

	// Re-keying needs confirmation.
	plan, err = admin.PlanPolicies(ctx, []byte(storeRekey))
	if err != nil || len(plan.Rekeyed()) == 0 || len(plan.Warnings) == 0 {
		t.Fatalf("PlanPolicies(re-key) = %+v, %v; want rekey with a warning", plan, err)
	}
	if _, err := admin.ApplyPolicies(ctx, []byte(storeRekey), 2, false, "rekey"); !errors.Is(err, policystore.ErrRekeyNotConfirmed) || connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("ApplyPolicies(re-key, unconfirmed) = %v, want failed_precondition, ErrRekeyNotConfirmed", err)
	}

	hist, err := admin.PolicyHistory(ctx, 0)
	if err != nil || len(hist) != 2 || hist[0].Version != 2 || hist[1].Version != 1 || hist[1].By != "setup" || hist[0].YAML != "" {
		t.Fatalf("PolicyHistory = %+v, %v; want versions 2 and 1, without documents", hist, err)
	}
	v1, err := admin.PolicyVersionOf(ctx, 1)
	if err != nil || v1.YAML != storeV1 {
		t.Fatalf("PolicyVersionOf(1) = %+v, %v; want version 1's document", v1, err)
	}
	if _, err := admin.PolicyVersionOf(ctx, 9); !errors.Is(err, policystore.ErrNoPolicyVersion) || connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("PolicyVersionOf(9) = %v, want not_found, ErrNoPolicyVersion", err)
	}

	v3, err := admin.RollbackPolicies(ctx, 1, 2, false, "back to 2 a day")
	if err != nil || v3.Version != 3 {
		t.Fatalf("RollbackPolicies(1) = %+v, %v; want version 3", v3, err)
	}
	awaitVersion(t, e, 3)
	if d := takeVersion(t, e, "u1"); d.GetPolicyVersion() != 3 || d.GetAllowed() {
		t.Fatalf("Take after the rollback = %v, want denied under version 3 (limit 2, 3 used)", d)
	}

	// Confirmed, the re-key is applied: the rule counts by user and topic.
	v4, err := admin.ApplyPolicies(ctx, []byte(storeRekey), 3, true, "per topic")
	if err != nil || v4.Version != 4 {
		t.Fatalf("ApplyPolicies(re-key, confirmed) = %+v, %v; want version 4", v4, err)
	}
	awaitVersion(t, e, 4)
	sp, err := admin.ServedPolicies(ctx)
	if err != nil || len(sp.Policies) != 1 || strings.Join(sp.Policies[0].Rules()[0].Dimensions, ",") != "user,topic" {
		t.Fatalf("ServedPolicies after the re-key = %+v, %v; want news/daily by user and topic", sp, err)
	}

	var actions []string
	for _, a := range e.audits() {
		if a.Caller != "admin" {
			t.Errorf("audit entry %+v: caller %q, want admin", a, a.Caller)
		}
		actions = append(actions, a.Action+" "+a.Outcome)
	}
	want := "policy-apply failed: invalid_argument,policy-apply failed: invalid_argument,policy-apply failed: aborted," +
		"policy-apply ok,policy-apply failed: failed_precondition,policy-rollback ok,policy-apply ok"
	if strings.Join(actions, ",") != want {
		t.Errorf("audit = %q, want %q", actions, want)
	}
}
