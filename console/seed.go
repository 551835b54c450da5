package console

import (
	"bytes"
	_ "embed"

	"github.com/freqcap/freqcap/sdk"
)

// SeedPolicyYAML is the policy file the console uses when none is given:
// the push caps of the messaging platform (15/min, 50/24h per user; 2/59s,
// 5/59m per user and content) and an API policy (GCRA with a burst, and 3
// per calendar day per user and campaign).
//
//go:embed policies.yaml
var SeedPolicyYAML []byte

// SeedPolicies parses SeedPolicyYAML.
func SeedPolicies() ([]*sdk.Policy, error) {
	return sdk.LoadPolicies(bytes.NewReader(SeedPolicyYAML))
}
