package console

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
)

// withRule returns storeYAML with rule line added to push's rules (after
// recv-24h).
func withRule(line string) string {
	return strings.Replace(string(storeYAML), "      - {name: content-59s", "      - "+line+"\n      - {name: content-59s", 1)
}

// TestEditor, on memory, real Redis and a 3-master cluster: a viewer reads the current
// version and cannot preview; an admin's preview shows validation errors
// with the line, or the plan; an apply needs a reason, the version
// previewed (409 otherwise, nothing applied) and, for a re-keying
// document, the confirmation; the console then runs the new version; the
// history, a version, a diff and a rollback (confirmation page, then a
// new version) follow; every apply is audited with who and why.
func TestEditor(t *testing.T) {
	for _, backend := range []string{"memory", "redis", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			f, st := newStoreFixtureOn(t, testCredentials(), backend)
			cs := f.csrf(t)
			get := func(token, path string, status int) string {
				t.Helper()
				res := f.do(t, req{path: path, bearer: token, cookies: []*http.Cookie{cs}})
				body := html.UnescapeString(readBody(t, res))
				if res.StatusCode != status {
					t.Fatalf("GET %s = %d, want %d:\n%s", path, res.StatusCode, status, body)
				}
				return body
			}
			post := func(token, path string, form url.Values, status int) (*http.Response, string) {
				t.Helper()
				form.Set(csrfField, f.tok(cs))
				res := f.do(t, req{method: http.MethodPost, path: path, form: form, bearer: token, cookies: []*http.Cookie{cs}})
				body := html.UnescapeString(readBody(t, res))
				if res.StatusCode != status {
					t.Fatalf("POST %s = %d, want %d:\n%s", path, res.StatusCode, status, body)
				}
				return res, body
			}

			vb := get(viewerToken, "/policies/edit", http.StatusOK)
			if !strings.Contains(vb, `id="editor-readonly"`) || strings.Contains(vb, `id="editor-form"`) || !strings.Contains(vb, "overrides: true") {
				t.Errorf("a viewer's editor is not read-only with the current source:\n%s", vb)
			}
			post(viewerToken, "/policies/preview", url.Values{"source": {string(storeYAML)}}, http.StatusForbidden)

			// Invalid: the line and the key.
			_, body := post(adminToken, "/policies/preview", url.Values{"source": {withRule("{name: bad, algorithm: sliding_window, limit: 0, window: 1m, by: [user]}")}}, http.StatusUnprocessableEntity)
			if !strings.Contains(body, `id="invalid">policyfile: policies: line 16: policy "push": rule "bad": invalid rule: limit`) {
				t.Errorf("the preview of an invalid document does not give its line and rule:\n%s", body)
			}

			// A shadow rule beside recv-24h: the plan, the apply form.
			v2 := withRule("{name: recv-24h-40, algorithm: sliding_window, limit: 40, window: 24h, by: [user], shadow: true}")
			_, body = post(adminToken, "/policies/preview", url.Values{"source": {v2}}, http.StatusOK)
			for _, want := range []string{`<td><code>recv-24h-40</code></td><td class="kind">added</td><td class="carries">nothing</td>`, `<input type="hidden" name="base" value="1">`, `id="apply">Apply as version 2<`, `id="whatif-text"`} {
				if !strings.Contains(body, want) {
					t.Errorf("the preview lacks %q:\n%s", want, body)
				}
			}
			post(adminToken, "/policies/apply", url.Values{"source": {v2}, "base": {"1"}, "reason": {""}}, http.StatusBadRequest)
			res, _ := post(adminToken, "/policies/apply", url.Values{"source": {v2}, "base": {"1"}, "reason": {"try 40 beside 50"}}, http.StatusSeeOther)
			if loc := res.Header.Get("Location"); loc != "/policies/history?done=applied&v=2" {
				t.Errorf("apply redirects to %q", loc)
			}
			waitVersion(t, f, 2)
			if p := f.srv.snap().byName["push"]; p == nil || !hasShadowRule(p, "recv-24h-40") {
				t.Errorf("the console's push policy in version 2 has no shadow rule recv-24h-40")
			}
			// The same preview again is stale: 409, nothing applied.
			post(adminToken, "/policies/apply", url.Values{"source": {v2}, "base": {"1"}, "reason": {"again"}}, http.StatusConflict)

			// Re-keying content-59s (by user only) needs the confirmation.
			v3 := strings.Replace(v2, "limit: 2, window: 59s, by: [user, content]", "limit: 2, window: 59s, by: [user]", 1)
			_, body = post(adminToken, "/policies/preview", url.Values{"source": {v3}}, http.StatusOK)
			if !strings.Contains(body, `id="rekey-warning"`) || !strings.Contains(body, `<td class="kind">re-keyed</td>`) {
				t.Errorf("the preview of a re-keying document has no re-key warning:\n%s", body)
			}
			post(adminToken, "/policies/apply", url.Values{"source": {v3}, "base": {"2"}, "reason": {"per user"}}, http.StatusConflict)
			post(adminToken, "/policies/apply", url.Values{"source": {v3}, "base": {"2"}, "reason": {"per user"}, "rekey": {"yes"}}, http.StatusSeeOther)
			waitVersion(t, f, 3)

			hist := get(viewerToken, "/policies/history", http.StatusOK)
			for _, want := range []string{
				`<tr data-version="3"><td><a href="/policies/version?n=3" class="version-link">v3</a> <span class="tag">current</span>`,
				`<td class="by">alice</td><td class="reason">per user</td>`,
				`<td class="by">alice</td><td class="reason">try 40 beside 50</td>`,
				`<td class="by">setup</td><td class="reason">the seed policies</td>`,
			} {
				if !strings.Contains(hist, want) {
					t.Errorf("the history lacks %q:\n%s", want, hist)
				}
			}
			if strings.Contains(hist, "rollback-link") {
				t.Errorf("a viewer's history offers rollbacks:\n%s", hist)
			}
			if vb := get(viewerToken, "/policies/version?n=2", http.StatusOK); !strings.Contains(vb, "recv-24h-40") {
				t.Errorf("version 2's page lacks its source:\n%s", vb)
			}
			diff := get(viewerToken, "/policies/diff?a=2&b=3", http.StatusOK)
			for _, want := range []string{`<span class="del">-       - {name: content-59s, algorithm: sliding_window, limit: 2, window: 59s, by: [user, content]}`, `<span class="add">+       - {name: content-59s, algorithm: sliding_window, limit: 2, window: 59s, by: [user]}`} {
				if !strings.Contains(diff, want) {
					t.Errorf("the diff lacks %q:\n%s", want, diff)
				}
			}
			get(viewerToken, "/policies/version?n=9", http.StatusNotFound)
			get(viewerToken, "/policies/rollback?n=1", http.StatusForbidden)

			// Roll back to 1: its plan re-keys content-59s back.
			rb := get(adminToken, "/policies/rollback?n=1", http.StatusOK)
			if !strings.Contains(rb, `id="rekey-warning"`) || !strings.Contains(rb, `<input type="hidden" name="base" value="3">`) {
				t.Errorf("the rollback page lacks the re-key confirmation or the base:\n%s", rb)
			}
			post(adminToken, "/policies/rollback", url.Values{"n": {"1"}, "base": {"3"}, "reason": {"back"}, "rekey": {"yes"}}, http.StatusBadRequest) // not confirmed
			post(adminToken, "/policies/rollback", url.Values{"n": {"1"}, "base": {"3"}, "reason": {"back"}, "rekey": {"yes"}, "confirm": {"yes"}}, http.StatusSeeOther)
			waitVersion(t, f, 4)
			v4, err := st.Version(context.Background(), 4)
			if err != nil || string(v4.Source) != string(storeYAML) || v4.By != "alice" || v4.Reason != "back" {
				t.Errorf("version 4 = %+v, %v; want version 1's document applied by alice for \"back\"", v4, err)
			}

			applies := f.srv.audit.Filter(AuditFilter{Action: "policy-apply"})
			rollbacks := f.srv.audit.Filter(AuditFilter{Action: "policy-rollback"})
			if len(rollbacks) != 1 || rollbacks[0].Version != 4 || rollbacks[0].Reason != "back" || rollbacks[0].Name != "alice" {
				t.Errorf("rollback audit entries = %+v", rollbacks)
			}
			ok := 0
			for _, e := range applies {
				if e.Outcome == "ok" {
					ok++
				}
			}
			if ok != 2 || len(applies) != 4 { // 2 applied; the stale one and the unconfirmed re-key refused
				t.Errorf("policy-apply audit entries = %+v, want 2 ok of 4", applies)
			}

			// The JSON API: plan, apply (409 on a stale base), history.
			r, out := f.api(t, http.MethodPost, "/api/v1/policies/plan", adminToken, mustJSON(t, PolicyDocRequest{YAML: v2}))
			var plan PlanJSON
			if err := json.Unmarshal([]byte(out), &plan); err != nil || r.StatusCode != http.StatusOK || plan.Base != 4 || len(plan.Changes) != 1 {
				t.Errorf("POST /api/v1/policies/plan = %d %s", r.StatusCode, out)
			}
			if r, out := f.api(t, http.MethodPost, "/api/v1/policies/plan", viewerToken, mustJSON(t, PolicyDocRequest{YAML: v2})); r.StatusCode != http.StatusForbidden {
				t.Errorf("viewer plan = %d %s, want 403", r.StatusCode, out)
			}
			if r, out := f.api(t, http.MethodPost, "/api/v1/policies/apply", adminToken, mustJSON(t, PolicyDocRequest{YAML: v2, Base: 3, Reason: "x"})); r.StatusCode != http.StatusConflict {
				t.Errorf("stale apply = %d %s, want 409", r.StatusCode, out)
			}
			if r, out := f.api(t, http.MethodPost, "/api/v1/policies/apply", adminToken, mustJSON(t, PolicyDocRequest{YAML: v2, Base: 4, Reason: "json"})); r.StatusCode != http.StatusCreated || !strings.Contains(out, `"version":5`) {
				t.Errorf("apply = %d %s, want 201 version 5", r.StatusCode, out)
			}
			if r, out := f.api(t, http.MethodPost, "/api/v1/policies/rollback", adminToken, `{"version":1,"base":5,"reason":"json back"}`); r.StatusCode != http.StatusCreated || !strings.Contains(out, `"version":6`) {
				t.Errorf("rollback = %d %s, want 201 version 6", r.StatusCode, out)
			}
			r, out = f.api(t, http.MethodGet, "/api/v1/policies/history?max=2", viewerToken, "")
			if r.StatusCode != http.StatusOK || !strings.Contains(out, `"version":6`) || !strings.Contains(out, `"reason":"json back"`) || strings.Contains(out, `"version":4`) {
				t.Errorf("history = %d %s", r.StatusCode, out)
			}
		})
	}
}

func hasShadowRule(p *sdk.Policy, name string) bool {
	r, ok := ruleNamed(p, name)
	return ok && r.Shadow
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestShadowView: a shadow rule's would-be denials, recorded by a service's
// fleet recorder, show on the policies page over 1 h and 24 h (attempts,
// of them allowed, people), beside the enforced rules' denials.
func TestShadowView(t *testing.T) {
	f, st := newStoreFixture(t, testCredentials())
	ctx := context.Background()
	plan, err := st.Plan(ctx, []byte(withRule("{name: recv-1m-3, algorithm: sliding_window, limit: 3, window: 1m, by: [user], shadow: true}")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, plan, "alice", "try 3 per minute"); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, f, 2)
	push := f.srv.snap().byName["push"]
	// A service on the same backend, recording.
	rec, err := fleet.NewRecorder(f.backend, &fleet.Options{Now: f.clock.Now, FlushEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	service := sdk.New(f.backend, sdk.WithClock(f.clock), sdk.WithObserver(rec.Observe))
	// Two people: u1 sends 5 (2 over the shadow limit of 3), u2 sends 4 (1 over).
	for user, n := range map[string]int{"u1": 5, "u2": 4} {
		for i := range n {
			d, err := service.Allow(ctx, push, sdk.Subject{"user": user, "content": "c" + string(rune('a'+i))})
			if err != nil || !d.Allowed {
				t.Fatalf("Allow(%s #%d) = %+v, %v; want allowed (a shadow rule never denies)", user, i, d, err)
			}
		}
	}
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	body := html.UnescapeString(readBody(t, f.do(t, req{path: "/policies", bearer: viewerToken})))
	want := `<tr class="shadow-row" data-rule="recv-1m-3"><td class="rule"><strong>recv-1m-3</strong><span class="tag shadow">shadow</span></td><td class="num attempts-1h" data-label="1 h: attempts">3</td><td class="num allowed-1h" data-label="allowed">3</td><td class="num people-1h" data-label="people">2</td><td class="num attempts-24h" data-label="24 h: attempts">3</td><td class="num allowed-24h" data-label="allowed">3</td><td class="num people-24h" data-label="people">2</td></tr>`
	if !strings.Contains(body, want) {
		t.Errorf("the policies page lacks\n%s\n:\n%s", want, body)
	}
	if !strings.Contains(body, `<tr class="enforced-row" data-rule="recv-1m"><td class="rule">recv-1m <span class="muted">(enforced: denied)</span></td><td class="num attempts-1h" data-label="1 h: attempts">0</td>`) {
		t.Errorf("the policies page lacks the enforced rules beside:\n%s", body)
	}
	if !strings.Contains(body, `Policy-store version <strong id="running-version">2</strong> in force, applied`) {
		t.Errorf("the policies page does not name version 2:\n%s", body)
	}
}

// TestOverviewVersions: the overview names the version the console runs
// and, per announcing service, the version it runs, warning about one
// behind.
func TestOverviewVersions(t *testing.T) {
	f, st := newStoreFixtureOn(t, testCredentials(), "redis")
	ctx := context.Background()
	rec, err := fleet.NewRecorder(f.backend, &fleet.Options{Prefix: f.prefix, FlushEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	v1 := f.srv.snap().order
	plan, err := st.Plan(ctx, []byte(strings.Replace(string(storeYAML), "limit: 50, window: 24h", "limit: 40, window: 24h", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, plan, "alice", "40 per day"); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, f, 2)
	// A service still at version 1.
	rec.SetPolicyVersion(1)
	rec.Announce(v1...)
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	body := html.UnescapeString(readBody(t, f.do(t, req{path: "/", bearer: viewerToken})))
	for _, want := range []string{
		`This console runs policy-store version <strong id="running-version">2</strong>, applied `,
		`by alice: “40 per day”`,
		`push version 1 (`,
		`A service runs policy push at store version 1, behind this console's version 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %q:\n%s", want, body)
		}
	}
}

// TestEditorWhatIf: the preview estimates, from a service's recorded
// traffic sample, what the proposed version would have denied beside
// what the current one did (fleet/whatif; every subject sampled).
func TestEditorWhatIf(t *testing.T) {
	f, _ := newStoreFixture(t, testCredentials())
	ctx := context.Background()
	rec, err := fleet.NewRecorder(f.backend, &fleet.Options{Now: f.clock.Now, FlushEvery: -1, Sample: 1})
	if err != nil {
		t.Fatal(err)
	}
	service := sdk.New(f.backend, sdk.WithClock(f.clock), sdk.WithObserver(rec.Observe))
	push := f.srv.snap().byName["push"]
	// 4 people send 6 messages each, 5 s apart: recv-1m (15) denies none;
	// at 3 per minute, each would have been denied 3 times.
	for i := range 6 {
		for u := range 4 {
			if _, err := service.Allow(ctx, push, sdk.Subject{"user": "w" + strconv.Itoa(u), "content": "m" + strconv.Itoa(i)}); err != nil {
				t.Fatal(err)
			}
		}
		f.clock.Advance(5 * time.Second)
	}
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cs := f.csrf(t)
	form := url.Values{csrfField: {f.tok(cs)}, "source": {strings.Replace(string(storeYAML), "limit: 15, window: 1m", "limit: 3, window: 1m", 1)}}
	res := f.do(t, req{method: http.MethodPost, path: "/policies/preview", form: form, bearer: adminToken, cookies: []*http.Cookie{cs}})
	body := html.UnescapeString(readBody(t, res))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("preview = %d:\n%s", res.StatusCode, body)
	}
	i := strings.Index(body, `id="whatif-text">`)
	if i < 0 {
		t.Fatalf("the preview has no estimate:\n%s", body)
	}
	est := body[i:]
	est = est[:strings.Index(est, "</pre>")]
	t.Logf("estimate:\n%s", est)
	for _, want := range []string{"policy push: 1 subject in 1 sampled, 24 attempts replayed", "proposed: denies 12 attempts, 4 people", "recv-1m denies 12 attempts, 4 people", "current: denies 0 attempts, 0 people"} {
		if !strings.Contains(est, want) {
			t.Errorf("the estimate lacks %q:\n%s", want, est)
		}
	}
}
