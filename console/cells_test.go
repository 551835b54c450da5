package console

import (
	"html"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// TestSlidingWindowCellNote: a sliding window's reset or retry longer than
// its window (true to the cells: a unit counts until its whole cell has
// left the window) is explained beside the value, in the rules table, the
// verdict, the trail and the blocks; a wait within the window is not.
func TestSlidingWindowCellNote(t *testing.T) {
	f := newFixture(t, nil)
	// The start of a 5.9 s cell of content-59s (t0 starts a 2h24m cell
	// of recv-24h, and this is 3.8 s into it).
	cell := 5900 * time.Millisecond
	start := time.UnixMilli((t0.UnixMilli()/cell.Milliseconds() + 1) * cell.Milliseconds()).UTC()
	f.clock.Set(start)
	if ds := f.allow(t, "push", push, 3); ds[2].Allowed || ds[2].RetryAfter != 11*cell {
		t.Fatalf("third Allow = allowed %t, retry %v, want denied for 11 cells (%v)", ds[2].Allowed, ds[2].RetryAfter, 11*cell)
	}
	body := html.UnescapeString(readBody(t, f.do(t, req{path: "/subject?" + subjectQuery("push", push)})))
	for _, want := range []string{
		// content-59s: retry and reset in 1m 05s, longer than 59 s.
		`<div class="bad retry">retry in 1m 05s</div><div class="muted cell-note retry-note">longer than the 59s window: a unit counts until its whole 5.9s cell has left it</div>`,
		`<p class="muted cell-note" id="verdict-cells">content-59s: longer than the 59s window: a unit counts until its whole 5.9s cell has left it</p>`,
		// recv-24h: resets in 26h 23m, longer than 24 h.
		`26h 23m <div class="muted cell-note reset-note">longer than the 24h window: a unit counts until its whole 2h24m cell has left it</div>`,
		`<p class="muted" id="cells-note">Why a wait can be longer than its window: a sliding window counts in cells, and a unit counts until its whole cell has left the window`,
		// The trail's denial.
		`1m 05s <div class="muted cell-note">longer than the 59s window: a unit counts until its whole 5.9s cell has left it</div>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("subject page lacks %q:\n%s", want, body)
		}
	}
	// Looked up by the user alone, the block says it too.
	user := html.UnescapeString(readBody(t, f.do(t, req{path: "/subject?policy=push&user=" + push["user"]})))
	if want := `(retry in 1m 05s; longer than the 59s window: a unit counts until its whole 5.9s cell has left it)`; !strings.Contains(user, want) {
		t.Errorf("user page lacks %q:\n%s", want, user)
	}

	// 10 s later content-59s's wait (54.9 s) is within its window: no
	// note for it in the table or the verdict (the trail keeps the wait
	// the denial had); recv-24h's reset still exceeds 24 h.
	f.clock.Advance(10 * time.Second)
	body = readBody(t, f.do(t, req{path: "/subject?" + subjectQuery("push", push)}))
	if live, _, _ := strings.Cut(body, `<table id="trail"`); strings.Contains(live, "longer than the 59s window") {
		t.Errorf("a wait within the window is explained as longer than it:\n%s", live)
	}
	if !strings.Contains(body, "longer than the 24h window") {
		t.Errorf("recv-24h's reset, longer than 24h, is not explained")
	}
	// Fixed windows and GCRA never wait longer than their window.
	f.allow(t, "api", sdk.Subject{"user": "u1", "campaign": "c"}, 4)
	if body := readBody(t, f.do(t, req{path: "/subject?policy=api&user=u1&campaign=c"})); strings.Contains(body, "cell-note") {
		t.Errorf("api's rules are explained as cells:\n%s", body)
	}
}
