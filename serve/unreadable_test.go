package serve_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/client"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// TestPolicyStoreUnreadableVersion: through the real server on Redis,
// with the store's current version written by a newer freqcap: reading
// it, or rolling back to it, is failed_precondition with
// REASON_UNREADABLE_POLICY_VERSION (errors.Is policystore.ErrUnreadableVersion
// through the client), not unavailable; the server keeps deciding with
// version 1; a plan is made against version 1 and says so, re-keys
// nothing, and applies unconfirmed with the counts carried.
func TestPolicyStoreUnreadableVersion(t *testing.T) {
	b, _ := backendKinds[1].new(t) // redis
	e, st := storeEnv(t, b)
	ctx := context.Background()
	takeVersion(t, e, "u1")
	takeVersion(t, e, "u1")
	if _, err := st.PutPolicies(ctx, 1, policystore.PolicyVersion{Document: []byte(`{"format":"freqcap.policies/v9","source":"…"}`), By: "freqcap-next"}); err != nil {
		t.Fatal(err)
	}
	if d := takeVersion(t, e, "u1"); d.GetPolicyVersion() != 1 || d.GetAllowed() {
		t.Fatalf("Take with version 2 unreadable = %v, want denied under version 1 (kept)", d)
	}
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			admin := client.New(e.url, &client.Options{Protocol: pr.p, Token: "adm1n-s3cret"})
			for _, tc := range []struct {
				name string
				call func() error
			}{
				{"GetPolicyVersion(0)", func() error { _, err := admin.PolicyVersionOf(ctx, 0); return err }},
				{"GetPolicyVersion(2)", func() error { _, err := admin.PolicyVersionOf(ctx, 2); return err }},
				{"RollbackPolicies(2)", func() error { _, err := admin.RollbackPolicies(ctx, 2, 0, false, "to 2"); return err }},
			} {
				err := tc.call()
				if connect.CodeOf(err) != connect.CodeFailedPrecondition || protoconv.ReasonOf(err) != freqcapv1.Reason_REASON_UNREADABLE_POLICY_VERSION ||
					!errors.Is(err, policystore.ErrUnreadableVersion) || !strings.Contains(err.Error(), "version 2 does not load") {
					t.Errorf("%s = %v (%v, %v), want failed_precondition, REASON_UNREADABLE_POLICY_VERSION naming version 2", tc.name, err, connect.CodeOf(err), protoconv.ReasonOf(err))
				}
			}
		})
	}
	admin := client.New(e.url, &client.Options{Token: "adm1n-s3cret"})
	plan, err := admin.PlanPolicies(ctx, []byte(storeV2))
	if err != nil {
		t.Fatal(err)
	}
	if plan.Base != 2 || len(plan.Rekeyed()) != 0 || len(plan.Warnings) == 0 || !strings.Contains(plan.Warnings[0], "version 2 does not load") ||
		!strings.Contains(plan.Warnings[0], "made against version 1") {
		t.Fatalf("PlanPolicies over version 2 = %+v, want base 2, no re-key, a warning naming versions 2 and 1", plan)
	}
	v, err := admin.ApplyPolicies(ctx, []byte(storeV2), 2, false, "replace version 2")
	if err != nil || v.Version != 3 {
		t.Fatalf("ApplyPolicies over an unreadable version = %+v, %v; want version 3, unconfirmed", v, err)
	}
	awaitVersion(t, e, 3)
	if d := takeVersion(t, e, "u1"); d.GetPolicyVersion() != 3 || !d.GetAllowed() || d.GetRules()[0].GetUsed() != 3 {
		t.Fatalf("Take under version 3 = %v, want allowed, 3 of 3 (the count of version 1 carried)", d)
	}
	if d := takeVersion(t, e, "u1"); d.GetAllowed() {
		t.Fatalf("fourth Take under version 3 (limit 3) = %v, want denied", d)
	}
}
