package console

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/sdk"
)

// TestPeople, on memory, real Redis and a 3-master cluster: an admin links an
// identity to a person from the subject page; the subject page of the
// identity and the person page of either find the person, its
// identities, stored zone and audit (by the admin's name); the JSON API
// reads, sets the zone and unlinks; every change is in the console's
// audit log; viewers read and may change nothing; bad input, conflicts
// and missing links answer 400, 409 and 404.
func TestPeople(t *testing.T) {
	for _, backend := range []string{"memory", "redis", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			f, _ := newStoreFixtureOn(t, testCredentials(), backend)
			cs := f.csrf(t)
			id, person := "tok-"+backend, "ann-"+backend
			get := func(path, token string) string {
				t.Helper()
				res := f.do(t, req{path: path, bearer: token, cookies: []*http.Cookie{cs}})
				body := readBody(t, res)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("GET %s = %d:\n%s", path, res.StatusCode, body)
				}
				return html.UnescapeString(body)
			}
			post := func(path, token string, form url.Values) *http.Response {
				t.Helper()
				form.Set(csrfField, f.tok(cs))
				return f.do(t, req{method: http.MethodPost, path: path, form: form, bearer: token, cookies: []*http.Cookie{cs}})
			}
			subjectPath := "/subject?" + subjectQuery("push", sdk.Subject{"user": id})
			if body := get(subjectPath, adminToken); !strings.Contains(body, `id="person-self"`) || !strings.Contains(body, `id="person-link-form"`) {
				t.Fatalf("subject page of an unlinked id lacks its own person or the link form:\n%s", body)
			}
			if body := get("/person?id="+url.QueryEscape(id), viewerToken); !strings.Contains(body, `id="person-self"`) || strings.Contains(body, `id="person-link-form"`) {
				t.Fatalf("a viewer's person page must show the person without the forms:\n%s", body)
			}

			link := url.Values{"identity": {id}, "person": {person}, "reason": {"same device"}, "back": {subjectPath}}
			if res := post("/person/link", viewerToken, link); res.StatusCode != http.StatusForbidden {
				t.Fatalf("viewer POST /person/link = %d, want 403", res.StatusCode)
			}
			noReason := url.Values{"identity": {id}, "person": {person}, "reason": {" "}}
			if res := post("/person/link", adminToken, noReason); res.StatusCode != http.StatusBadRequest {
				t.Fatalf("POST /person/link without a reason = %d, want 400", res.StatusCode)
			}
			res := post("/person/link", adminToken, link)
			if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/subject?") || !strings.Contains(res.Header.Get("Location"), "done=person-linked") {
				t.Fatalf("admin POST /person/link = %d to %q, want 303 back to the subject page", res.StatusCode, res.Header.Get("Location"))
			}
			back, _, _ := strings.Cut(res.Header.Get("Location"), "#")
			body := get(back, adminToken)
			for _, want := range []string{`id="person-notice"`, `id="person-linked"`, `is an identity of person <a href="/person?id=` + person, `href="/subject?policy=push&user=` + person + `"`, `<tr data-identity="` + id + `">`, `<td class="by" data-label="By">alice</td>`, `<td class="reason" data-label="Reason">same device</td>`, "link " + id} {
				if !strings.Contains(body, want) {
					t.Errorf("subject page after the link lacks %q:\n%s", want, body)
				}
			}
			if body := get("/person?id="+url.QueryEscape(person), viewerToken); !strings.Contains(body, `<tr data-identity="`+id+`">`) || strings.Contains(body, `action="/person/unlink"`) {
				t.Errorf("a viewer's person page of the person must list the identity without unlink forms:\n%s", body)
			}
			if res := post("/person/link", adminToken, url.Values{"identity": {id}, "person": {"bob"}, "reason": {"x"}}); res.StatusCode != http.StatusConflict {
				t.Errorf("POST /person/link to another person = %d, want 409", res.StatusCode)
			}
			// An open redirect is not: back goes to the console's pages only.
			zone := url.Values{"person": {person}, "zone": {"Europe/Paris"}, "reason": {"moved"}, "back": {"https://example.com/"}}
			if res := post("/person/zone", adminToken, zone); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/person?done=person-zone&id="+person+"#person" {
				t.Fatalf("POST /person/zone = %d to %q, want 303 to the person page", res.StatusCode, res.Header.Get("Location"))
			}

			// The JSON API.
			api := func(method, path, token, body string) (int, map[string]any) {
				t.Helper()
				r := req{method: method, path: path, bearer: token, body: body}
				if body != "" {
					r.header = map[string]string{"Content-Type": "application/json"}
				}
				res := f.do(t, r)
				var out map[string]any
				raw := readBody(t, res)
				if err := json.Unmarshal([]byte(raw), &out); err != nil {
					t.Fatalf("%s %s: %v: %s", method, path, err, raw)
				}
				return res.StatusCode, out
			}
			code, out := api(http.MethodGet, "/api/v1/person?id="+url.QueryEscape(id), viewerToken, "")
			if code != http.StatusOK || out["person"] != person || out["linked"] != true || out["zone"] != "Europe/Paris" || len(out["identities"].([]any)) != 1 || len(out["audit"].([]any)) != 2 {
				t.Fatalf("GET /api/v1/person = %d %v, want the person, linked, its zone, one identity, two events", code, out)
			}
			if code, _ := api(http.MethodPost, "/api/v1/person/zone", viewerToken, `{"person": "`+person+`", "zone": "UTC", "reason": "x"}`); code != http.StatusForbidden {
				t.Errorf("viewer POST /api/v1/person/zone = %d, want 403", code)
			}
			if code, _ := api(http.MethodPost, "/api/v1/person/zone", adminToken, `{"person": "`+person+`", "zone": "Local", "reason": "x"}`); code != http.StatusBadRequest {
				t.Errorf("POST /api/v1/person/zone Local = %d, want 400", code)
			}
			if code, out := api(http.MethodPost, "/api/v1/person/zone", adminToken, `{"person": "`+person+`", "zone": "", "reason": "unknown"}`); code != http.StatusOK || out["zone"] != "" {
				t.Errorf("POST /api/v1/person/zone clearing = %d %v", code, out)
			}
			if code, out := api(http.MethodPost, "/api/v1/person/link", adminToken, `{"identity": "+33 6 12", "person": "`+person+`", "reason": "sms"}`); code != http.StatusCreated || out["person"] != person || out["by"] != "alice" {
				t.Errorf("POST /api/v1/person/link = %d %v, want 201 with the link by alice", code, out)
			}
			if code, out := api(http.MethodPost, "/api/v1/person/unlink", adminToken, `{"identity": "`+id+`", "reason": "sold"}`); code != http.StatusOK || out["unlinked"] != id {
				t.Errorf("POST /api/v1/person/unlink = %d %v", code, out)
			}
			if code, _ := api(http.MethodPost, "/api/v1/person/unlink", adminToken, `{"identity": "`+id+`", "reason": "again"}`); code != http.StatusNotFound {
				t.Errorf("POST /api/v1/person/unlink again = %d, want 404", code)
			}
			if code, _ := api(http.MethodPost, "/api/v1/person/link", adminToken, `{"identity": "a\tb", "person": "`+person+`", "reason": "x"}`); code != http.StatusBadRequest {
				t.Errorf("POST /api/v1/person/link of a control character = %d, want 400", code)
			}
			code, out = api(http.MethodGet, "/api/v1/person?id="+url.QueryEscape(id), viewerToken, "")
			if code != http.StatusOK || out["person"] != id || out["linked"] != false {
				t.Errorf("GET /api/v1/person after unlink = %d %v, want its own person", code, out)
			}

			// The console's audit log has every change, by alice.
			want := map[string]int{"person-link": 0, "person-unlink": 0, "person-zone": 0}
			for _, e := range f.audit.Filter(AuditFilter{}) {
				if _, ok := want[e.Action]; ok && e.Name == "alice" {
					want[e.Action]++
				}
			}
			if want["person-link"] < 3 || want["person-unlink"] != 2 || want["person-zone"] < 3 {
				t.Errorf("audit log's person entries by alice = %v, want links, unlinks and zones (refused ones too)", want)
			}
		})
	}
}
