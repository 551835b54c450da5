package redis

import (
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/sdk/driver"
)

// BenchmarkCalendarBounds is the client-side cost of one calendar rule's
// boundaries, as each attempt pays it (cached: through the Backend's
// calendarCache; uncached: calendarBounds): the clock moves a
// microsecond per call, so nearly every call falls in the unit of the
// one before.
func BenchmarkCalendarBounds(b *testing.B) {
	for _, tc := range calendarBenchCases(b) {
		b.Run("uncached/"+tc.name, func(b *testing.B) {
			now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				if _, err := calendarBounds(now, tc.unit, tc.loc, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("cached/"+tc.name, func(b *testing.B) {
			var c calendarCache
			now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				if _, err := c.bounds(now, tc.unit, tc.loc, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type calendarBenchCase struct {
	name string
	unit driver.CalendarUnit
	loc  *time.Location
}

func calendarBenchCases(b *testing.B) []calendarBenchCase {
	b.Helper()
	load := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			b.Fatal(err)
		}
		return loc
	}
	return []calendarBenchCase{
		{"hour/UTC", driver.Hour, time.UTC},
		{"hour/Asia/Kolkata", driver.Hour, load("Asia/Kolkata")},
		{"day/America/New_York", driver.Day, load("America/New_York")},
		{"week/Europe/London", driver.Week, load("Europe/London")},
		{"month/Australia/Lord_Howe", driver.Month, load("Australia/Lord_Howe")},
	}
}

// BenchmarkFastAttemptCalendar is BenchmarkFastAttempt for the fast
// policies' calendar rules (a New York day, an epoch hour, a UTC hour):
// the attempt's boundaries included.
func BenchmarkFastAttemptCalendar(b *testing.B) {
	be := New(nil, nil)
	s := subject{base: "fcb:{u1}:cal:"}
	req := s.request(opTake, 1, fastPolicies(s)["calendar"]...)
	rep := capability.Choose([]capability.Node{{Addr: "plain", Scripting: true}}, capability.Config{})
	if a, ok := be.fastAttempt(req.op, req.Request, &rep); !ok || len(a.cals) != 2 {
		b.Fatalf("fast attempt: %v, %d calendar rules, want 2", ok, len(a.cals))
	}
	b.ReportAllocs()
	for b.Loop() {
		a, _ := be.fastAttempt(req.op, req.Request, &rep)
		_ = a.args()
	}
}
