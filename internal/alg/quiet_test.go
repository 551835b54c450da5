package alg

import (
	"testing"
	"time"
)

func TestQuietSpans(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatalf("LoadLocation = %v (time/tzdata is linked in: calendar_test.go)", err)
	}
	night := []Quiet{{From: 21 * time.Hour, To: 8 * time.Hour}}
	utc := func(s string) time.Time {
		x, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for _, tc := range []struct {
		name     string
		qs       []Quiet
		from, to string
		want     [][2]string
	}{
		{"a night across spring forward: 10 h", night, "2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z",
			[][2]string{{"2026-03-28T20:00:00Z", "2026-03-29T06:00:00Z"}}},
		{"a night across fall back: 12 h", night, "2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z",
			[][2]string{{"2026-10-24T19:00:00Z", "2026-10-25T07:00:00Z"}}},
		{"two nights", night, "2026-06-01T12:00:00Z", "2026-06-02T19:00:00.001Z",
			[][2]string{{"2026-06-01T19:00:00Z", "2026-06-02T06:00:00Z"}, {"2026-06-02T19:00:00Z", "2026-06-03T06:00:00Z"}}},
		{"weekdays only: Saturday 2026-06-06 night is not quiet", []Quiet{{From: 21 * time.Hour, To: 8 * time.Hour, Days: 1<<time.Friday | 1<<time.Sunday}},
			"2026-06-05T12:00:00Z", "2026-06-08T12:00:00Z",
			[][2]string{{"2026-06-05T19:00:00Z", "2026-06-06T06:00:00Z"}, {"2026-06-07T19:00:00Z", "2026-06-08T06:00:00Z"}}},
		{"overlapping periods merge", []Quiet{{From: 21 * time.Hour, To: 8 * time.Hour}, {From: 7 * time.Hour, To: 9 * time.Hour}},
			"2026-06-02T00:00:00Z", "2026-06-02T06:00:00Z",
			[][2]string{{"2026-06-01T19:00:00Z", "2026-06-02T07:00:00Z"}}},
		{"a daytime period", []Quiet{{From: 12 * time.Hour, To: 13 * time.Hour}}, "2026-06-02T00:00:00Z", "2026-06-02T23:00:00Z",
			[][2]string{{"2026-06-02T10:00:00Z", "2026-06-02T11:00:00Z"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := QuietSpans(nil, tc.qs, berlin, utc(tc.from), utc(tc.to))
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i, w := range tc.want {
				if !got[i][0].Equal(utc(w[0])) || !got[i][1].Equal(utc(w[1])) {
					t.Errorf("span %d: got %v – %v, want %v – %v", i, got[i][0].UTC(), got[i][1].UTC(), w[0], w[1])
				}
			}
		})
	}
	if e := QuietEnd(night, berlin, utc("2026-03-29T05:59:59.999Z")); !e.Equal(utc("2026-03-29T06:00:00Z")) {
		t.Errorf("QuietEnd inside = %v", e.UTC())
	}
	if e := QuietEnd(night, berlin, utc("2026-03-29T06:00:00Z")); !e.Equal(utc("2026-03-29T06:00:00Z")) {
		t.Errorf("QuietEnd at the end = %v, want itself", e.UTC())
	}
	if e := QuietEnd(night, berlin, utc("2026-03-28T19:59:59Z")); !e.Equal(utc("2026-03-28T19:59:59Z")) {
		t.Errorf("QuietEnd before = %v, want itself", e.UTC())
	}
}

// TestQuietAcrossMidnightChanges holds QuietSpans to the wall clock, minute
// by minute from 2026-03-20 to 2026-04-10, in zones whose DST changes in
// that span skip or repeat local midnight (the Azores and Beirut skip
// 00:00 to 01:00; Santiago goes back from 24:00 to 23:00) and others: an
// instant is quiet (QuietEnd moves it) exactly when the local clock reads
// 21:00 to 08:00. A skipped midnight once made the day after it lose its
// night (the simulation of tests/messaging found it).
func TestQuietAcrossMidnightChanges(t *testing.T) {
	night := []Quiet{{From: 21 * time.Hour, To: 8 * time.Hour}}
	for _, name := range []string{"Atlantic/Azores", "Asia/Beirut", "America/Santiago", "America/Nuuk", "Europe/Berlin", "Australia/Lord_Howe"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatalf("LoadLocation = %v (time/tzdata is linked in: calendar_test.go)", err)
		}
		bad := 0
		for u := time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC); u.Before(time.Date(2026, 4, 10, 0, 0, 0, 0, time.UTC)); u = u.Add(time.Minute) {
			h := u.In(loc).Hour()
			want := h >= 21 || h < 8
			if got := QuietEnd(night, loc, u).After(u); got != want && bad < 3 {
				bad++
				t.Errorf("%s: QuietEnd(%v, %s local) moves it: %v, want %v", name, u, u.In(loc).Format("2006-01-02 15:04 MST"), got, want)
			}
		}
	}
}
