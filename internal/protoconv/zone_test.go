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

// An attempt's zone travels by name; a name that does not load is
// sdk.ErrInvalidZone, classified and read back as such.
func TestZone(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	if got := protoconv.ToZone(nil); got != "" {
		t.Errorf("ToZone(nil) = %q, want \"\"", got)
	}
	if got := protoconv.ToZone(tokyo); got != "Asia/Tokyo" {
		t.Errorf("ToZone(Asia/Tokyo) = %q", got)
	}
	if z, err := protoconv.Zone(""); z != nil || err != nil {
		t.Errorf("Zone(\"\") = %v, %v, want none", z, err)
	}
	if z, err := protoconv.Zone("Asia/Tokyo"); err != nil || z.String() != "Asia/Tokyo" {
		t.Errorf("Zone(Asia/Tokyo) = %v, %v", z, err)
	}
	w := protoconv.ToAttempts([]sdk.Attempt{{Subject: sdk.Subject{"user": "1"}, Zone: tokyo}})
	if w[0].GetZone() != "Asia/Tokyo" {
		t.Errorf("ToAttempts: zone %q, want Asia/Tokyo", w[0].GetZone())
	}
	for _, name := range []string{"Mars/Olympus", "Local"} {
		_, err := protoconv.Zone(name)
		code, reason := protoconv.Classify(fmt.Errorf("sdk: take: %w", err))
		if !errors.Is(err, sdk.ErrInvalidZone) || code != connect.CodeInvalidArgument || reason != freqcapv1.Reason_REASON_INVALID_ZONE {
			t.Errorf("Zone(%q) = %v, classified %v %v, want %v: invalid_argument, REASON_INVALID_ZONE", name, err, code, reason, sdk.ErrInvalidZone)
		}
	}
	if got := protoconv.Sentinel(freqcapv1.Reason_REASON_INVALID_ZONE); got != sdk.ErrInvalidZone {
		t.Errorf("Sentinel(REASON_INVALID_ZONE) = %v, want %v", got, sdk.ErrInvalidZone)
	}
}

// Weekly and monthly rules travel with their unit and zone.
func TestPolicyRoundTripCalendarUnits(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sdk.NewPolicy("digest", []sdk.Rule{
		sdk.Hourly("h", 1, berlin).By("user"),
		sdk.Daily("d", 3, berlin).By("user"),
		sdk.Weekly("w", 10, berlin).By("user"),
		sdk.Monthly("m", 30, berlin).By("user"),
	})
	if err != nil {
		t.Fatal(err)
	}
	wire := protoconv.Policy(p)
	for i, want := range []freqcapv1.Calendar{freqcapv1.Calendar_CALENDAR_HOUR, freqcapv1.Calendar_CALENDAR_DAY, freqcapv1.Calendar_CALENDAR_WEEK, freqcapv1.Calendar_CALENDAR_MONTH} {
		if got := wire.GetRules()[i].GetCalendar(); got != want || int32(got) != int32(p.Rules()[i].Calendar) {
			t.Errorf("rule %d calendar = %v, want %v (driver %v, same number)", i, got, want, driver.CalendarUnit(got))
		}
	}
	got, err := protoconv.FromPolicy(wire)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Rules(), p.Rules()) {
		t.Errorf("rebuilt as %+v, want %+v", got.Rules(), p.Rules())
	}
}
