package sdk_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

func shanghai(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatalf("no tzdata: %v", err)
	}
	return loc
}

func TestRuleValidation(t *testing.T) {
	loc := shanghai(t)
	tests := []struct {
		name string
		rule sdk.Rule
		want error  // nil: valid
		msg  string // substring of the error
	}{
		{"fixed", sdk.FixedWindow("f", 10, time.Minute).By("user"), nil, ""},
		{"sliding", sdk.SlidingWindow("s", 10, time.Minute).By("user"), nil, ""},
		{"sliding zero cells defaults", sdk.SlidingWindow("s", 10, time.Minute).WithSubWindows(0).By("user"), nil, ""},
		{"log", sdk.SlidingLog("l", 10, time.Minute).By("user"), nil, ""},
		{"rate", sdk.GCRA("r", 30, time.Minute, 14).By("user"), nil, ""},
		{"daily", sdk.Daily("d", 3, loc).By("user"), nil, ""},
		{"hourly", sdk.Hourly("h", 3, loc).By("user"), nil, ""},
		{"weekly", sdk.Weekly("w", 10, loc).By("user"), nil, ""},
		{"monthly", sdk.Monthly("m", 30, loc).By("user"), nil, ""},
		{"weekly window set", sdk.Rule{Name: "w", Algorithm: driver.FixedWindow, Limit: 1, Window: 7 * 24 * time.Hour, Calendar: driver.Week, Location: loc, Dimensions: []string{"user"}}, nil, ""},
		{"monthly window unset", sdk.Rule{Name: "m", Algorithm: driver.FixedWindow, Limit: 1, Calendar: driver.Month, Location: loc, Dimensions: []string{"user"}}, nil, ""},
		{"calendar window unset", sdk.Rule{Name: "d", Algorithm: driver.FixedWindow, Limit: 1, Calendar: driver.Day, Location: loc, Dimensions: []string{"user"}}, nil, ""},
		{"1ms window", sdk.FixedWindow("f", 1, time.Millisecond).By("user"), nil, ""},
		{"1ms cells", sdk.SlidingWindow("s", 1, 10*time.Millisecond).By("user"), nil, ""},
		{"limit at MaxLimit", sdk.FixedWindow("f", driver.MaxLimit, time.Hour).By("user"), nil, ""},
		{"window at MaxWindow", sdk.SlidingLog("l", 1, driver.MaxWindow).By("user"), nil, ""},
		{"gcra at MinInterval", sdk.GCRA("r", 1_000_000, time.Second, 0).By("user"), nil, ""},
		// 1µs*9007199254740 = 9007199254740000ns, the largest multiple of 1µs <= 2^53ns.
		{"gcra at MaxTolerance", sdk.GCRA("r", 1_000_000, time.Second, 9_007_199_254_739).By("user"), nil, ""},
		{"gcra 1 per MaxTolerance", sdk.GCRA("r", 1, driver.MaxTolerance, 0).By("user"), nil, ""},

		{"zero limit", sdk.FixedWindow("recv-1m", 0, time.Minute).By("user"), sdk.ErrInvalidRule, `rule "recv-1m": invalid rule: limit must be > 0, got 0`},
		{"negative limit", sdk.FixedWindow("f", -1, time.Minute).By("user"), sdk.ErrInvalidRule, "limit must be > 0, got -1"},
		{"limit above MaxLimit", sdk.FixedWindow("f", driver.MaxLimit+1, time.Hour).By("user"), sdk.ErrInvalidRule, "limit must be <= 1125899906842624 (MaxLimit), got 1125899906842625"},
		{"limit max int64", sdk.SlidingWindow("s", math.MaxInt64, time.Hour).By("user"), sdk.ErrInvalidRule, "limit must be <= 1125899906842624 (MaxLimit)"},
		{"gcra limit max int64", sdk.GCRA("r", math.MaxInt64, time.Hour, 0).By("user"), sdk.ErrInvalidRule, "limit must be <= 1125899906842624 (MaxLimit)"},
		{"short window", sdk.FixedWindow("f", 1, time.Microsecond).By("user"), sdk.ErrInvalidRule, "window must be >= 1ms"},
		{"window above MaxWindow", sdk.FixedWindow("f", 1, driver.MaxWindow+1).By("user"), sdk.ErrInvalidRule, "window must be <= 625499h56m53.685248s (MaxWindow)"},
		{"window max duration", sdk.SlidingWindow("s", 1, math.MaxInt64).By("user"), sdk.ErrInvalidRule, "(MaxWindow)"},
		{"gcra window max duration", sdk.GCRA("r", 1, math.MaxInt64, 0).By("user"), sdk.ErrInvalidRule, "(MaxWindow)"},
		{"burst above MaxLimit-1", sdk.GCRA("r", 1, time.Second, driver.MaxLimit).By("user"), sdk.ErrInvalidRule, "burst must be <= 1125899906842623 (MaxLimit-1)"},
		{"burst max int64", sdk.GCRA("r", 1, time.Second, math.MaxInt64).By("user"), sdk.ErrInvalidRule, "burst must be <= 1125899906842623 (MaxLimit-1)"},
		{"gcra interval below MinInterval", sdk.GCRA("r", 1_000_001, time.Second, 0).By("user"), sdk.ErrInvalidRule, "emission interval window/limit must be >= 1µs (MinInterval), got 999ns"},
		{"gcra interval zero", sdk.GCRA("r", driver.MaxLimit, time.Millisecond, 0).By("user"), sdk.ErrInvalidRule, "emission interval window/limit must be >= 1µs (MinInterval), got 0s"},
		{"gcra tolerance above MaxTolerance", sdk.GCRA("r", 1_000_000, time.Second, 9_007_199_254_740).By("user"), sdk.ErrInvalidRule, "tolerance window/limit*(burst+1) must be <= 2501h59m59.254740992s (MaxTolerance), got 1µs*9007199254741"},
		{"gcra interval above MaxTolerance", sdk.GCRA("r", 1, driver.MaxTolerance+1, 0).By("user"), sdk.ErrInvalidRule, "(MaxTolerance)"},
		{"gcra 1 per MaxWindow", sdk.GCRA("r", 1, driver.MaxWindow, 0).By("user"), sdk.ErrInvalidRule, "(MaxTolerance)"},
		{"gcra max burst at max rate", sdk.GCRA("r", driver.MaxLimit, driver.MaxWindow, driver.MaxLimit-1).By("user"), sdk.ErrInvalidRule, "(MaxTolerance), got 2µs*1125899906842624"},
		{"zero window", sdk.SlidingLog("f", 1, 0).By("user"), sdk.ErrInvalidRule, "window must be >= 1ms"},
		{"unknown algorithm", sdk.Rule{Name: "f", Limit: 1, Window: time.Second, Dimensions: []string{"user"}}, sdk.ErrInvalidRule, "unknown algorithm"},
		{"unknown algorithm 9", sdk.Rule{Name: "f", Algorithm: 9, Limit: 1, Window: time.Second, Dimensions: []string{"user"}}, sdk.ErrInvalidRule, "unknown algorithm"},
		{"negative burst", sdk.GCRA("r", 1, time.Second, -1).By("user"), sdk.ErrInvalidRule, "burst must be >= 0, got -1"},
		{"burst on fixed", sdk.Rule{Name: "f", Algorithm: driver.FixedWindow, Limit: 1, Window: time.Second, Burst: 2, Dimensions: []string{"user"}}, sdk.ErrInvalidRule, "burst is only for gcra"},
		{"cells below 1ms", sdk.SlidingWindow("s", 1, 10*time.Millisecond).WithSubWindows(11).By("user"), sdk.ErrInvalidRule, "sub_windows 11 makes cells of"},
		{"negative cells", sdk.SlidingWindow("s", 1, time.Second).WithSubWindows(-1).By("user"), sdk.ErrInvalidRule, "sub_windows must be >= 0"},
		{"cells on log", sdk.SlidingLog("l", 1, time.Second).WithSubWindows(4).By("user"), sdk.ErrInvalidRule, "sub_windows is only for sliding_window"},
		{"calendar on sliding", sdk.Rule{Name: "c", Algorithm: driver.SlidingWindow, Limit: 1, Window: 24 * time.Hour, Calendar: driver.Day, Location: loc, Dimensions: []string{"user"}}, sdk.ErrInvalidRule, "calendar requires algorithm fixed_window"},
		{"calendar without location", sdk.Daily("d", 1, nil).By("user"), sdk.ErrInvalidRule, "requires a location"},
		{"calendar wrong window", sdk.Rule{Name: "d", Algorithm: driver.FixedWindow, Limit: 1, Window: time.Hour, Calendar: driver.Day, Location: loc, Dimensions: []string{"user"}}, sdk.ErrInvalidRule, "window of a calendar day rule must be 24h0m0s"},
		{"month of 30 days", sdk.Rule{Name: "m", Algorithm: driver.FixedWindow, Limit: 1, Window: 30 * 24 * time.Hour, Calendar: driver.Month, Location: loc, Dimensions: []string{"user"}}, sdk.ErrInvalidRule, "window of a calendar month rule must be 744h0m0s (its nominal length)"},
		{"week of 24h", sdk.Rule{Name: "w", Algorithm: driver.FixedWindow, Limit: 1, Window: 24 * time.Hour, Calendar: driver.Week, Location: loc, Dimensions: []string{"user"}}, sdk.ErrInvalidRule, "window of a calendar week rule must be 168h0m0s"},
		{"weekly on gcra", sdk.Rule{Name: "w", Algorithm: driver.GCRA, Limit: 1, Window: 7 * 24 * time.Hour, Calendar: driver.Week, Location: loc, Dimensions: []string{"user"}}, sdk.ErrInvalidRule, "calendar requires algorithm fixed_window"},
		{"monthly in time.Local", sdk.Monthly("m", 1, time.Local).By("user"), sdk.ErrInvalidRule, "needs a named zone"},
		{"unknown calendar", sdk.Rule{Name: "d", Algorithm: driver.FixedWindow, Limit: 1, Window: time.Hour, Calendar: 7, Location: loc, Dimensions: []string{"user"}}, sdk.ErrInvalidRule, "unknown calendar unit"},
		{"location without calendar", sdk.Rule{Name: "d", Algorithm: driver.FixedWindow, Limit: 1, Window: time.Hour, Location: loc, Dimensions: []string{"user"}}, sdk.ErrInvalidRule, "location is only for calendar rules"},
		{"empty name", sdk.FixedWindow("", 1, time.Second).By("user"), sdk.ErrInvalidRule, "name must match"},
		{"name with colon", sdk.FixedWindow("a:b", 1, time.Second).By("user"), sdk.ErrInvalidRule, "name must match"},
		{"name with brace", sdk.FixedWindow("a{b", 1, time.Second).By("user"), sdk.ErrInvalidRule, "name must match"},
		{"name with bang", sdk.FixedWindow("!t", 1, time.Second).By("user"), sdk.ErrInvalidRule, "name must match"},
		{"long name", sdk.FixedWindow(strings.Repeat("a", 65), 1, time.Second).By("user"), sdk.ErrInvalidRule, "name must match"},
		{"bad dimension", sdk.FixedWindow("f", 1, time.Second).By("user", "con tent"), sdk.ErrInvalidRule, `dimension "con tent" must match`},
		{"empty dimension", sdk.FixedWindow("f", 1, time.Second).By("user", ""), sdk.ErrInvalidRule, `dimension "" must match`},
		{"duplicate dimension", sdk.FixedWindow("f", 1, time.Second).By("user", "user"), sdk.ErrInvalidRule, `dimension "user" given twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sdk.NewPolicy("p", []sdk.Rule{tc.rule})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("NewPolicy(%+v) = %v, want nil", tc.rule, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("NewPolicy(%+v) = %v, want %v containing %q", tc.rule, err, tc.want, tc.msg)
			}
		})
	}
}

func TestRuleHelpers(t *testing.T) {
	r := sdk.SlidingWindow("s", 5, time.Minute)
	r2 := r.By("user", "content").WithSubWindows(6)
	if r.Dimensions != nil || r.SubWindows != driver.DefaultSubWindows {
		t.Errorf("By/Cells changed the receiver: %+v", r)
	}
	if got, want := strings.Join(r2.Dimensions, ","), "user,content"; got != want {
		t.Errorf("By(user, content).Dimensions = %s, want %s", got, want)
	}
	if r2.SubWindows != 6 {
		t.Errorf("Cells(6).SubWindows = %d, want 6", r2.SubWindows)
	}
	dims := []string{"user"}
	r3 := r.By(dims...)
	dims[0] = "mutated"
	if r3.Dimensions[0] != "user" {
		t.Errorf("By kept the caller's slice: %v", r3.Dimensions)
	}
}

// TestDriverValues: sdk's algorithm and calendar values convert to
// sdk/driver's by value, so each must equal its driver twin.
func TestDriverValues(t *testing.T) {
	for _, tc := range []struct {
		sdk    driver.Algorithm
		driver driver.Algorithm
	}{
		{driver.FixedWindow, driver.FixedWindow},
		{driver.SlidingWindow, driver.SlidingWindow},
		{driver.SlidingLog, driver.SlidingLog},
		{driver.GCRA, driver.GCRA},
	} {
		if driver.Algorithm(tc.sdk) != tc.driver || tc.sdk.String() != tc.driver.String() {
			t.Errorf("sdk %v (%d) != driver %v (%d)", tc.sdk, tc.sdk, tc.driver, tc.driver)
		}
	}
	for _, tc := range []struct {
		sdk    driver.CalendarUnit
		driver driver.CalendarUnit
	}{{driver.NoCalendar, driver.NoCalendar}, {driver.Day, driver.Day}, {driver.Hour, driver.Hour}, {driver.Week, driver.Week}, {driver.Month, driver.Month}} {
		if driver.CalendarUnit(tc.sdk) != tc.driver {
			t.Errorf("sdk calendar %v (%d) != driver %v (%d)", tc.sdk, tc.sdk, tc.driver, tc.driver)
		}
	}
	if driver.DefaultSubWindows != driver.DefaultSubWindows {
		t.Errorf("DefaultSubWindows = %d, driver's %d", driver.DefaultSubWindows, driver.DefaultSubWindows)
	}
}
