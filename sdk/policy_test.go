package sdk_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

func TestNewPolicyShardBy(t *testing.T) {
	tests := []struct {
		name      string
		rules     []sdk.Rule
		wantShard []string
		wantDims  []string
	}{
		{"one rule", []sdk.Rule{sdk.FixedWindow("a", 1, time.Second).By("user", "content")}, []string{"user", "content"}, []string{"user", "content"}},
		{"seed caps", []sdk.Rule{
			sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
			sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
		}, []string{"user"}, []string{"user", "content"}},
		{"first rule order", []sdk.Rule{
			sdk.FixedWindow("a", 1, time.Second).By("campaign", "sender", "user"),
			sdk.FixedWindow("b", 1, time.Second).By("user", "campaign", "channel"),
		}, []string{"campaign", "user"}, []string{"campaign", "sender", "user", "channel"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := sdk.NewPolicy("p", tc.rules)
			if err != nil {
				t.Fatalf("NewPolicy = %v, want nil", err)
			}
			if got := p.ShardBy(); !slices.Equal(got, tc.wantShard) {
				t.Errorf("ShardBy() = %v, want %v", got, tc.wantShard)
			}
			if got := p.Dimensions(); !slices.Equal(got, tc.wantDims) {
				t.Errorf("Dimensions() = %v, want %v", got, tc.wantDims)
			}
		})
	}
}

func TestNewPolicyErrors(t *testing.T) {
	ok := sdk.FixedWindow("a", 1, time.Second).By("user")
	tests := []struct {
		name   string
		policy string
		rules  []sdk.Rule
		opts   []sdk.PolicyOption
		want   error
		msg    string
	}{
		{"no shared dimension", "p", []sdk.Rule{ok, sdk.FixedWindow("b", 1, time.Second).By("content")}, nil, sdk.ErrInvalidPolicy, "rules share no dimension"},
		{"rule without dimensions", "p", []sdk.Rule{sdk.FixedWindow("a", 1, time.Second)}, nil, sdk.ErrInvalidPolicy, "rules share no dimension"},
		{"duplicate rule", "p", []sdk.Rule{ok, ok}, nil, sdk.ErrInvalidPolicy, `rule "a": invalid policy: duplicate rule name`},
		{"no rules", "p", nil, nil, sdk.ErrInvalidPolicy, "no rules"},
		{"bad name", "p:q", []sdk.Rule{ok}, nil, sdk.ErrInvalidPolicy, "name must match"},
		{"empty name", "", []sdk.Rule{ok}, nil, sdk.ErrInvalidPolicy, "name must match"},
		{"bad rule", "push", []sdk.Rule{ok, sdk.FixedWindow("recv-1m", 0, time.Minute).By("user")}, nil, sdk.ErrInvalidRule, `sdk: policy "push": rule "recv-1m": invalid rule: limit must be > 0, got 0`},
		{"negative trail", "p", []sdk.Rule{ok}, []sdk.PolicyOption{sdk.WithTrail(-1, time.Hour)}, sdk.ErrInvalidPolicy, "trail max must be >= 0"},
		{"zero trail ttl", "p", []sdk.Rule{ok}, []sdk.PolicyOption{sdk.WithTrail(5, 0)}, sdk.ErrInvalidPolicy, "trail ttl must be >= 1ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := sdk.NewPolicy(tc.policy, tc.rules, tc.opts...)
			if p != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("NewPolicy(%q, …) = %v, %v, want nil, %v containing %q", tc.policy, p, err, tc.want, tc.msg)
			}
		})
	}
}

func TestPolicyAccessors(t *testing.T) {
	rules := []sdk.Rule{sdk.SlidingWindow("s", 5, time.Minute).By("user")}
	p, err := sdk.NewPolicy("push", rules, sdk.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "push" || !p.FailOpen() {
		t.Errorf("Name(), FailOpen() = %q, %v, want push, true", p.Name(), p.FailOpen())
	}
	got := p.Rules()
	got[0].Dimensions[0] = "mutated"
	got[0].Limit = 99
	rules[0].Dimensions[0] = "mutated too"
	if r := p.Rules()[0]; r.Dimensions[0] != "user" || r.Limit != 5 {
		t.Errorf("Rules() shares memory with the policy or caller: %+v", r)
	}
	var nilp *sdk.Policy
	if nilp.Name() != "" || nilp.Rules() != nil || nilp.FailOpen() || nilp.ShardBy() != nil || nilp.Dimensions() != nil {
		t.Error("nil *Policy accessors did not return zero values")
	}
}

// TestSameDimensions: the rules keyed by exactly the dimensions given, in
// any order, for the seed policy push (the sets ResetRules takes whole).
func TestSameDimensions(t *testing.T) {
	p, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("recv-24h", 50, 24*time.Hour).By("user"),
		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
		sdk.SlidingWindow("content-59m", 5, 59*time.Minute).By("user", "content"),
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dims []string
		want string
	}{
		{[]string{"user"}, "recv-1m,recv-24h"},
		{[]string{"user", "content"}, "content-59s,content-59m"},
		{[]string{"content", "user"}, "content-59s,content-59m"},
		{[]string{"content"}, ""},
		{[]string{"user", "content", "campaign"}, ""},
		{nil, ""},
	}
	for _, tc := range tests {
		if got := strings.Join(p.SameDimensions(tc.dims...), ","); got != tc.want {
			t.Errorf("SameDimensions(%q) = %q, want %q", tc.dims, got, tc.want)
		}
	}
	if got := (*sdk.Policy)(nil).SameDimensions("user"); got != nil {
		t.Errorf("nil policy: SameDimensions = %q, want nil", got)
	}
}
