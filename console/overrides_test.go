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

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestOverrides, on memory, real Redis and a 3-master cluster: an admin blocks a person
// through the subject page's form; the page lists the block, the verdict
// and the service's next take say "denied by block #N", the trail shows it; an
// exempt set through the API admits past the limits; both are audited
// with the person and their reason; deletion asks for confirmation, then
// the rules alone decide again. Viewers see the list and no form, and may
// not set or delete.
func TestOverrides(t *testing.T) {
	for _, backend := range []string{"memory", "redis", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			f, _ := newStoreFixtureOn(t, testCredentials(), backend)
			user := "ov-" + backend
			cs := f.csrf(t)
			page := func(token string) string {
				t.Helper()
				res := f.do(t, req{path: "/subject?" + subjectQuery("push", sdk.Subject{"user": user}), bearer: token, cookies: []*http.Cookie{cs}})
				body := readBody(t, res)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("GET /subject = %d:\n%s", res.StatusCode, body)
				}
				return html.UnescapeString(body)
			}
			if body := page(adminToken); !strings.Contains(body, `id="no-overrides"`) || !strings.Contains(body, `id="override-form"`) {
				t.Fatalf("subject page without overrides lacks the empty list or the form:\n%s", body)
			}

			// A viewer may not set one.
			form := url.Values{csrfField: {f.tok(cs)}, "policy": {"push"}, "user": {user}, "kind": {"block"}, "until": {"2h"}, "reason": {"abuse report 4411"}}
			res := f.do(t, req{method: http.MethodPost, path: "/override", form: form, bearer: viewerToken, cookies: []*http.Cookie{cs}})
			if res.StatusCode != http.StatusForbidden {
				t.Fatalf("viewer POST /override = %d, want 403", res.StatusCode)
			}
			// Without a reason: refused.
			noReason := url.Values{csrfField: {f.tok(cs)}, "policy": {"push"}, "user": {user}, "kind": {"block"}, "reason": {"  "}}
			if res := f.do(t, req{method: http.MethodPost, path: "/override", form: noReason, bearer: adminToken, cookies: []*http.Cookie{cs}}); res.StatusCode != http.StatusBadRequest {
				t.Fatalf("POST /override without a reason = %d, want 400", res.StatusCode)
			}
			res = f.do(t, req{method: http.MethodPost, path: "/override", form: form, bearer: adminToken, cookies: []*http.Cookie{cs}})
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("admin POST /override = %d, want 303: %s", res.StatusCode, readBody(t, res))
			}
			loc, _ := url.Parse(res.Header.Get("Location"))
			id := loc.Query().Get("id")
			if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
				t.Fatalf("redirect %s names no override id", res.Header.Get("Location"))
			}

			body := page(adminToken)
			for _, want := range []string{
				`<tr data-override="` + id + `"><td class="id">#` + id + `</td><td class="kind"><strong>block</strong>`,
				`<td class="reason">abuse report 4411</td><td class="by">alice</td>`,
				`A request now would be <span class="bad">denied by block #` + id + `</span> until `,
				`/override/delete?policy=push&user=` + user + `&id=` + id,
			} {
				if !strings.Contains(body, want) {
					t.Errorf("subject page lacks %q:\n%s", want, body)
				}
			}
			if vb := page(viewerToken); !strings.Contains(vb, `<td class="reason">abuse report 4411</td>`) || strings.Contains(vb, `id="override-form"`) || strings.Contains(vb, "/override/delete?") || !strings.Contains(vb, `id="override-denied"`) {
				t.Errorf("a viewer's subject page must list the override without the form or delete links:\n%s", vb)
			}

			// The service's next take is denied by the block, whatever the
			// rules say.
			d, err := f.lim.Take(context.Background(), f.srv.snap().byName["push"], sdk.Attempt{Subject: sdk.Subject{"user": user, "content": "c1"}})
			if err != nil || d.Allowed || strconv.FormatInt(d.Override.ID, 10) != id || d.Override.Kind != driver.Block {
				t.Fatalf("Take under a block = %+v, %v; want denied by block #%s", d, err, id)
			}
			res, out := f.api(t, http.MethodGet, "/api/v1/inspect?policy=push&user="+user, viewerToken, "")
			var ins InspectionJSON
			if err := json.Unmarshal([]byte(out), &ins); err != nil || res.StatusCode != http.StatusOK || ins.Allowed || ins.Override == nil || strconv.FormatInt(ins.Override.ID, 10) != id ||
				len(ins.Denials) != 1 || strconv.FormatInt(ins.Denials[0].Override, 10) != id || ins.Denials[0].Rule != "" {
				t.Errorf("inspect under a block = %d %s, want not allowed, naming block #%s and its trail entry", res.StatusCode, out, id)
			}
			body = page(adminToken)
			if !strings.Contains(body, `<strong class="bad override-mark">denied by block #`+id+`</strong><div class="muted">until `) {
				t.Errorf("the trail does not show the block's denial:\n%s", body)
			}

			// The audit log has the set, with the person and the reason.
			entries := f.srv.audit.Filter(AuditFilter{Action: "override-set", Policy: "push", Subject: sdk.Subject{"user": user}})
			if len(entries) != 1 || entries[0].Reason != "abuse report 4411" || entries[0].Name != "alice" || strconv.FormatInt(entries[0].Override, 10) != id || entries[0].Subject["user"] != user {
				t.Errorf("audit entries for the set = %+v, want one by alice with the reason and id %s", entries, id)
			}

			// Delete: confirmation, then the post.
			conf := html.UnescapeString(readBody(t, f.do(t, req{path: "/override/delete?" + subjectQuery("push", sdk.Subject{"user": user}) + "&id=" + id, bearer: adminToken, cookies: []*http.Cookie{cs}})))
			if !strings.Contains(conf, `id="confirm-delete-override">Yes, delete override #`+id+`<`) || !strings.Contains(conf, "abuse report 4411") {
				t.Errorf("the confirmation page lacks the button or the override:\n%s", conf)
			}
			del := url.Values{csrfField: {f.tok(cs)}, "policy": {"push"}, "user": {user}, "id": {id}}
			if res := f.do(t, req{method: http.MethodPost, path: "/override/delete", form: del, bearer: adminToken, cookies: []*http.Cookie{cs}}); res.StatusCode != http.StatusBadRequest {
				t.Errorf("unconfirmed delete = %d, want 400", res.StatusCode)
			}
			del.Set("confirm", "yes")
			if res := f.do(t, req{method: http.MethodPost, path: "/override/delete", form: del, bearer: adminToken, cookies: []*http.Cookie{cs}}); res.StatusCode != http.StatusSeeOther {
				t.Fatalf("confirmed delete = %d, want 303", res.StatusCode)
			}
			if res := f.do(t, req{method: http.MethodPost, path: "/override/delete", form: del, bearer: adminToken, cookies: []*http.Cookie{cs}}); res.StatusCode != http.StatusNotFound {
				t.Errorf("second delete = %d, want 404", res.StatusCode)
			}
			if body := page(adminToken); strings.Contains(body, "denied by block #"+id+"</span>") || !strings.Contains(body, `id="no-overrides"`) {
				t.Errorf("after the deletion the verdict still names the block, or the list is not empty:\n%s", body)
			}

			// An exempt through the API admits past the limits (content-59s: 2).
			res, out = f.api(t, http.MethodPost, "/api/v1/overrides", adminToken, `{"policy":"push","subject":{"user":"`+user+`"},"kind":"exempt","reason":"vip"}`)
			var o OverrideJSON
			if err := json.Unmarshal([]byte(out), &o); err != nil || res.StatusCode != http.StatusCreated || o.Kind != "exempt" || o.By != "alice" {
				t.Fatalf("POST /api/v1/overrides = %d %s", res.StatusCode, out)
			}
			for i := range 4 {
				d, err := f.lim.Take(context.Background(), f.srv.snap().byName["push"], sdk.Attempt{Subject: sdk.Subject{"user": user, "content": "c2"}})
				if err != nil || !d.Allowed || d.Override.ID != o.ID {
					t.Fatalf("Take %d under an exempt = %+v, %v; want allowed by #%d", i, d, err, o.ID)
				}
			}
			if res, _ := f.api(t, http.MethodPost, "/api/v1/overrides", viewerToken, `{"policy":"push","subject":{"user":"`+user+`"},"kind":"exempt","reason":"vip"}`); res.StatusCode != http.StatusForbidden {
				t.Errorf("viewer POST /api/v1/overrides = %d, want 403", res.StatusCode)
			}
			res, out = f.api(t, http.MethodGet, "/api/v1/overrides?policy=push&user="+user, viewerToken, "")
			var list OverridesJSON
			if err := json.Unmarshal([]byte(out), &list); err != nil || res.StatusCode != http.StatusOK || len(list.Overrides) != 1 || list.Overrides[0].ID != o.ID {
				t.Errorf("GET /api/v1/overrides = %d %s, want the exempt alone", res.StatusCode, out)
			}
			for _, bad := range []string{
				`{"policy":"push","subject":{"user":"` + user + `","content":"c"},"kind":"exempt","reason":"x"}`,
				`{"policy":"push","subject":{"user":"` + user + `"},"kind":"limit","limits":{"nope":3},"reason":"x"}`,
				`{"policy":"push","subject":{"user":"` + user + `"},"kind":"block","until":"2000-01-01T00:00:00Z","reason":"x"}`,
				`{"policy":"push","subject":{"user":"` + user + `"},"kind":"sometimes","reason":"x"}`,
			} {
				if res, out := f.api(t, http.MethodPost, "/api/v1/overrides", adminToken, bad); res.StatusCode != http.StatusBadRequest || strings.Contains(out, user) {
					t.Errorf("POST /api/v1/overrides %s = %d %s, want 400 without the subject", bad, res.StatusCode, out)
				}
			}
			// The api policy has no overrides: the page says so, a set is refused.
			apiPage := html.UnescapeString(readBody(t, f.do(t, req{path: "/subject?" + subjectQuery("api", sdk.Subject{"user": user}), bearer: adminToken})))
			if !strings.Contains(apiPage, `id="overrides-off"`) || strings.Contains(apiPage, `id="override-form"`) {
				t.Errorf("the api policy's subject page does not say it reads no overrides:\n%s", apiPage)
			}
			if res, out := f.api(t, http.MethodPost, "/api/v1/overrides", adminToken, `{"policy":"api","subject":{"user":"`+user+`"},"kind":"block","reason":"x"}`); res.StatusCode != http.StatusBadRequest || !strings.Contains(out, "overrides: true") {
				t.Errorf("override on a policy without overrides = %d %s, want 400 saying overrides: true", res.StatusCode, out)
			}
			res, out = f.api(t, http.MethodPost, "/api/v1/overrides/delete", adminToken, `{"policy":"push","subject":{"user":"`+user+`"},"id":`+strconv.FormatInt(o.ID, 10)+`}`)
			if res.StatusCode != http.StatusOK {
				t.Errorf("POST /api/v1/overrides/delete = %d %s", res.StatusCode, out)
			}
			// Newest first: the API's, the refused second one, the form's.
			got := f.srv.audit.Filter(AuditFilter{Action: "override-delete", Subject: sdk.Subject{"user": user}})
			if len(got) != 3 || got[0].Outcome != "ok" || got[1].Outcome != "refused: no such override" || got[2].Outcome != "ok" {
				t.Errorf("override-delete audit entries = %+v, want ok, refused, ok", got)
			}
			if err := f.lim.Admin().DeleteOverride(context.Background(), f.srv.snap().byName["push"], sdk.Subject{"user": user}, o.ID); err == nil {
				t.Errorf("the exempt is still there after the API's delete")
			}

			// A limit override: the rule's row says whose limit it shows.
			res, out = f.api(t, http.MethodPost, "/api/v1/overrides", adminToken, `{"policy":"push","subject":{"user":"`+user+`"},"kind":"limit","limits":{"recv-24h":200},"reason":"partner quota"}`)
			var lo OverrideJSON
			if err := json.Unmarshal([]byte(out), &lo); err != nil || res.StatusCode != http.StatusCreated {
				t.Fatalf("POST /api/v1/overrides (limit) = %d %s", res.StatusCode, out)
			}
			mark := `<span class="tag limit-by">limit 200 by override #` + strconv.FormatInt(lo.ID, 10) + `</span>`
			if body := page(viewerToken); !strings.Contains(body, mark) || strings.Count(body, `class="tag limit-by"`) != 1 {
				t.Errorf("the subject page does not mark recv-24h's limit as override #%d's (alone):\n%s", lo.ID, body)
			}
			// Deleting a block beside it: the confirmation does not say the rules alone decide.
			res, out = f.api(t, http.MethodPost, "/api/v1/overrides", adminToken, `{"policy":"push","subject":{"user":"`+user+`"},"kind":"block","reason":"abuse"}`)
			var bo OverrideJSON
			if err := json.Unmarshal([]byte(out), &bo); err != nil || res.StatusCode != http.StatusCreated {
				t.Fatalf("POST /api/v1/overrides (block) = %d %s", res.StatusCode, out)
			}
			conf = html.UnescapeString(readBody(t, f.do(t, req{path: "/override/delete?" + subjectQuery("push", sdk.Subject{"user": user}) + "&id=" + strconv.FormatInt(bo.ID, 10), bearer: adminToken, cookies: []*http.Cookie{cs}})))
			if !strings.Contains(conf, "with 1 other override still in force") || strings.Contains(conf, "rules alone decide") {
				t.Errorf("the block's confirmation does not name the limit override left in force:\n%s", conf)
			}
		})
	}
}
