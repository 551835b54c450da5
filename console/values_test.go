package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// valuesPerson is a person of the seed policy push who received n
// contents, 5 s apart (c00 first); it returns the fixture's policy.
func valuesPerson(t *testing.T, f *fixture, user string, n int) *sdk.Policy {
	t.Helper()
	for i := range n {
		f.allow(t, "push", sdk.Subject{"user": user, "content": fmt.Sprintf("c%02d", i)}, 1)
		f.clock.Advance(5 * time.Second)
	}
	return f.policies["push"]
}

var (
	valueLinkRE = regexp.MustCompile(`<a href="(/subject\?[^"]+)" class="pair">`)
	nextRE      = regexp.MustCompile(`<a href="([^"]+)" class="values-next">`)
	prevRE      = regexp.MustCompile(`<a href="([^"]+)" class="values-prev">`)
)

// valuesOnPage returns the contents a subject page lists in its values
// section, in order, and its next and prev links.
func valuesOnPage(t *testing.T, body string) (contents []string, next, prev string) {
	t.Helper()
	for _, m := range valueLinkRE.FindAllStringSubmatch(body, -1) {
		u, err := url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		contents = append(contents, u.Query().Get("content"))
	}
	// A browser sends no fragment (#values-…).
	if m := nextRE.FindStringSubmatch(body); m != nil {
		next, _, _ = strings.Cut(html.UnescapeString(m[1]), "#")
	}
	if m := prevRE.FindStringSubmatch(body); m != nil {
		prev, _, _ = strings.Cut(html.UnescapeString(m[1]), "#")
	}
	return contents, next, prev
}

// TestSubjectValues: the subject page of a person lists the contents they
// received, newest first, 20 a page, each linking to its own lookup with
// its counters; Older and Newer page through them, every content once.
func TestSubjectValues(t *testing.T) {
	f := newFixture(t, nil)
	user := "18829340001"
	valuesPerson(t, f, user, 45)
	page := "/subject?" + subjectQuery("push", sdk.Subject{"user": user})
	res := f.do(t, req{path: page})
	body := readBody(t, res)
	if res.StatusCode != 200 || !strings.Contains(body, `<h2 id="values-content">Values of content</h2>`) ||
		!strings.Contains(body, `<strong class="values-total">45 live values</strong>`) {
		t.Fatalf("GET %s = %d, want the values of content, 45 live:\n%s", page, res.StatusCode, body)
	}
	var all []string
	var pages [][]string
	var prevs []string
	for path := page; path != ""; {
		res := f.do(t, req{path: path})
		body := readBody(t, res)
		got, next, prev := valuesOnPage(t, body)
		if res.StatusCode != 200 || len(pages) > 0 && prev == "" || len(pages) == 0 && prev != "" {
			i := strings.Index(body, `class="pager"`)
			t.Fatalf("GET %s = %d, prev %q: %s", path, res.StatusCode, prev, body[max(i-100, 0):min(i+600, len(body))])
		}
		pages, prevs = append(pages, got), append(prevs, prev)
		all = append(all, got...)
		path = next
		if len(pages) > 5 {
			t.Fatal("more than 5 pages")
		}
	}
	var want []string
	for i := 44; i >= 0; i-- {
		want = append(want, fmt.Sprintf("c%02d", i))
	}
	if !slices.Equal(all, want) || len(pages) != 3 || len(pages[0]) != subjectValuesLimit {
		t.Fatalf("values over %d pages = %q, want %q, 20 a page", len(pages), all, want)
	}
	// Newer from the last page is the second.
	got, _, _ := valuesOnPage(t, readBody(t, f.do(t, req{path: prevs[2]})))
	if !slices.Equal(got, pages[1]) {
		t.Errorf("Newer from the last page = %q, want %q", got, pages[1])
	}
	// The newest content's counters are its lookup's.
	ins, err := f.lim.Admin().Inspect(context.Background(), f.policies["push"], sdk.Subject{"user": user, "content": "c44"})
	if err != nil {
		t.Fatal(err)
	}
	for _, rd := range ins.Rules[2:] {
		cell := regexp.MustCompile(`data-rule="` + rd.Rule + `"><strong>` + rd.Rule + `</strong>\s*<span class="vused">(\d+)</span> / <span class="vlimit">(\d+)</span>`)
		m := cell.FindStringSubmatch(body)
		if m == nil || m[1] != fmt.Sprint(rd.Used) || m[2] != fmt.Sprint(rd.Limit) {
			t.Errorf("c44's %s on the page = %v, want %d / %d", rd.Rule, m, rd.Used, rd.Limit)
		}
	}
	if !strings.Contains(body, `class="written" data-label="Last written (UTC)">2026-01-01 00:03:40`) {
		t.Errorf("the newest content's last write (00:03:40) is not shown:\n%s", body)
	}
}

// valuesAdmin is an Admin whose Values answers err (but for a nil err).
type valuesAdmin struct {
	*sdk.Admin
	err error
}

func (a valuesAdmin) Values(ctx context.Context, p *sdk.Policy, s sdk.Subject, set string, o sdk.ValuesOptions) (sdk.ValuesPage, error) {
	if a.err != nil {
		return sdk.ValuesPage{}, a.err
	}
	return a.Admin.Values(ctx, p, s, set, o)
}

// noValuesAdmin is an Admin without Values.
type noValuesAdmin struct{ Admin }

// TestSubjectValuesErrors: what the values section says when it cannot
// list; the rest of the page stands.
func TestSubjectValuesErrors(t *testing.T) {
	user := "18829340001"
	for _, tc := range []struct {
		name  string
		admin func(*sdk.Limiter) Admin
		query string
		want  string // in the page; "" for no section
		log   string
	}{
		{"backend down", func(l *sdk.Limiter) Admin {
			return valuesAdmin{l.Admin(), errors.New("dial tcp 10.0.0.7:6379: connection refused")}
		}, "", "The values could not be listed: the backend is unavailable", "10.0.0.7"},
		{"unsupported", func(l *sdk.Limiter) Admin {
			return valuesAdmin{l.Admin(), fmt.Errorf("redis: values: no rule keeps its state in the root: %w", errors.ErrUnsupported)}
		}, "", "This backend cannot list a person&#39;s values of this set", "no rule keeps"},
		{"stale cursor", func(l *sdk.Limiter) Admin { return l.Admin() }, "&set=content&cursor=bogus", "This page of values is no longer valid.", ""},
		{"no value lister", func(l *sdk.Limiter) Admin { return noValuesAdmin{l.Admin()} }, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixtureCfg(t, nil, nil, nil, func(c *Config, _ driver.Backend, l *sdk.Limiter) { c.Admin = tc.admin(l) })
			valuesPerson(t, f, user, 3)
			res := f.do(t, req{path: "/subject?" + subjectQuery("push", sdk.Subject{"user": user}) + tc.query})
			body := readBody(t, res)
			if res.StatusCode != 200 || !strings.Contains(body, `id="rules"`) {
				t.Fatalf("GET /subject = %d without the rules:\n%s", res.StatusCode, body)
			}
			if tc.want == "" {
				if strings.Contains(body, "Values of content") {
					t.Errorf("a values section without a ValueLister:\n%s", body)
				}
				return
			}
			if !strings.Contains(body, tc.want) {
				t.Errorf("page lacks %q:\n%s", tc.want, body)
			}
			if strings.Contains(body, "10.0.0.7") {
				t.Error("the page names the backend's address")
			}
			if !strings.Contains(f.logs.String(), tc.log) {
				t.Errorf("log %q lacks %q", f.logs.String(), tc.log)
			}
			if tc.query != "" && !strings.Contains(body, `class="values-first"`) {
				t.Errorf("no link back to the first page:\n%s", body)
			}
		})
	}
}

// TestAPIValues: GET /api/v1/values pages through a person's contents as
// the page does, with each one's counters; its errors.
func TestAPIValues(t *testing.T) {
	f := newFixture(t, testCredentials())
	user := "18829340001"
	valuesPerson(t, f, user, 5)
	get := func(q string) (*ValuesJSON, int, string) {
		t.Helper()
		res := f.do(t, req{path: "/api/v1/values?" + q, bearer: viewerToken})
		body := readBody(t, res)
		if res.StatusCode != 200 {
			return nil, res.StatusCode, body
		}
		var out ValuesJSON
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("GET /api/v1/values?%s: %v in %s", q, err, body)
		}
		return &out, 200, body
	}
	base := subjectQuery("push", sdk.Subject{"user": user})
	var got []string
	q := base + "&limit=2" // set: push has one nested set
	for k := 0; ; k++ {
		out, status, body := get(q)
		if status != 200 || out.Set != "content" || out.Total != 5 || !slices.Equal(out.Dimensions, []string{"content"}) || len(out.Values) > 2 || (k == 0) != (out.Prev == "") {
			t.Fatalf("page %d = %d %s", k, status, body)
		}
		for _, v := range out.Values {
			got = append(got, v.Values["content"])
			if v.WrittenAt == nil || len(v.Rules) != 2 || v.Rules[0].Rule != "content-59s" || v.Rules[0].Used != 1 || v.ID != "" {
				t.Errorf("value %+v, want written, with content-59s at 1", v)
			}
		}
		if out.Next == "" {
			break
		}
		q = base + "&limit=2&set=content&cursor=" + url.QueryEscape(out.Next)
	}
	if want := []string{"c04", "c03", "c02", "c01", "c00"}; !slices.Equal(got, want) {
		t.Errorf("values = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		q      string
		status int
		msg    string
	}{
		{"user=" + user, 400, "policy is required"},
		{"policy=nope&user=1", 404, "no such policy"},
		{"policy=push", 400, `dimension \"user\" missing`},
		{base + "&set=device", 400, `no nested dimension set \"device\"`},
		{base + "&limit=0", 400, "limit must be an integer from 1 to 100"},
		{base + "&limit=101", 400, "limit must be"},
		{base + "&cursor=bogus", 400, "invalid cursor"},
	} {
		if _, status, body := get(tc.q); status != tc.status || !strings.Contains(body, tc.msg) {
			t.Errorf("GET /api/v1/values?%s = %d %s, want %d with %q", tc.q, status, body, tc.status, tc.msg)
		}
	}
	if res := f.do(t, req{path: "/api/v1/values?" + base}); res.StatusCode != 401 {
		t.Errorf("GET /api/v1/values without credentials = %d, want 401", res.StatusCode)
	}
}
