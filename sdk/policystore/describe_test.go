package policystore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// TestPlanTextSaysWhatRuns: a plan describes a sliding window as what is
// evaluated (sdk.Rule.ExactLog): "exact log" up to driver.LogLine, its cells
// above; never "(10 cells)" for a rule that runs as a log.
func TestPlanTextSaysWhatRuns(t *testing.T) {
	ctx := context.Background()
	st := policystore.New(memory.New(nil))
	plan, err := st.Plan(ctx, []byte(`
policies:
  - name: push
    rules:
      - {name: small, algorithm: sliding_window, limit: 15, window: 1m, by: [user]}
      - {name: line, algorithm: sliding_window, limit: 100, window: 1m, by: [user]}
      - {name: big, algorithm: sliding_window, limit: 101, window: 1m, by: [user]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if driver.LogLine != 100 {
		t.Fatalf("driver.LogLine = %d: the test's limits assume 100", driver.LogLine)
	}
	text := plan.String()
	for _, want := range []string{
		"rule small: added: sliding_window 15 per 1m0s (exact log) by [user]",
		"rule line: added: sliding_window 100 per 1m0s (exact log) by [user]",
		"rule big: added: sliding_window 101 per 1m0s (10 cells) by [user]",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("plan text lacks %q:\n%s", want, text)
		}
	}
}
