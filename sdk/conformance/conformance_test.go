package conformance

import (
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// The suite's reference models must agree with the numbers DESIGN.md
// quotes, or the suite would hold backends to the wrong answers.
func TestGCRAModelRedisCell(t *testing.T) {
	m := newGCRAModel(sdk.GCRA("g", 10, time.Minute, 4))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	wants := []sdk.RuleDecision{
		want(true, 1, 5, 6*time.Second, 0),
		want(true, 2, 5, 12*time.Second, 0),
		want(true, 3, 5, 18*time.Second, 0),
		want(true, 4, 5, 24*time.Second, 0),
		want(true, 5, 5, 30*time.Second, 0),
		want(false, 5, 5, 30*time.Second, 6*time.Second),
	}
	for i, w := range wants {
		if got := m.step(now, 1, true); got != w {
			t.Errorf("gcraModel.step #%d = %s, want %s", i+1, fmtRule(got), fmtRule(w))
		}
	}
}

func TestLogModel(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := &logModel{limit: 5, w: 10 * time.Second}
	m.step(t0, 2, true)
	m.step(t0.Add(5*time.Second), 3, true)
	now := t0.Add(5 * time.Second)
	if got, w := m.step(now, 1, true), want(false, 5, 5, 10*time.Second, 5*time.Second); got != w {
		t.Errorf("logModel.step(need 1) = %s, want %s", fmtRule(got), fmtRule(w))
	}
	if got, w := m.step(now, 3, false), want(false, 5, 5, 10*time.Second, 10*time.Second); got != w {
		t.Errorf("logModel.step(need 3) = %s, want %s", fmtRule(got), fmtRule(w))
	}
	now = t0.Add(10 * time.Second)
	if got, w := m.step(now, 2, true), want(true, 5, 5, 10*time.Second, 0); got != w {
		t.Errorf("logModel.step(at t0+w) = %s, want %s", fmtRule(got), fmtRule(w))
	}
}

func TestWindowStart(t *testing.T) {
	tests := []struct {
		t    time.Time
		w    time.Duration
		want time.Time
	}{
		{time.Unix(100, 0), 7 * time.Second, time.Unix(98, 0)},
		{time.Unix(98, 0), 7 * time.Second, time.Unix(98, 0)},
		{time.Unix(-1, 0), 7 * time.Second, time.Unix(-7, 0)},
	}
	for _, tc := range tests {
		if got := windowStart(tc.t, tc.w); !got.Equal(tc.want) {
			t.Errorf("windowStart(%v, %v) = %v, want %v", tc.t.Unix(), tc.w, got.Unix(), tc.want.Unix())
		}
	}
}
