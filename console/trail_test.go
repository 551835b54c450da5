package console

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/sdk"
)

// verdictOf returns the verdict's HTML on a subject page.
func verdictOf(t *testing.T, body string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<div class="verdict" id="verdict">(.*?)</div>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no verdict in page:\n%s", body)
	}
	return m[1]
}

// TestVerdictOtherDimensions: a lookup without the campaign never says
// "allowed" while the user is blocked for some campaign: it names the
// campaign, the rule and until when, re-checked live, and drops the block
// once it is reset or over.
func TestVerdictOtherDimensions(t *testing.T) {
	f := newFixture(t, testCredentials())
	spring := sdk.Subject{"user": "u1", "campaign": "spring|sale"}
	ds := f.allow(t, "api", spring, 4) // daily: 3 per calendar day
	if ds[3].Allowed || ds[3].Denied[0] != "daily" {
		t.Fatalf("4th Allow = %+v, want denied by daily", ds[3])
	}
	f.allow(t, "api", sdk.Subject{"user": "u1", "campaign": "other"}, 1)
	page := "/subject?" + subjectQuery("api", sdk.Subject{"user": "u1"})
	// Shanghai's day ends at 16:00 UTC; t0 is 00:00 UTC.
	until := "2026-01-01 16:00:00Z"
	pairURL := "/subject?" + subjectQuery("api", spring)
	pairReset := "/reset?" + subjectQuery("api", spring)

	t.Run("blocked", func(t *testing.T) {
		body := readBody(t, f.do(t, req{path: page, bearer: adminToken}))
		v := verdictOf(t, body)
		if strings.Contains(v, "allowed") {
			t.Errorf("verdict says allowed while u1 is blocked for a campaign:\n%s", v)
		}
		for _, want := range []string{
			`Blocked for some values</span> of <strong>campaign</strong>`,
			`Blocked for <a href="` + htmlAttr(pairURL) + `" class="pair"> <code>campaign</code>=<code class="subject-value">spring|sale</code></a> by <strong class="rule">daily</strong> until ` + until,
			`checked now`,
			`href="` + htmlAttr(pairReset) + `" class="reset-pair"`,
			`<strong>daily</strong> needs campaign, which this lookup does not give: it was checked only for the values above`,
			`For any other values a request would pass burst.`,
		} {
			if !strings.Contains(v, want) {
				t.Errorf("verdict lacks %q:\n%s", want, v)
			}
		}
		if strings.Contains(v, "other") && strings.Contains(v, "campaign</code>=<code class=\"subject-value\">other") {
			t.Errorf("verdict names campaign other, which was never denied:\n%s", v)
		}
		// The same page of the live refresh, and a viewer gets no reset.
		lv := verdictOf(t, readBody(t, f.do(t, req{path: "/live/subject?" + subjectQuery("api", sdk.Subject{"user": "u1"}), bearer: viewerToken})))
		if !strings.Contains(lv, "by <strong class=\"rule\">daily</strong> until "+until) || strings.Contains(lv, "reset-pair") {
			t.Errorf("viewer's live verdict = %s, want the block without a reset link", lv)
		}
	})

	t.Run("the exact subject's page", func(t *testing.T) {
		body := readBody(t, f.do(t, req{path: pairURL, bearer: adminToken}))
		if v := verdictOf(t, body); !strings.Contains(v, `would be <span class="bad">denied</span> by <strong>daily</strong>; retry in <strong>16h 00m</strong>`) {
			t.Errorf("verdict of the exact subject = %s, want denied by daily", v)
		}
	})

	t.Run("after the pair's reset", func(t *testing.T) {
		cs := f.csrf(t)
		form := url.Values{"policy": {"api"}, "user": {"u1"}, "campaign": {"spring|sale"}, "confirm": {"yes"}, csrfField: {f.tok(cs)}}
		res := f.do(t, req{method: http.MethodPost, path: "/reset", form: form, cookies: []*http.Cookie{cs}, bearer: adminToken})
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("POST /reset = %d, want 303", res.StatusCode)
		}
		// The trail still holds the denial; the live check drops it.
		v := verdictOf(t, readBody(t, f.do(t, req{path: page, bearer: adminToken})))
		if strings.Contains(v, "Blocked") || !strings.Contains(v, "A request now would pass <strong>burst</strong>") || !strings.Contains(v, "no block by it still in force") {
			t.Errorf("verdict after the reset = %s, want no block and the scope said", v)
		}
		e := f.audit.Entries()
		if len(e) != 1 || e[0].Subject["campaign"] != "spring|sale" || e[0].Subject["user"] != "u1" || strings.Join(e[0].Rules, ",") != "burst,daily" {
			t.Errorf("audit = %+v, want one reset of (u1, spring|sale) of burst and daily", e)
		}
	})

	t.Run("over", func(t *testing.T) {
		g := newFixture(t, nil)
		g.allow(t, "api", spring, 4)
		g.clock.Advance(16 * time.Hour) // the next Shanghai day
		v := verdictOf(t, readBody(t, g.do(t, req{path: page})))
		if strings.Contains(v, "Blocked") || !strings.Contains(v, "no block by it still in force") {
			t.Errorf("verdict the next day = %s, want no block", v)
		}
	})
}

// htmlAttr is s as templ writes it in an attribute.
func htmlAttr(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

// TestTrailRows: identical consecutive denials are one row with a count
// and first/last time; each row shows what was blocked, links to the exact
// subject and (for admins) its reset; hostile values are escaped; the
// page says how far back the trail goes.
func TestTrailRows(t *testing.T) {
	f := newFixture(t, testCredentials())
	x := sdk.Subject{"user": "u2", "content": sdk.Fingerprint("hello")}
	y := sdk.Subject{"user": "u2", "content": `<script>alert(1)</script>|,%`}
	f.allow(t, "push", x, 2)
	for range 5 { // five identical denials, one a second
		f.allow(t, "push", x, 1)
		f.clock.Advance(time.Second)
	}
	f.allow(t, "push", y, 3) // one denial of another content
	page := "/subject?" + subjectQuery("push", sdk.Subject{"user": "u2"})
	body := readBody(t, f.do(t, req{path: page, bearer: adminToken}))
	rows := regexp.MustCompile(`(?s)<tr[^>]*>\s*<td class="when"[^>]*>.*?</tr>`).FindAllString(body, -1)
	if len(rows) != 2 {
		t.Fatalf("trail has %d rows, want 2 (y, then x grouped):\n%s", len(rows), body)
	}
	for _, want := range []string{
		`content-59s`, `2 / 2`,
		`<code>content</code>=<code class="subject-value">&lt;script&gt;alert(1)&lt;/script&gt;|,%</code>`,
		`href="` + htmlAttr("/subject?"+subjectQuery("push", y)) + `" class="look"`,
		`href="` + htmlAttr("/reset?"+subjectQuery("push", y)) + `" class="reset-pair"`,
	} {
		if !strings.Contains(rows[0], want) {
			t.Errorf("row 1 lacks %q:\n%s", want, rows[0])
		}
	}
	for _, want := range []string{
		`2026-01-01 00:00:04Z`, `<strong>× 5</strong>`, `identical, since 2026-01-01 00:00:00Z`,
		`<code>content</code>=<code class="subject-value">` + x["content"] + `</code>`,
		`href="` + htmlAttr("/subject?"+subjectQuery("push", x)) + `" class="look"`,
	} {
		if !strings.Contains(rows[1], want) {
			t.Errorf("row 2 lacks %q:\n%s", want, rows[1])
		}
	}
	if strings.Contains(body, "<script>alert") {
		t.Errorf("a value is rendered unescaped")
	}
	if want := `The trail keeps the newest 100 denials, for 24h after the last one. It holds every denial since 2026-01-01 00:00:00Z (6 entries), and there was none in the 24h before that.`; !strings.Contains(body, want) {
		t.Errorf("page lacks the trail note %q", want)
	}
	// A viewer sees the links to look up, not to reset.
	vb := readBody(t, f.do(t, req{path: page, bearer: viewerToken}))
	if !strings.Contains(vb, `class="look"`) || strings.Contains(vb, `class="reset-pair"`) {
		t.Errorf("viewer's trail: want look-up links and no reset links")
	}

	// The reset link's confirmation resets exactly that pair.
	cb := readBody(t, f.do(t, req{path: "/reset?" + subjectQuery("push", x), bearer: adminToken}))
	for _, want := range []string{`name="user" value="u2"`, `name="content" value="` + x["content"] + `"`, `id="reset-rules">content-59s, content-59m<`, `name="rules" value="content-59s,content-59m"`} {
		if !strings.Contains(cb, want) {
			t.Errorf("confirmation lacks %q", want)
		}
	}
}

func TestTrailNote(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ds := func(n int) []sdk.Denial {
		var out []sdk.Denial
		for i := range n {
			out = append(out, sdk.Denial{At: at.Add(-time.Duration(i) * time.Minute)})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		ins  sdk.Inspection
		want string
	}{
		{"no trail", sdk.Inspection{}, "This policy keeps no denial trail."},
		{"empty", sdk.Inspection{TrailMax: 100, TrailTTL: 24 * time.Hour}, "The trail keeps the newest 100 denials, for 24h after the last one."},
		{"full", sdk.Inspection{TrailMax: 3, TrailTTL: time.Hour, Denials: ds(3), TrailFull: true}, "The trail keeps the newest 3 denials, for 1h after the last one. It is full: it goes back to 2025-12-31 23:58:00Z only, older denials were dropped."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := trailNote(tc.ins); got != tc.want {
				t.Errorf("trailNote(…) = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFingerprintHelper: the helper posts the text and lands on the
// subject page with sdk.Fingerprint's value; only policies with a
// fingerprint dimension offer it.
func TestFingerprintHelper(t *testing.T) {
	f := newFixture(t, testCredentials())
	text := "Your parcel is out for delivery"
	fp := sdk.Fingerprint(text)
	if body := readBody(t, f.do(t, req{path: "/subject?policy=push&user=u3", bearer: viewerToken})); !strings.Contains(body, `id="fp-form"`) || !strings.Contains(body, `name="fp_dim" value="content"`) || !strings.Contains(body, `type="hidden" name="user" value="u3"`) {
		t.Errorf("push's page lacks the fingerprint helper with the subject's values")
	}
	if body := readBody(t, f.do(t, req{path: "/subject?policy=api&user=u3", bearer: viewerToken})); strings.Contains(body, `id="fp-form"`) {
		t.Errorf("api's page (no content dimension) offers the fingerprint helper")
	}
	cs := f.csrf(t)
	post := func(form url.Values) *http.Response {
		form.Set(csrfField, f.tok(cs))
		return f.do(t, req{method: http.MethodPost, path: "/fingerprint", form: form, cookies: []*http.Cookie{cs}, bearer: viewerToken})
	}
	res := post(url.Values{"policy": {"push"}, "user": {"u3"}, "fp_dim": {"content"}, "fp_text": {text}})
	loc := res.Header.Get("Location")
	if want := "/subject?" + subjectQuery("push", sdk.Subject{"user": "u3", "content": fp}) + "&fp=content"; res.StatusCode != http.StatusSeeOther || loc != want {
		t.Fatalf("POST /fingerprint = %d to %q, want 303 to %q", res.StatusCode, loc, want)
	}
	body := readBody(t, f.do(t, req{path: loc, bearer: viewerToken}))
	if !strings.Contains(body, `<code>content</code> = <code class="subject-value">`+fp+`</code> is sdk.Fingerprint of the text you entered`) || !strings.Contains(body, `value="`+fp+`"`) {
		t.Errorf("page after the helper lacks the fingerprint %s:\n%s", fp, body)
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
	}{
		{"no text", url.Values{"policy": {"push"}, "fp_dim": {"content"}}, http.StatusBadRequest},
		{"not a fingerprint dimension", url.Values{"policy": {"push"}, "fp_dim": {"user"}, "fp_text": {"x"}}, http.StatusBadRequest},
		{"policy without one", url.Values{"policy": {"api"}, "fp_dim": {"campaign"}, "fp_text": {"x"}}, http.StatusBadRequest},
		{"too long", url.Values{"policy": {"push"}, "fp_dim": {"content"}, "fp_text": {strings.Repeat("x", maxFingerprintText+1)}}, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res := post(tc.form); res.StatusCode != tc.status {
				t.Errorf("POST /fingerprint = %d, want %d", res.StatusCode, tc.status)
			}
		})
	}
	// Without the CSRF token it is refused.
	res = f.do(t, req{method: http.MethodPost, path: "/fingerprint", form: url.Values{"policy": {"push"}, "fp_dim": {"content"}, "fp_text": {text}}, cookies: []*http.Cookie{cs}, bearer: viewerToken})
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("POST /fingerprint without CSRF = %d, want 403", res.StatusCode)
	}
}

// TestVerdictUnrecordedValues: a denial in force in a trail entry without
// values (written before values were recorded) keeps the verdict from
// saying the skipped rules block nothing.
func TestVerdictUnrecordedValues(t *testing.T) {
	at := t0
	ins := sdk.Inspection{
		At:      at,
		Skipped: []string{"content-59s"},
		Denials: []sdk.Denial{
			{At: at.Add(-10 * time.Second), Rule: "content-59s", RetryAfter: time.Minute},
			{At: at.Add(-time.Hour), Rule: "content-59m", RetryAfter: time.Minute}, // over
		},
	}
	if got := unrecorded(ins); len(got) != 1 || got[0] != "content-59s" {
		t.Fatalf("unrecorded(…) = %q, want [content-59s]", got)
	}
	var b strings.Builder
	l := views.SubjectLive{Allowed: true, Evaluated: []string{"recv-1m"}, Skipped: ins.Skipped, Missing: []string{"content"}, Unrecorded: unrecorded(ins)}
	if err := views.SubjectLiveBody(l).Render(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	v := verdictOf(t, b.String())
	if strings.Contains(v, "no block by") || !strings.Contains(v, `may be <span class="bad">denied for some values</span> of <strong>content</strong>`) || !strings.Contains(v, `id="unrecorded"`) {
		t.Errorf("verdict = %s, want the unrecorded block said", v)
	}
}
