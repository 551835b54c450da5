package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/policystore"
	"github.com/freqcap/freqcap/serve"
)

// docsFile is serve's guide: it shows the server the transcripts run
// against, the curl line and the index of the transcripts.
const docsFile = "../docs/SERVE.md"

// docsTranscripts are the files whose examples TestServeDocExamples
// replays, in the order of the guide's index: each sees what the ones
// before it did.
var docsTranscripts = []string{
	"../docs/serve/take.md",
	"../docs/serve/peek.md",
	"../docs/serve/reservations.md",
	"../docs/serve/batch.md",
	"../docs/serve/inspect.md",
	"../docs/serve/reset.md",
	"../docs/serve/list-policies.md",
	"../docs/serve/errors.md",
	"../docs/serve/policy-service.md",
	"../docs/serve/overrides.md",
	"../docs/serve/person-service.md",
}

// docsTokens are the credentials the manual's examples use; the manual
// shows freqcap serve started with exactly this FREQCAP_SERVE_TOKENS.
const docsTokens = "sender:sender-secret-1:take,peek,reserve@push support:support-secret-1:*@* ops:ops-secret-1:admin@*"

type docExample struct {
	file              string
	line              int
	request, response string
}

// where is the example's file:line.
func (ex docExample) where() string {
	return fmt.Sprintf("%s:%d", strings.TrimPrefix(ex.file, "../"), ex.line)
}

// transcriptExamples returns the examples of docsTranscripts, in order.
func transcriptExamples(t *testing.T) []docExample {
	t.Helper()
	var out []docExample
	for _, f := range docsTranscripts {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, docExamples(t, f, string(data))...)
	}
	return out
}

// docExamples returns the ```http request / ```http response pairs of
// file, whose text is md, in order.
func docExamples(t *testing.T, file, md string) []docExample {
	t.Helper()
	var out []docExample
	var block strings.Builder
	kind := ""
	sc := bufio.NewScanner(strings.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case kind == "" && line == "```http request":
			kind = "request"
			out = append(out, docExample{file: file, line: n})
			block.Reset()
		case kind == "" && line == "```http response":
			if len(out) == 0 || out[len(out)-1].response != "" {
				t.Fatalf("%s:%d: a response block without a request block before it", file, n)
			}
			kind = "response"
			block.Reset()
		case kind != "" && line == "```":
			if kind == "request" {
				out[len(out)-1].request = block.String()
			} else {
				out[len(out)-1].response = block.String()
			}
			kind = ""
		case kind != "":
			block.WriteString(line + "\n")
		}
	}
	for _, ex := range out {
		if ex.response == "" {
			t.Fatalf("%s: request block without a response block", ex.where())
		}
	}
	return out
}

// split parses a block: first line, headers, body.
func split(block string) (string, http.Header, string) {
	head, body, _ := strings.Cut(block, "\n\n")
	lines := strings.Split(head, "\n")
	h := http.Header{}
	for _, l := range lines[1:] {
		if k, v, ok := strings.Cut(l, ":"); ok {
			h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	return lines[0], h, body
}

// jsonMatch reports whether got equals want, where a string "…" in want
// matches any value.
func jsonMatch(want, got any) bool {
	switch w := want.(type) {
	case string:
		if w == "…" {
			return true
		}
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, v := range w {
			gv, ok := g[k]
			if !ok || !jsonMatch(v, gv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !jsonMatch(w[i], g[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(want, got)
}

// TestServeDocExamples replays every request of the transcripts
// docs/SERVE.md indexes (docsTranscripts), in order,
// against a live freqcap serve following a policy store whose version 1
// is the seed policies, on the memory backend and a fixed clock, with the
// manual's credentials, and compares each answer with the manual's: the
// status line, each header the manual shows, and the JSON body as JSON
// ("…" matches any value: reservation ids are random). RESERVATION_ID in
// a request stands for the last reservation_id answered. After an
// example that stores a version, it waits until the server decides with
// it.
func TestServeDocExamples(t *testing.T) {
	data, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	md := string(data)
	if !strings.Contains(md, `FREQCAP_SERVE_TOKENS="`+docsTokens+`"`) {
		t.Errorf("%s does not show freqcap serve started with FREQCAP_SERVE_TOKENS=%q, the credentials its examples use", docsFile, docsTokens)
	}
	lim, st, callers := docSetup(t)
	ctx := context.Background()
	plan, err := st.Plan(ctx, seed.YAML)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, plan, "setup", "the seed policies"); err != nil {
		t.Fatal(err)
	}
	live, err := st.Watch(ctx, policystore.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	base := docServe(t, serve.Config{Limiter: lim, Live: live.Current, Store: st, Callers: callers})

	examples := transcriptExamples(t)
	if len(examples) < 14 {
		t.Fatalf("the transcripts have %d examples, want at least 14 (one per call and the errors)", len(examples))
	}
	record := docsDump(t)
	reservation := ""
	seen := map[string]bool{}
	for _, ex := range examples {
		first, _, _ := split(ex.request)
		_, target, _ := strings.Cut(strings.TrimSuffix(first, " HTTP/1.1"), " ")
		seen[target] = true
		t.Run(fmt.Sprintf("%s %s", ex.where(), target), func(t *testing.T) {
			status, header, got := replayExample(t, base, ex, func(body string) string {
				return strings.ReplaceAll(body, "RESERVATION_ID", reservation)
			})
			if m, ok := got.(map[string]any); ok {
				if id, ok := m["reservation_id"].(string); ok && id != "" {
					reservation = id
				}
				if v, ok := m["version"].(map[string]any); ok && status == http.StatusOK && strings.HasSuffix(target, "Policies") {
					awaitLive(t, live, v["version"])
				}
			}
			record(ex, status, header, got)
		})
	}
	for _, m := range []string{"FreqcapService/Take", "FreqcapService/Peek", "FreqcapService/Reserve", "FreqcapService/Commit",
		"FreqcapService/Cancel", "FreqcapService/TakeBatch", "FreqcapService/PeekBatch", "FreqcapService/Inspect",
		"FreqcapService/Reset", "FreqcapService/ListPolicies", "PolicyService/PlanPolicies", "PolicyService/ApplyPolicies",
		"PolicyService/PolicyHistory", "OverrideService/SetOverride", "OverrideService/ListOverrides", "OverrideService/DeleteOverride",
		"PersonService/LinkIdentity", "PersonService/UnlinkIdentity", "PersonService/GetPerson", "PersonService/SetPersonZone"} {
		if !seen["/freqcap.v1."+m] {
			t.Errorf("the transcripts of %s have no example of %s", docsFile, m)
		}
	}
}

// docsDump returns what records each replayed answer: with
// FREQCAP_DOCS_DUMP=FILE, into FILE as JSON when t ends (the answers to
// paste into a transcript: "where", "status", "header", "body"), else
// nothing.
func docsDump(t *testing.T) func(ex docExample, status int, header http.Header, body any) {
	t.Helper()
	name := os.Getenv("FREQCAP_DOCS_DUMP")
	if name == "" {
		return func(docExample, int, http.Header, any) {}
	}
	var mu sync.Mutex
	dump := []map[string]any{}
	t.Cleanup(func() {
		b, _ := json.MarshalIndent(dump, "", "  ")
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Error(err)
		}
	})
	return func(ex docExample, status int, header http.Header, body any) {
		mu.Lock()
		defer mu.Unlock()
		dump = append(dump, map[string]any{"where": ex.where(), "status": status, "header": header, "body": body})
	}
}

// replayExample sends ex's request (its body through subst) to the
// server at base and compares the answer with ex's: the status line, each
// header ex shows, and the JSON body as JSON ("…" matches any value). It
// returns the answer's status, headers and body.
func replayExample(t *testing.T, base string, ex docExample, subst func(string) string) (int, http.Header, any) {
	t.Helper()
	first, h, body := split(ex.request)
	method, target, _ := strings.Cut(strings.TrimSuffix(first, " HTTP/1.1"), " ")
	req, err := http.NewRequest(method, base+target, strings.NewReader(subst(body)))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		if k != "Host" {
			req.Header[k] = vs
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var got any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("answer is not JSON: %q", raw)
	}
	wantFirst, wantH, wantBody := split(ex.response)
	if gotFirst := fmt.Sprintf("HTTP/1.1 %d %s", res.StatusCode, http.StatusText(res.StatusCode)); gotFirst != wantFirst {
		t.Errorf("status = %q, want %q (body %s)", gotFirst, wantFirst, raw)
	}
	for k, want := range wantH {
		if have := res.Header.Values(k); !reflect.DeepEqual(have, want) {
			t.Errorf("header %s = %q, want %q", k, have, want)
		}
	}
	var want any
	if err := json.Unmarshal([]byte(wantBody), &want); err != nil {
		t.Fatalf("%s: the response body is not JSON: %v", ex.where(), err)
	}
	if !jsonMatch(want, got) {
		t.Errorf("body = %s\nwant %s", raw, wantBody)
	}
	return res.StatusCode, res.Header, got
}

// docSetup returns what the manual's examples run with: a Limiter on the
// memory backend, the store on it planning by a clock stopped at
// 2026-11-24 09:00 UTC, and the
// manual's callers.
func docSetup(t *testing.T) (*sdk.Limiter, *policystore.Store, []serve.Caller) {
	t.Helper()
	callers, err := serve.ParseCallers(docsTokens)
	if err != nil {
		t.Fatal(err)
	}
	clk := fakeclock.New(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	b := memory.New(&memory.Options{Clock: clk})
	return sdk.New(b), policystore.New(b, policystore.WithClock(clk)), callers
}

// docServe starts a server with cfg on a loopback port, stopped when t
// ends, and returns its base URL.
func docServe(t *testing.T, cfg serve.Config) string {
	t.Helper()
	srv, err := serve.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String()
}

// awaitLive waits until live serves version v (a JSON string, as the
// answer gives it): the next example is decided with it.
func awaitLive(t *testing.T, live *policystore.Live, v any) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for fmt.Sprint(live.Current().Version) != fmt.Sprint(v) {
		if time.Now().After(deadline) {
			t.Fatalf("version %v not served 15 s after it was stored", v)
		}
		time.Sleep(10 * time.Millisecond) // polling the watcher until a deadline
	}
}

// pythonDoc shows the Python sender.
const pythonDoc = "../docs/serve/python.md"

// The guide's Python sender is examples/python/sender.py, which
// TestPythonSender runs.
func TestServeDocsPythonSnippet(t *testing.T) {
	md, err := os.ReadFile(pythonDoc)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../examples/python/sender.py")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "```python\n"+string(src)+"```\n") {
		t.Errorf("%s does not show examples/python/sender.py verbatim in a ```python block", pythonDoc)
	}
}

// TestServeDocTranscriptsIndexed: every file under docs/serve with an
// example is replayed (in docsTranscripts, or messagingDoc by
// TestServeDocMessaging), and the guide links every
// file under docs/serve, so no example goes unreplayed and no transcript
// unread.
func TestServeDocTranscriptsIndexed(t *testing.T) {
	guide, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../docs/serve/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "```http request") && !slices.Contains(docsTranscripts, f) && f != messagingDoc {
			t.Errorf("%s has examples but is not in docsTranscripts (nor messagingDoc): they are not replayed", f)
		}
		if link := "(serve/" + filepath.Base(f); !strings.Contains(string(guide), link) {
			t.Errorf("%s does not link %s", docsFile, f)
		}
	}
	for _, f := range docsTranscripts {
		if !slices.Contains(files, f) {
			t.Errorf("docsTranscripts names %s, which does not exist", f)
		}
	}
}
