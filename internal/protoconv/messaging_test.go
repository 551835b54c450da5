package protoconv_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// A decision's messaging fields (class, exemptions, headroom and rooms,
// quiet hours, the next eligible instant) and a trail entry's survive the
// trip to the wire and back.
func TestRoundTripMessaging(t *testing.T) {
	at := time.Date(2026, 11, 24, 22, 0, 0, 5, time.UTC)
	d := sdk.Decision{
		Policy: "push", At: at, Denied: []string{"daily"}, RetryAfter: 10 * time.Hour,
		Class: "otp", Exempted: []string{"recv-1m"}, Headroom: true,
		Rooms: []sdk.Room{{Rule: "daily", Priority: 0, Remaining: 0}, {Rule: "daily", Priority: 1, Remaining: 10}},
		Quiet: at.Add(10 * time.Hour), NextEligible: at.Add(10*time.Hour + time.Minute),
		Rules: []sdk.RuleDecision{
			{Rule: "recv-1m", Algorithm: driver.SlidingWindow, Used: 16, Limit: 15, Exempt: driver.ExemptCounted},
			{Rule: "recv-24h", Algorithm: driver.SlidingWindow, Used: 3, Limit: 50, Exempt: driver.ExemptUncounted, Allowed: true},
			{Rule: "daily", Algorithm: driver.FixedWindow, Used: 40, Limit: 50, Keep: 10, Headroom: true},
		},
	}
	if got := protoconv.FromDecision(protoconv.Decision(d)); !reflect.DeepEqual(got, d) {
		t.Errorf("round trip = %+v, want %+v", got, d)
	}
	w := protoconv.Decision(d)
	if got := w.GetRules()[0].GetExempt(); got != freqcapv1.Exemption_EXEMPTION_COUNTED || int32(got) != int32(driver.ExemptCounted) {
		t.Errorf("exempt = %v, want EXEMPTION_COUNTED (driver.ExemptCounted, same number)", got)
	}
	if got := w.GetRules()[1].GetExempt(); got != freqcapv1.Exemption_EXEMPTION_UNCOUNTED || int32(got) != int32(driver.ExemptUncounted) {
		t.Errorf("exempt = %v, want EXEMPTION_UNCOUNTED (driver.ExemptUncounted, same number)", got)
	}
	// Absent instants stay absent: an allowed decision has no next_eligible.
	plain := protoconv.Decision(sdk.Decision{Allowed: true, Policy: "push", At: at})
	if plain.NextEligible != nil || plain.QuietUntil != nil || plain.Rooms != nil {
		t.Errorf("allowed decision: next_eligible %v, quiet_until %v, rooms %v, want absent", plain.NextEligible, plain.QuietUntil, plain.Rooms)
	}
	in := sdk.Inspection{
		Policy: "push", At: at, TrailMax: 100, TrailTTL: 24 * time.Hour,
		Denials: []sdk.Denial{
			{At: at, Policy: "push", Rule: "recv-1m", Used: 16, Limit: 15, Cost: 1, Exempt: true, Class: "otp", Priority: 2, Identity: "+4915112345678"},
			{At: at, Policy: "push", Cost: 1, RetryAfter: 10 * time.Hour, Quiet: true, Identity: "device-1"},
		},
	}
	if got := protoconv.FromInspection(protoconv.Inspection(in)); !reflect.DeepEqual(got, in) {
		t.Errorf("inspection round trip = %+v, want %+v", got, in)
	}
}

// An attempt's class, priority and identity travel in a batch.
func TestAttemptsMessaging(t *testing.T) {
	a := []sdk.Attempt{
		{Subject: sdk.Subject{"user": "1"}, Class: "otp", Priority: 3, Identity: "device-1"},
		{Subject: sdk.Subject{"user": "2"}},
	}
	if got := protoconv.Attempts(protoconv.ToAttempts(a)); !reflect.DeepEqual(got, a) {
		t.Errorf("round trip = %+v, want %+v", got, a)
	}
	// A priority the wire cannot hold is sent as one the sdk refuses.
	for _, p := range []int{1 << 40, -1 << 40} {
		got := protoconv.Attempts(protoconv.ToAttempts([]sdk.Attempt{{Priority: p}}))[0].Priority
		if got >= 0 && got <= sdk.MaxPriority {
			t.Errorf("priority %d went over the wire as %d, a valid one", p, got)
		}
	}
}

// ErrInvalidClass, ErrInvalidPriority (invalid_argument) and
// ErrClockSkew (failed_precondition) are classified as their reasons and
// read back as themselves.
func TestMessagingErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		reason freqcapv1.Reason
	}{
		{sdk.ErrInvalidClass, freqcapv1.Reason_REASON_INVALID_CLASS},
		{sdk.ErrInvalidPriority, freqcapv1.Reason_REASON_INVALID_PRIORITY},
		{sdk.ErrClockSkew, freqcapv1.Reason_REASON_CLOCK_SKEW},
	} {
		want := connect.CodeInvalidArgument
		if tc.err == sdk.ErrClockSkew {
			want = connect.CodeFailedPrecondition
		}
		code, reason := protoconv.Classify(fmt.Errorf("sdk: take: %w: x", tc.err))
		if code != want || reason != tc.reason {
			t.Errorf("Classify(%v) = %v, %v, want %v, %v", tc.err, code, reason, want, tc.reason)
		}
		if got := protoconv.Sentinel(tc.reason); !errors.Is(got, tc.err) {
			t.Errorf("Sentinel(%v) = %v, want %v", tc.reason, got, tc.err)
		}
	}
}

// A policy's classes, quiet hours (weekdays included), rules' headroom
// and person dimension are rebuilt from the wire as they were.
func TestPolicyRoundTripMessaging(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.FixedWindow("daily", 50, 24*time.Hour).By("user").WithHeadroom(10, 1).WithHeadroom(5, 5),
	},
		sdk.WithClass(
			sdk.Class{Name: "otp", AllRules: true, Counted: true, QuietHours: true},
			sdk.Class{Name: "digest", Rules: []string{"recv-1m"}},
			sdk.Class{Name: "alert", QuietHours: true},
		),
		sdk.WithQuietHours(berlin,
			sdk.QuietPeriod{From: 21 * time.Hour, To: 8 * time.Hour},
			sdk.QuietPeriod{From: 12 * time.Hour, To: 14 * time.Hour, Days: []time.Weekday{time.Saturday, time.Sunday, time.Monday}},
		),
		sdk.WithPerson("user"),
	)
	if err != nil {
		t.Fatal(err)
	}
	w := protoconv.Policy(p)
	days := w.GetQuietHours().GetPeriods()[1].GetDays()
	if want := []freqcapv1.Weekday{freqcapv1.Weekday_WEEKDAY_SATURDAY, freqcapv1.Weekday_WEEKDAY_SUNDAY, freqcapv1.Weekday_WEEKDAY_MONDAY}; !reflect.DeepEqual(days, want) {
		t.Errorf("days = %v, want %v", days, want)
	}
	got, err := protoconv.FromPolicy(w)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Rules(), p.Rules()) {
		t.Errorf("rules rebuilt as %+v, want %+v", got.Rules(), p.Rules())
	}
	if !reflect.DeepEqual(got.Classes(), p.Classes()) {
		t.Errorf("classes rebuilt as %+v, want %+v", got.Classes(), p.Classes())
	}
	gl, gq := got.QuietHours()
	wl, wq := p.QuietHours()
	if gl.String() != wl.String() || !reflect.DeepEqual(gq, wq) {
		t.Errorf("quiet hours rebuilt as %v %+v, want %v %+v", gl, gq, wl, wq)
	}
	if got.Person() != "user" {
		t.Errorf("person = %q, want user", got.Person())
	}
	// A policy without them has none on the wire.
	plain, err := sdk.NewPolicy("plain", []sdk.Rule{sdk.FixedWindow("d", 1, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	if pw := protoconv.Policy(plain); pw.QuietHours != nil || pw.Classes != nil || pw.Person != "" || pw.Rules[0].Headroom != nil {
		t.Errorf("plain policy on the wire: %v", pw)
	}
	// Quiet hours without a zone are refused, not read as UTC
	// (time.LoadLocation("") is UTC; sdk.LoadZone refuses it).
	w.QuietHours.Timezone = ""
	if _, err := protoconv.FromPolicy(w); !errors.Is(err, sdk.ErrInvalidZone) {
		t.Errorf("FromPolicy with quiet hours' zone \"\" = %v, want %v", err, sdk.ErrInvalidZone)
	}
	w.QuietHours.Timezone = "Europe/Berlin"
	// A weekday the wire cannot name is refused, not read as Sunday.
	w.QuietHours.Periods[1].Days = []freqcapv1.Weekday{freqcapv1.Weekday_WEEKDAY_UNSPECIFIED}
	if _, err := protoconv.FromPolicy(w); err == nil {
		t.Errorf("FromPolicy with WEEKDAY_UNSPECIFIED = nil error, want one")
	}
}
