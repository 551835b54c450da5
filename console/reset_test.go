package console

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/sdk"
)

// usedBy returns each rule's Used for s under policy, by rule name.
func (f *fixture) usedBy(t *testing.T, policy string, s sdk.Subject) map[string]int64 {
	t.Helper()
	ins, err := f.lim.Admin().Inspect(context.Background(), f.policies[policy], s)
	if err != nil {
		t.Fatalf("Inspect(%s) error: %v", policy, err)
	}
	out := map[string]int64{}
	for _, r := range ins.Rules {
		out[r.Rule] = r.Used
	}
	return out
}

// TestResetPair: the reset of a (user, content) pair, or (user, campaign),
// deletes the counters of the rules keyed by exactly those dimensions and
// keeps the user's own rules; the confirmation page says so, and offers
// the wider reset apart, naming the rules it adds and that they count
// every content (campaign). The audit entry names the rules reset.
func TestResetPair(t *testing.T) {
	tests := []struct {
		policy       string
		pair, other  sdk.Subject
		exact, wider string
		note         string
		kept         string
	}{
		{
			policy: "push",
			pair:   sdk.Subject{"user": "u1", "content": "c1"}, other: sdk.Subject{"user": "u1", "content": "c2"},
			exact: "content-59s, content-59m", wider: "recv-1m, recv-24h, content-59s, content-59m",
			note: "recv-1m and recv-24h are keyed by user only, not by content: resetting them lifts their limits for every content of this user, not only for the values above.",
			kept: "recv-1m, recv-24h keep their counters",
		},
		{
			policy: "api",
			pair:   sdk.Subject{"user": "u1", "campaign": "spring"}, other: sdk.Subject{"user": "u1", "campaign": "autumn"},
			exact: "daily", wider: "burst, daily",
			note: "burst is keyed by user only, not by campaign: resetting it lifts its limits for every campaign of this user, not only for the values above.",
			kept: "burst keeps its counters",
		},
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			f := newFixture(t, testCredentials())
			f.allow(t, tc.policy, tc.pair, 3)
			f.allow(t, tc.policy, tc.other, 2)
			before := f.usedBy(t, tc.policy, tc.pair)
			cs := f.csrf(t)

			body := html.UnescapeString(readBody(t, f.do(t, req{path: "/reset?" + subjectQuery(tc.policy, tc.pair), bearer: adminToken, cookies: []*http.Cookie{cs}})))
			for _, want := range []string{
				`id="reset-rules">` + tc.exact + `<`,
				`id="reset-kept">` + tc.kept,
				`name="rules" value="` + strings.ReplaceAll(tc.exact, ", ", ",") + `"`,
				`id="wider-rules">` + tc.wider + `<`,
				tc.note,
				`id="confirm-reset-all">Yes, reset ` + tc.wider + `<`,
			} {
				if !strings.Contains(body, want) {
					t.Errorf("confirmation page lacks %q:\n%s", want, body)
				}
			}

			form := url.Values{"policy": {tc.policy}, "confirm": {"yes"}, csrfField: {f.tok(cs)}, "rules": {strings.ReplaceAll(tc.exact, ", ", ",")}}
			for k, v := range tc.pair {
				form.Set(k, v)
			}
			res := f.do(t, req{method: http.MethodPost, path: "/reset", form: form, cookies: []*http.Cookie{cs}, bearer: adminToken})
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("POST /reset (the pair) = %d, want 303: %s", res.StatusCode, readBody(t, res))
			}
			after := f.usedBy(t, tc.policy, tc.pair)
			for rule, u := range after {
				want := before[rule] // kept
				if strings.Contains(tc.exact, rule) {
					want = 0
				}
				if u != want {
					t.Errorf("after the pair's reset %s used = %d, want %d (before: %d)", rule, u, want, before[rule])
				}
			}
			page := html.UnescapeString(readBody(t, f.do(t, req{path: res.Header.Get("Location"), bearer: adminToken})))
			if want := "Reset " + tc.exact + " for these values: their counters start from zero; every other rule's counters are kept."; !strings.Contains(page, want) {
				t.Errorf("subject page after the pair's reset lacks the notice %q:\n%s", want, page)
			}
			e := f.audit.Entries()
			if len(e) != 1 || strings.Join(e[0].Rules, ", ") != tc.exact || e[0].Outcome != "ok" {
				t.Fatalf("audit = %+v, want one entry resetting %s", e, tc.exact)
			}

			// Part of a set of dimensions, or an unknown rule: refused,
			// nothing reset or audited.
			for _, rules := range []string{strings.Split(tc.exact, ", ")[0] + ",nope", "", "nope"} {
				f.allow(t, tc.policy, tc.pair, 1)
				mid := f.usedBy(t, tc.policy, tc.pair)
				form.Set("rules", rules)
				if res := f.do(t, req{method: http.MethodPost, path: "/reset", form: form, cookies: []*http.Cookie{cs}, bearer: adminToken}); res.StatusCode != http.StatusBadRequest {
					t.Errorf("POST /reset rules=%q = %d, want 400", rules, res.StatusCode)
				}
				if got := f.usedBy(t, tc.policy, tc.pair); len(got) != len(mid) || got[strings.Split(tc.exact, ", ")[0]] != mid[strings.Split(tc.exact, ", ")[0]] {
					t.Errorf("POST /reset rules=%q changed the counters: %v, want %v", rules, got, mid)
				}
			}
			if n := len(f.audit.Entries()); n != 1 {
				t.Errorf("refused pair resets were audited: %d entries, want 1", n)
			}

			// The wider reset (no rules field) deletes every rule's counters.
			form.Del("rules")
			if res := f.do(t, req{method: http.MethodPost, path: "/reset", form: form, cookies: []*http.Cookie{cs}, bearer: adminToken}); res.StatusCode != http.StatusSeeOther {
				t.Fatalf("POST /reset (wider) = %d, want 303", res.StatusCode)
			}
			for rule, u := range f.usedBy(t, tc.policy, tc.pair) {
				if u != 0 {
					t.Errorf("after the wider reset %s used = %d, want 0", rule, u)
				}
			}
			if e := f.audit.Entries(); len(e) != 2 || strings.Join(e[0].Rules, ", ") != tc.wider {
				t.Errorf("audit = %+v, want the wider reset of %s first", e, tc.wider)
			}
		})
	}
}

// TestResetSubjectAlone: for a subject giving only the shard dimensions,
// the confirmation page has one reset (every rule it can name), no wider
// one to explain.
func TestResetSubjectAlone(t *testing.T) {
	f := newFixture(t, testCredentials())
	body := readBody(t, f.do(t, req{path: "/reset?policy=push&user=u1", bearer: adminToken}))
	if !strings.Contains(body, `id="reset-rules">recv-1m, recv-24h<`) || strings.Contains(body, `id="reset-wider"`) || strings.Contains(body, `name="rules"`) {
		t.Errorf("confirmation page for a user alone = %s, want recv-1m, recv-24h and no second reset", body)
	}
}

// TestAPIResetRules: POST /api/v1/reset with "rules" resets those rules
// only and answers (and audits) exactly which were reset and kept.
func TestAPIResetRules(t *testing.T) {
	f := newFixture(t, testCredentials())
	pair := sdk.Subject{"user": "u1", "content": "c1"}
	f.allow(t, "push", pair, 2)
	res, body := f.api(t, http.MethodPost, "/api/v1/reset", adminToken, `{"policy":"push","subject":{"user":"u1","content":"c1"},"rules":["content-59m","content-59s"]}`)
	var out ResetJSON
	if res.StatusCode != 200 || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("POST /api/v1/reset = %d %s, want 200", res.StatusCode, body)
	}
	if strings.Join(out.Reset, ",") != "content-59s,content-59m" || strings.Join(out.Kept, ",") != "recv-1m,recv-24h" {
		t.Errorf("answer = %+v, want content-59s, content-59m reset and recv-1m, recv-24h kept", out)
	}
	if u := f.usedBy(t, "push", pair); u["recv-1m"] != 2 || u["recv-24h"] != 2 || u["content-59s"] != 0 || u["content-59m"] != 0 {
		t.Errorf("after the API pair reset used = %v, want the user's rules at 2 and the pair's at 0", u)
	}
	if e := f.audit.Entries(); len(e) != 1 || strings.Join(e[0].Rules, ",") != "content-59s,content-59m" {
		t.Errorf("audit = %+v, want the reset of content-59s, content-59m", e)
	}
	for _, tc := range []struct{ name, rules string }{
		{"part of a set of dimensions", `["content-59s"]`},
		{"none", `[]`},
		{"unknown", `["nope"]`},
		{"a rule whose dimensions are not given", `["content-59s","content-59m"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			subject := `{"user":"u1","content":"c1"}`
			if tc.name == "a rule whose dimensions are not given" {
				subject = `{"user":"u1"}`
			}
			if res, body := f.api(t, http.MethodPost, "/api/v1/reset", adminToken, `{"policy":"push","subject":`+subject+`,"rules":`+tc.rules+`}`); res.StatusCode != http.StatusBadRequest {
				t.Errorf("rules %s = %d %s, want 400", tc.rules, res.StatusCode, body)
			}
		})
	}
	if n := len(f.audit.Entries()); n != 1 {
		t.Errorf("refused resets were audited: %d entries, want 1", n)
	}
}
