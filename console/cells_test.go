package console

import (
	"html"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// TestSlidingWindowCellNote: a wait within the window is never explained
// as longer than it. The seed policy's sliding windows (limits 2 to 50,
// at most sdk.LogLine) are exact logs, so their retry and reset never
// exceed the window: no cell note anywhere. (A sliding window above the
// line counts in cells and gets the note where its wait exceeds the
// window.)
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
