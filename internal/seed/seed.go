// Package seed holds the repository's one copy of the seed policies
// (policies.yaml): the caps of a messaging platform ("push") and an API
// policy with a burst and a calendar-day cap ("api"). The console and the
// benchmark use them when no policy file is given; tests load them.
package seed

import (
	"bytes"
	_ "embed"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

// YAML is the policy file, as policyfile.Load reads it.
//
//go:embed policies.yaml
var YAML []byte

// Policies parses YAML.
func Policies() ([]*sdk.Policy, error) {
	return policyfile.Load(bytes.NewReader(YAML))
}
