package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// docsFile is the console's guide: it shows the console the transcripts
// run against, the metric table and the index of the transcripts.
const docsFile = "../docs/CONSOLE.md"

// docsTranscripts are the files whose examples TestConsoleDocExamples
// replays, in the order of the guide's index: each sees what the ones
// before it did.
var docsTranscripts = []string{
	"../docs/console/api.md",
	"../docs/console/pages.md",
	"../docs/console/overrides.md",
	"../docs/console/people.md",
	"../docs/console/policy-store.md",
	"../docs/console/logout-and-static.md",
}

// docsTokens are the credentials the manual's examples use; the manual
// shows the console started with exactly this FREQCAP_TOKENS.
const docsTokens = "alice:alice-admin-secret:admin,billing:billing-checker-secret:checker,victor:victor-viewer-secret:viewer"

// docsServeToken is the credential of freqcap serve in the transcripts'
// decisions.
const docsServeToken = "billing:billing-serve-secret:take,peek@push"

// docExample is one request block of the manual and the response block
// after it.
type docExample struct {
	file     string
	line     int // of the request block
	request  string
	response string
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
	var cur *docExample
	var block strings.Builder
	kind := ""
	sc := bufio.NewScanner(strings.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case kind == "" && line == "```http request":
			kind = "request"
			out = append(out, docExample{file: file, line: n})
			cur = &out[len(out)-1]
			block.Reset()
		case kind == "" && line == "```http response":
			if cur == nil || cur.response != "" {
				t.Fatalf("%s:%d: a response block without a request block before it", file, n)
			}
			kind = "response"
			block.Reset()
		case kind != "" && line == "```":
			if kind == "request" {
				cur.request = block.String()
			} else {
				cur.response = block.String()
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

// headBody splits a block into its first line, headers and body (after
// the first empty line).
func headBody(block string) (first string, h http.Header, body string) {
	head, body, _ := strings.Cut(block, "\n\n")
	lines := strings.Split(head, "\n")
	h = http.Header{}
	for _, l := range lines[1:] {
		if l == "" {
			continue
		}
		k, v, _ := strings.Cut(l, ":")
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return lines[0], h, body
}

// Normalisation of what changes from run to run (the clock is fixed, so
// times and counters do not): cookie values and CSRF tokens are random.
var (
	cookieValueRE = regexp.MustCompile(`^([^=;]+)=[^;]*`)
	csrfRE        = regexp.MustCompile(`name="_csrf" value="([^"]*)"`)
)

// TestConsoleDocExamples replays every request of the transcripts
// docs/CONSOLE.md indexes (docsTranscripts) against
// a console over the seed policies, the memory backend and a fixed clock,
// in the order of the manual (later examples see the state earlier ones
// left), and compares each response with the one the manual shows:
//   - the status line exactly;
//   - each header the manual shows, exactly, except that Set-Cookie
//     values written "…" match any value (they are random);
//   - a JSON body as JSON (same value, any layout);
//   - any other body exactly, or, when the manual's has a line "…" (for
//     what it leaves out), by the fragments it shows, in order (see
//     matchLines).
//
// Requests: a Cookie header stands for the cookies earlier responses set
// (the test keeps them, as a browser would), whatever values it shows;
// CSRF_TOKEN stands for the _csrf field of the last page served.
func TestConsoleDocExamples(t *testing.T) {
	data, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	md := string(data)
	if !strings.Contains(md, `FREQCAP_TOKENS="`+docsTokens+`"`) {
		t.Errorf("%s does not show the console started with FREQCAP_TOKENS=%q, the credentials its examples use", docsFile, docsTokens)
	}
	creds, err := ParseCredentials(docsTokens)
	if err != nil {
		t.Fatal(err)
	}
	// The console follows a policy store whose version 1 is the seed
	// policies with overrides on for push (the editor's examples apply
	// more).
	f, _ := newStoreFixture(t, creds)
	// The decisions are a sender's, through freqcap serve on the same
	// backend and policy store: the transcripts' requests to
	// /freqcap.v1.… go to it. Its limiter is the sender's own: the
	// console's /metrics does not count its decisions.
	api, err := os.ReadFile(docsTranscripts[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(api), "--token '"+docsServeToken+"'") {
		t.Errorf("%s does not show serve started with --token '%s', the credential its decisions use", docsTranscripts[0], docsServeToken)
	}
	sender, err := serve.ParseCaller(docsServeToken)
	if err != nil {
		t.Fatal(err)
	}
	decider, err := serve.New(serve.Config{
		Limiter: sdk.New(f.backend, sdk.WithPrefix(f.prefix), sdk.WithClock(f.clock)),
		Live:    f.srv.cfg.Source.Current, // the store's version the console follows
		Callers: []serve.Caller{sender},
		Now:     f.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	examples := transcriptExamples(t)
	if len(examples) < 20 {
		t.Fatalf("the transcripts have %d request examples, want at least 20 (one per endpoint)", len(examples))
	}
	// FREQCAP_DOCS_DUMP=FILE writes the responses there as JSON, an aid
	// to writing the manual's examples.
	var dump []map[string]any
	if name := os.Getenv("FREQCAP_DOCS_DUMP"); name != "" {
		dump = []map[string]any{}
		defer func() {
			b, _ := json.MarshalIndent(dump, "", "  ")
			if err := os.WriteFile(name, b, 0o644); err != nil {
				t.Error(err)
			}
		}()
	}
	jar := map[string]string{}
	csrf := ""
	seen := map[string]bool{}
	for _, ex := range examples {
		first, h, body := headBody(ex.request)
		method, target, ok := strings.Cut(first, " ")
		if !ok {
			t.Fatalf("%s: request line %q", ex.where(), first)
		}
		target = strings.TrimSuffix(target, " HTTP/1.1")
		name := fmt.Sprintf("%s %s %s", ex.where(), method, target)
		route, _, _ := strings.Cut(target, "?")
		if strings.HasPrefix(route, "/static/") {
			route = "/static/*"
		}
		seen[method+" "+route] = true
		t.Run(name, func(t *testing.T) {
			body = strings.ReplaceAll(body, "CSRF_TOKEN", csrf)
			req := httptest.NewRequest(method, target, strings.NewReader(strings.TrimSuffix(body, "\n")))
			req.RemoteAddr = "192.0.2.10:50000"
			req.Host = h.Get("Host")
			for k, vs := range h {
				if k == "Host" || k == "Cookie" {
					continue
				}
				for _, v := range vs {
					req.Header.Add(k, v)
				}
			}
			if h.Get("Cookie") != "" {
				for _, k := range slices.Sorted(maps.Keys(jar)) {
					req.AddCookie(&http.Cookie{Name: k, Value: jar[k]})
				}
			}
			rec := httptest.NewRecorder()
			if strings.HasPrefix(route, "/freqcap.v1.") {
				decider.Handler().ServeHTTP(rec, req)
			} else {
				f.srv.Handler().ServeHTTP(rec, req)
			}
			res := rec.Result()
			got := rec.Body.String()
			for _, c := range res.Cookies() {
				if c.MaxAge < 0 {
					delete(jar, c.Name)
				} else {
					jar[c.Name] = c.Value
				}
			}
			if m := csrfRE.FindStringSubmatch(got); m != nil {
				csrf = m[1]
			}
			if dump != nil {
				dump = append(dump, map[string]any{"where": ex.where(), "status": res.StatusCode, "header": res.Header, "body": got})
			}

			wantFirst, wantH, wantBody := headBody(ex.response)
			if gotFirst := fmt.Sprintf("HTTP/1.1 %d %s", res.StatusCode, http.StatusText(res.StatusCode)); gotFirst != wantFirst {
				t.Errorf("status = %q, want %q (body %s)", gotFirst, wantFirst, got)
			}
			for k, want := range wantH {
				have := res.Header.Values(k)
				if k == "Set-Cookie" {
					have = slices.Clone(have)
					for i, w := range want {
						if i < len(have) && strings.Contains(w, "=…") {
							have[i] = cookieValueRE.ReplaceAllString(have[i], "$1=…")
						}
					}
				}
				if !slices.Equal(have, want) {
					t.Errorf("header %s = %q, want %q", k, have, want)
				}
			}
			wantBody = strings.TrimSuffix(wantBody, "\n")
			switch {
			case strings.HasPrefix(wantH.Get("Content-Type"), "application/json"):
				var w, g any
				if err := json.Unmarshal([]byte(wantBody), &w); err != nil {
					t.Fatalf("the manual's JSON body: %v\n%s", err, wantBody)
				}
				if err := json.Unmarshal([]byte(got), &g); err != nil {
					t.Fatalf("response body is not JSON: %v\n%s", err, got)
				}
				if !reflect.DeepEqual(w, g) {
					t.Errorf("body =\n%s\nwant (as JSON)\n%s", got, wantBody)
				}
			default:
				if err := matchLines(got, wantBody); err != nil {
					t.Errorf("body: %v\ngot:\n%s", err, got)
				}
			}
		})
	}
	// Every route of the console has an example.
	for _, r := range f.srv.echo.Routes() {
		if r.Method == http.MethodHead {
			continue
		}
		if !seen[r.Method+" "+r.Path] {
			t.Errorf("the transcripts of %s have no example of %s %s", docsFile, r.Method, r.Path)
		}
	}
}

// matchLines checks got against the manual's body want. Without a line
// "…", they must be equal. With one, "…" stands for anything left out:
// each other line of want, trimmed, must occur in got after the one
// before it (pages are rendered on few lines, so a line of the manual is
// a fragment of the page).
func matchLines(got, want string) error {
	wl := strings.Split(want, "\n")
	if !slices.Contains(wl, "…") {
		if g := strings.TrimSuffix(got, "\n"); g != want {
			return fmt.Errorf("= %q, want %q", g, want)
		}
		return nil
	}
	pos := 0
	for _, w := range wl {
		if w = strings.TrimSpace(w); w == "…" || w == "" {
			continue
		}
		i := strings.Index(got[pos:], w)
		if i < 0 {
			return fmt.Errorf("no %q after byte %d", w, pos)
		}
		pos += i + len(w)
	}
	return nil
}

// TestConsoleDocMetrics: the metric names docs/CONSOLE.md lists (its
// "## Metrics" table's first column) are exactly the families /metrics
// serves.
func TestConsoleDocMetrics(t *testing.T) {
	data, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(data), "\n## Metrics\n")
	if !ok {
		t.Fatalf("%s has no \"## Metrics\" section", docsFile)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var documented []string
	row := regexp.MustCompile("(?m)^\\| `(freqcap_[a-z_]+)`")
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(documented)

	f := newFixture(t, nil)
	f.allow(t, "push", map[string]string{"user": "42", "content": "c1"}, 1)
	// A family appears with its first series: a degraded decision gives
	// freqcap_degraded_decisions_total one.
	broken := sdk.New(failing, sdk.WithObserver(f.srv.metrics.Observe))
	if d, err := broken.Allow(context.Background(), f.policies["push"], push); err != nil || !d.Degraded {
		t.Fatalf("Allow on a failing backend = %+v, %v; want degraded", d, err)
	}
	body := readBody(t, f.do(t, req{path: "/metrics"}))
	var served []string
	for _, l := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(l, "# TYPE "); ok {
			served = append(served, strings.Fields(name)[0])
		}
	}
	slices.Sort(served)
	if len(served) == 0 {
		t.Fatalf("/metrics serves no family:\n%s", body)
	}
	if !slices.Equal(documented, served) {
		t.Errorf("metrics documented in %s = %v, served by /metrics = %v", docsFile, documented, served)
	}
}

// TestConsoleDocTranscriptsIndexed: every file under docs/console with
// an example is replayed (in docsTranscripts), and the guide links every
// file under docs/console, so no example goes unreplayed and no
// transcript unread.
func TestConsoleDocTranscriptsIndexed(t *testing.T) {
	guide, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../docs/console/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "```http request") && !slices.Contains(docsTranscripts, f) {
			t.Errorf("%s has examples but is not in docsTranscripts: they are not replayed", f)
		}
		if link := "(console/" + filepath.Base(f); !strings.Contains(string(guide), link) {
			t.Errorf("%s does not link %s", docsFile, f)
		}
	}
	for _, f := range docsTranscripts {
		if !slices.Contains(files, f) {
			t.Errorf("docsTranscripts names %s, which does not exist", f)
		}
	}
}
