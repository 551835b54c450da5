package sdk_test

import (
	"context"
	"testing"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestDecisionDurable: a decision says what the backend's Result says of
// the replicas' acknowledgement (driver.Result.Durable and Replicas).
func TestDecisionDurable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		durable  bool
		replicas int
	}{
		{"acknowledged", true, 2},
		{"timed out", false, 1},
		{"not asked", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := sdk.New(takeFunc(func(ctx context.Context, req driver.Request) (driver.Result, error) {
				res := driver.Result{Allowed: true, Durable: tc.durable, Replicas: tc.replicas}
				for _, r := range req.Rules {
					res.Rules = append(res.Rules, driver.RuleResult{Allowed: true, Used: 1, Limit: r.Limit, Remaining: r.Limit - 1})
				}
				return res, nil
			}))
			d, err := lim.Allow(context.Background(), pushPolicy(t), sdk.Subject{"user": "u", "content": "c"})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Durable != tc.durable || d.Replicas != tc.replicas {
				t.Errorf("Allow(…) = Allowed %v Durable %v Replicas %d, want true %v %d", d.Allowed, d.Durable, d.Replicas, tc.durable, tc.replicas)
			}
		})
	}
}
