package alg

import (
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q) = %v", name, err)
	}
	return loc
}

func TestFixedBounds(t *testing.T) {
	ny, sh, ktm := mustZone(t, "America/New_York"), mustZone(t, "Asia/Shanghai"), mustZone(t, "Asia/Kathmandu")
	day := func(loc *time.Location) driver.Rule {
		return driver.Rule{Algorithm: driver.FixedWindow, Limit: 1, Window: 24 * time.Hour, Calendar: driver.Day, Location: loc}
	}
	hour := func(loc *time.Location) driver.Rule {
		return driver.Rule{Algorithm: driver.FixedWindow, Limit: 1, Window: time.Hour, Calendar: driver.Hour, Location: loc}
	}
	tests := []struct {
		name       string
		r          driver.Rule
		now        time.Time
		start, end time.Time
	}{
		{"epoch 7s", driver.Rule{Window: 7 * time.Second}, time.Unix(100, 0), time.Unix(98, 0), time.Unix(105, 0)},
		{"epoch day is UTC", driver.Rule{Window: 24 * time.Hour}, t0, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)},
		{"Shanghai 23:59", day(sh), time.Date(2026, 3, 1, 15, 59, 0, 0, time.UTC),
			time.Date(2026, 3, 1, 0, 0, 0, 0, sh), time.Date(2026, 3, 2, 0, 0, 0, 0, sh)},
		{"Shanghai midnight", day(sh), time.Date(2026, 3, 1, 16, 0, 0, 0, time.UTC),
			time.Date(2026, 3, 2, 0, 0, 0, 0, sh), time.Date(2026, 3, 3, 0, 0, 0, 0, sh)},
		{"New York spring forward: 23h", day(ny), time.Date(2026, 3, 8, 12, 0, 0, 0, ny),
			time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 8, 0, 0, 0, 0, ny).Add(23 * time.Hour)},
		{"New York fall back: 25h", day(ny), time.Date(2026, 11, 1, 12, 0, 0, 0, ny),
			time.Date(2026, 11, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 1, 0, 0, 0, 0, ny).Add(25 * time.Hour)},
		{"Kathmandu hour starts at :15 UTC", hour(ktm), time.Date(2026, 3, 1, 12, 10, 0, 0, time.UTC),
			time.Date(2026, 3, 1, 11, 15, 0, 0, time.UTC), time.Date(2026, 3, 1, 12, 15, 0, 0, time.UTC)},
		{"New York repeated 1am hour, second pass", hour(ny), time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC),
			time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start, end := FixedBounds(tc.r, tc.now)
			if !start.Equal(tc.start) || !end.Equal(tc.end) {
				t.Errorf("FixedBounds(%v) = %v, %v, want %v, %v (%v long)", tc.now, start, end, tc.start, tc.end, tc.end.Sub(tc.start))
			}
		})
	}
}

func TestGCRARescale(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name     string
		ahead    time.Duration // tat - now
		from, to time.Duration
		want     time.Duration // the result - now
	}{
		{"same interval", 47 * time.Minute, 12 * time.Minute, 12 * time.Minute, 47 * time.Minute},
		{"slower: the count kept", 47 * time.Minute, 12 * time.Minute, 24 * time.Minute, 94 * time.Minute},
		{"faster: the debt kept", 48 * time.Minute, 12 * time.Minute, 6 * time.Minute, 48 * time.Minute},
		{"rounded up", 1, 2, 3, 2},
		{"not ahead", -time.Minute, 12 * time.Minute, 24 * time.Minute, -time.Minute},
		{"unknown interval", 10 * time.Minute, 0, 24 * time.Minute, 10 * time.Minute},
		{"saturates", driver.MaxTolerance, time.Microsecond, driver.MaxTolerance, 2 * driver.MaxTolerance},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := GCRARescale(now.Add(tc.ahead), tc.from, tc.to, now).Sub(now); got != tc.want {
				t.Errorf("GCRARescale(now%+v, %v, %v) = now%+v, want now%+v", tc.ahead, tc.from, tc.to, got, tc.want)
			}
		})
	}
}
