package console

import (
	"context"
	"html"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestSlidingWindowCellNote: a wait within the window is never explained
// as longer than it. The seed policy's sliding windows (limits 2 to 50,
// at most driver.LogLine) are exact logs, so their retry and reset never
// exceed the window: no cell note anywhere. (A sliding window above the
// line counts in cells and gets the note where its wait exceeds the
// window: TestSlidingWindowCellNoteAboveLogLine.)
func TestSlidingWindowCellNote(t *testing.T) {
	f := newFixture(t, nil)
	cell := 5900 * time.Millisecond
	start := time.UnixMilli((t0.UnixMilli()/cell.Milliseconds() + 1) * cell.Milliseconds()).UTC()
	f.clock.Set(start)
	if ds := f.allow(t, "push", push, 3); ds[2].Allowed || ds[2].RetryAfter != 59*time.Second {
		t.Fatalf("third Allow = allowed %t, retry %v, want denied for the window (59s)", ds[2].Allowed, ds[2].RetryAfter)
	}
	body := html.UnescapeString(readBody(t, f.do(t, req{path: "/subject?" + subjectQuery("push", push)})))
	if strings.Contains(body, "cell-note") || !strings.Contains(body, "retry in 59s") {
		t.Errorf("subject page: want a retry of 59s and no cell note:\n%s", body)
	}
	user := html.UnescapeString(readBody(t, f.do(t, req{path: "/subject?policy=push&user=" + push["user"]})))
	if strings.Contains(user, "longer than the 59s window") {
		t.Errorf("user page explains a wait within the window as longer:\n%s", user)
	}
	// Fixed windows and GCRA never wait longer than their window.
	f.allow(t, "api", sdk.Subject{"user": "u1", "campaign": "c"}, 4)
	if body := readBody(t, f.do(t, req{path: "/subject?policy=api&user=u1&campaign=c"})); strings.Contains(body, "cell-note") {
		t.Errorf("api's rules are explained as cells:\n%s", body)
	}
}

// TestSlidingWindowCellNoteAboveLogLine: a sliding window above
// driver.LogLine counts in cells, so its reset or retry can be longer than
// its window (a unit counts until its whole cell has left it); the
// subject page explains that beside the value (the rules table, the
// verdict, the trail) and once at length, and not once the wait is back
// within the window.
func TestSlidingWindowCellNoteAboveLogLine(t *testing.T) {
	bulk, err := sdk.NewPolicy("bulk", []sdk.Rule{sdk.SlidingWindow("bulk-1m", 5*driver.LogLine, time.Minute).By("user")}, sdk.WithTrail(10, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureCfg(t, nil, nil, nil, func(cfg *Config, _ driver.Backend, _ *sdk.Limiter) {
		cfg.Policies = append(cfg.Policies, bulk)
	})
	// The start of one of bulk-1m's 6 s cells: the whole limit taken
	// there counts until the cell has left the window, 11 cells (1m 06s)
	// later.
	cell := 6 * time.Second
	f.clock.Set(time.UnixMilli((t0.UnixMilli()/cell.Milliseconds() + 1) * cell.Milliseconds()).UTC())
	ctx := context.Background()
	subj := sdk.Subject{"user": "u-cells"}
	if d, err := f.lim.Take(ctx, bulk, sdk.Attempt{Subject: subj, Cost: 5 * driver.LogLine}); err != nil || !d.Allowed {
		t.Fatalf("Take(cost %d) = %+v, %v, want allowed", 5*driver.LogLine, d, err)
	}
	if d, err := f.lim.Allow(ctx, bulk, subj); err != nil || d.Allowed || d.RetryAfter != 11*cell {
		t.Fatalf("Allow after the limit = %+v, %v, want denied for 11 cells (%v)", d, err, 11*cell)
	}
	page := "/subject?" + subjectQuery("bulk", subj)
	const note = "longer than the 1m window: a unit counts until its whole 6s cell has left it"
	body := html.UnescapeString(readBody(t, f.do(t, req{path: page})))
	for _, want := range []string{
		`<div class="bad retry">retry in 1m 06s</div><div class="muted cell-note retry-note">` + note + `</div>`,
		`1m 06s <div class="muted cell-note reset-note">` + note + `</div>`,
		`<p class="muted cell-note" id="verdict-cells">bulk-1m: ` + note + `</p>`,
		`<p class="muted" id="cells-note">` + cellsNote + `</p>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("subject page lacks %q:\n%s", want, body)
		}
	}
	if _, trail, _ := strings.Cut(body, `<table id="trail"`); !strings.Contains(trail, `1m 06s <div class="muted cell-note">`+note+`</div>`) {
		t.Errorf("the trail's denial lacks the note:\n%s", trail)
	}

	// 10 s later the wait (56 s) is within the window: no note beside the
	// counters or the verdict, nor at length; the trail keeps the wait
	// the denial had.
	f.clock.Advance(10 * time.Second)
	body = html.UnescapeString(readBody(t, f.do(t, req{path: page})))
	live, trail, _ := strings.Cut(body, `<table id="trail"`)
	if !strings.Contains(live, "retry in 56s") || strings.Contains(live, "cell-note") || strings.Contains(live, "cells-note") {
		t.Errorf("subject page 10s later: want a retry of 56s and no cell note:\n%s", live)
	}
	if !strings.Contains(trail, note) {
		t.Errorf("the trail's denial lost its note:\n%s", trail)
	}
}
