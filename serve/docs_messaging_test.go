package serve_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// messagingDoc is the transcript of messaging caps, replayed against its
// own server (TestServeDocMessaging).
const messagingDoc = "../docs/serve/messaging.md"

// messagingDocPolicies are the policies messagingDoc's server serves, as
// its text describes them: push's caps per minute and per day, the last
// 10 of the day's kept for priority 1 and above, a trail, user the person
// dimension, quiet hours 21:00 to 08:00 in Europe/Berlin, and the classes
// otp (exempt from every rule, counted, and from quiet hours) and alert
// (from quiet hours).
func messagingDocPolicies(t *testing.T) []*sdk.Policy {
	t.Helper()
	berlin, err := sdk.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("recv-24h", 50, 24*time.Hour).By("user").WithHeadroom(10, 1),
	},
		sdk.WithTrail(100, 24*time.Hour),
		sdk.WithPerson("user"),
		sdk.WithQuietHours(berlin, sdk.QuietPeriod{From: 21 * time.Hour, To: 8 * time.Hour}),
		sdk.WithClass(
			sdk.Class{Name: "otp", AllRules: true, Counted: true, QuietHours: true},
			sdk.Class{Name: "alert", QuietHours: true},
		))
	if err != nil {
		t.Fatal(err)
	}
	return []*sdk.Policy{p}
}

// TestServeDocMessaging replays the examples of docs/serve/messaging.md,
// in order, against a live freqcap serve of messagingDocPolicies (given
// in code: serve.Config.Policies), on the memory backend and the clock
// the other transcripts use (2026-11-24 09:00 UTC), with the manual's
// credentials, and compares each answer with the transcript's as
// TestServeDocExamples does (FREQCAP_DOCS_DUMP as there: docsDump). Each
// curl line of the transcript must send the request of the example after
// it (its path on serve's default address, its Authorization and
// Content-Type, its JSON body).
func TestServeDocMessaging(t *testing.T) {
	data, err := os.ReadFile(messagingDoc)
	if err != nil {
		t.Fatal(err)
	}
	examples := docExamples(t, messagingDoc, string(data))
	if len(examples) < 3 {
		t.Fatalf("%s has %d examples, want at least 3", messagingDoc, len(examples))
	}
	curls := 0
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	inSh := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "```sh":
			inSh = true
		case line == "```":
			inSh = false
		case inSh && strings.HasPrefix(line, "curl "):
			curls++
			checkCurlLine(t, fmt.Sprintf("%s:%d", messagingDoc, n), line, examples, n)
		}
	}
	if curls < 2 {
		t.Errorf("%s has %d curl lines, want at least 2 (a push of class otp, a denial showing next_eligible)", messagingDoc, curls)
	}
	lim, _, callers := docSetup(t)
	base := docServe(t, serve.Config{Limiter: lim, Policies: messagingDocPolicies(t), Callers: callers})
	record := docsDump(t)
	for _, ex := range examples {
		first, _, _ := split(ex.request)
		t.Run(fmt.Sprintf("%s %s", ex.where(), strings.Fields(first)[1]), func(t *testing.T) {
			status, header, got := replayExample(t, base, ex, func(s string) string { return s })
			record(ex, status, header, got)
		})
	}
}

// checkCurlLine checks that the curl line at line n sends the request of
// the first example after it.
func checkCurlLine(t *testing.T, where, line string, examples []docExample, n int) {
	t.Helper()
	args, err := shellWords(line)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	url, header, body := curlRequest(t, where, args)
	for _, ex := range examples {
		if ex.line < n {
			continue
		}
		first, h, wantBody := split(ex.request)
		if want := docsAddr + strings.Fields(first)[1]; url != want {
			t.Errorf("%s: curl calls %q, the example after it (%s) %q", where, url, ex.where(), want)
		}
		for _, k := range []string{"Authorization", "Content-Type"} {
			if header[k] != h.Get(k) {
				t.Errorf("%s: curl sends %s %q, the example after it (%s) %q", where, k, header[k], ex.where(), h.Get(k))
			}
		}
		var got, want any
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("%s: curl's -d is not JSON: %v", where, err)
		}
		if err := json.Unmarshal([]byte(wantBody), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: curl sends %s, the example after it (%s) %s", where, body, ex.where(), wantBody)
		}
		return
	}
	t.Errorf("%s: no example after the curl line", where)
}
