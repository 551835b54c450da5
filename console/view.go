package console

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// page is what the layout of c's page needs.
func (s *Server) page(c echo.Context, nav string) views.Page {
	id := identityOf(c)
	p := views.Page{
		Nav:      nav,
		SignedIn: id.Method == "session",
		AuthOff:  !s.auth.enabled(),
		CSRF:     csrfOf(c),
		Demo:     s.cfg.DemoUser != "",
		DemoURL:  s.demoURL,
		DemoUser: s.cfg.DemoUser,
		RefreshM: int(s.cfg.Refresh / time.Millisecond),
	}
	if id.Role != RoleNone {
		p.Who, p.Role = id.String(), id.Role.String()
	}
	return p
}

// subjectFrom reads p's dimension values from get (query or form) and
// returns the non-empty ones, and the form fields. Values are taken
// exactly as given, as the API and the SDK take them: " 42" is not "42"
// (the pages show such white space visibly; see views.idParts).
func subjectFrom(p *sdk.Policy, get func(string) string) (sdk.Subject, []views.Field) {
	shard := p.ShardBy()
	s := sdk.Subject{}
	var fields []views.Field
	for _, d := range p.Dimensions() {
		v := get(d)
		fields = append(fields, views.Field{Name: d, Value: v, Shard: slices.Contains(shard, d)})
		if v != "" {
			s[d] = v
		}
	}
	return s, fields
}

// subjectQuery encodes policy and s as a query string.
func subjectQuery(policy string, s sdk.Subject) string {
	q := url.Values{"policy": {policy}}
	for k, v := range s {
		q.Set(k, v)
	}
	return q.Encode()
}

// cells returns a sliding-window rule's cell length and count, as every
// backend counts them (driver.Rule.Cells).
func cells(r sdk.Rule) (time.Duration, int64) {
	return driver.Rule{Algorithm: driver.SlidingWindow, Window: r.Window, SubWindows: r.SubWindows}.Cells()
}

// cellNote explains, briefly, why a wait of a sliding-window rule r, d
// long, is longer than the rule's window, when it is ("" when it is not,
// or r is no sliding window): the rule counts in cells, and a unit counts
// until its whole cell has left the window (docs/DESIGN.md,
// "SlidingWindow"). The pages explain it at length once (cellsNote).
func cellNote(r sdk.Rule, d time.Duration) string {
	if r.Algorithm != driver.SlidingWindow || r.ExactLog() || d <= r.Window {
		return ""
	}
	size, _ := cells(r)
	return fmt.Sprintf("longer than the %s window: a unit counts until its whole %s cell has left it", fmtWindow(r.Window), fmtWindow(size))
}

// cellsNote is the long explanation of the cellNotes a page shows.
const cellsNote = "Why a wait can be longer than its window: a sliding window counts in cells, and a unit counts until its whole cell has left the window, up to one cell longer than the window (two when the cells do not divide it). In exchange no span of the window's length ever holds more than the limit."

// evaluatedAs is the algorithm whose strategy runs r: a sliding window of
// limit at most driver.LogLine runs as an exact sliding log.
func evaluatedAs(r sdk.Rule) driver.Algorithm {
	if r.Algorithm == driver.SlidingWindow && r.ExactLog() {
		return driver.SlidingLog
	}
	return r.Algorithm
}

// ruleNamed returns p's rule called name.
func ruleNamed(p *sdk.Policy, name string) (sdk.Rule, bool) {
	for _, r := range p.Rules() {
		if r.Name == name {
			return r, true
		}
	}
	return sdk.Rule{}, false
}

// algorithmDetail describes a rule's parameters beyond limit and window.
func algorithmDetail(r sdk.Rule) string {
	switch r.Algorithm {
	case driver.SlidingWindow:
		if r.ExactLog() {
			return fmt.Sprintf("exact log (limit at most %d): each unit counts for exactly the window", driver.LogLine)
		}
		size, n := cells(r)
		return views.Count(n, "cell", "cells") + " of " + fmtWindow(size)
	case driver.GCRA:
		return fmt.Sprintf("rate %d per %s, burst %d: up to %d at once (the limit shown), then one every %s", r.Limit, fmtWindow(r.Window), r.Burst, r.Burst+1, fmtWindow(r.Window/time.Duration(max(r.Limit, 1))))
	case driver.FixedWindow:
		if r.Calendar != driver.NoCalendar {
			loc := "UTC"
			if r.Location != nil {
				loc = r.Location.String()
			}
			return "calendar " + r.Calendar.String() + " in " + loc
		}
		return "epoch-aligned"
	case driver.SlidingLog:
		return "one entry per unit"
	}
	return ""
}

// ruleWindow is the rule's window as shown: for GCRA, the time the shown
// limit (burst+1 units) takes to accrue at the rule's rate.
func ruleWindow(r sdk.Rule) string {
	if r.Calendar != driver.NoCalendar {
		return "1 " + r.Calendar.String()
	}
	return fmtWindow(shownWindow(r))
}

// shownLimit is the limit decisions report for r, and what every page
// shows: the configured limit, except for GCRA, where it is Burst+1 (the
// most a subject can use at once; the rate is Limit per Window).
func shownLimit(r sdk.Rule) int64 {
	if r.Algorithm == driver.GCRA {
		return r.Burst + 1
	}
	return r.Limit
}

// shownWindow is the window shownLimit refills over: r's window, for GCRA
// the time Burst+1 units take to accrue at Limit per Window.
func shownWindow(r sdk.Rule) time.Duration {
	if r.Algorithm == driver.GCRA && r.Limit > 0 {
		return time.Duration(float64(r.Window) / float64(r.Limit) * float64(r.Burst+1))
	}
	return r.Window
}

// fmtWindow formats a configured length compactly: 1m, 59s, 24h, 1h30m, 250ms.
func fmtWindow(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d%(24*time.Hour) == 0 && d > 24*time.Hour:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0 && d < time.Hour:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0 && d < time.Minute:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	s := d.String() // e.g. 1h30m0s, 5.9s
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtCountdown formats a time to wait, rounded up to the second:
// "—" for none, "12s", "4m 05s", "23h 59m", "2d 3h".
func fmtCountdown(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	s := int64(math.Ceil(d.Seconds()))
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm %02ds", s/60, s%60)
	case s < 2*86400:
		return fmt.Sprintf("%dh %02dm", s/3600, (s%3600)/60)
	}
	return fmt.Sprintf("%dd %dh", s/86400, (s%86400)/3600)
}

// fmtAgo formats how long ago t was, relative to now.
func fmtAgo(t, now time.Time) string {
	d := now.Sub(t)
	if d < time.Second {
		return "just now"
	}
	return fmtCountdown(d) + " ago"
}

func fmtRate(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// fmtTime formats an instant as every page shows it.
func fmtTime(t time.Time) string { return views.FormatTime(t) }
