package console

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// TestEditorUnreadableVersion: with the store's current version written
// by a newer freqcap (memory) or missing, its number pointing nowhere
// (Redis, by hand), the editor opens on version 1 (the newest that
// loads) and says why; a preview is planned against it with no re-key,
// and applies; a rollback over another unreadable version too; every
// rule keeps epoch 0 (no count restarts); the unreadable version's own
// page is 422 saying so, never 503.
func TestEditorUnreadableVersion(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			f, st := newStoreFixtureOn(t, testCredentials(), backend)
			var rdb *goredis.Client
			if backend == "redis" {
				rdb = goredis.NewClient(&goredis.Options{Addr: redistest.Standalone(t)})
				t.Cleanup(func() { rdb.Close() })
			}
			// breakVersion makes version n (after n-1) one that does not load.
			breakVersion := func(n int64) {
				t.Helper()
				if rdb != nil {
					if err := rdb.Set(ctx, f.prefix+":{!policies}", n, 0).Err(); err != nil {
						t.Fatal(err)
					}
					return
				}
				if _, err := st.PutPolicies(ctx, n-1, policystore.PolicyVersion{Document: []byte(`{"format":"freqcap.policies/v9"}`), By: "freqcap-next"}); err != nil {
					t.Fatal(err)
				}
			}
			cs := f.csrf(t)
			call := func(method, path string, form url.Values, status int) (*http.Response, string) {
				t.Helper()
				r := req{method: method, path: path, bearer: adminToken, cookies: []*http.Cookie{cs}}
				if form != nil {
					form.Set(csrfField, f.tok(cs))
					r.form = form
				}
				res := f.do(t, r)
				body := html.UnescapeString(readBody(t, res))
				if res.StatusCode != status {
					t.Fatalf("%s %s = %d, want %d:\n%s", method, path, res.StatusCode, status, body)
				}
				return res, body
			}
			breakVersion(2)
			_, body := call(http.MethodGet, "/policies/edit", nil, http.StatusOK)
			for _, want := range []string{`id="editor-unloadable"`, "current version 2 does not load", "version 2", "Shown is version 1", `id="current-version">1<`, "overrides: true"} {
				if !strings.Contains(body, want) {
					t.Errorf("the editor over an unreadable version 2 lacks %q:\n%s", want, body)
				}
			}
			_, body = call(http.MethodPost, "/policies/preview", url.Values{"source": {string(storeYAML)}}, http.StatusOK)
			for _, want := range []string{`name="base" value="2"`, "made against version 1", `id="apply">Apply as version 3<`} {
				if !strings.Contains(body, want) {
					t.Errorf("the preview over an unreadable version 2 lacks %q:\n%s", want, body)
				}
			}
			if strings.Contains(body, `id="rekey"`) {
				t.Errorf("the preview over an unreadable version 2 asks to confirm a re-key:\n%s", body)
			}
			call(http.MethodPost, "/policies/apply", url.Values{"source": {string(storeYAML)}, "base": {"2"}, "reason": {"replace version 2"}}, http.StatusSeeOther)
			waitVersion(t, f, 3)

			breakVersion(4)
			if backend == "memory" {
				_, body = call(http.MethodGet, "/policies/version?n=4", nil, http.StatusUnprocessableEntity)
				if !strings.Contains(body, "version 4 does not load") {
					t.Errorf("the page of unreadable version 4 does not say so:\n%s", body)
				}
			}
			_, body = call(http.MethodGet, "/policies/rollback?n=1", nil, http.StatusOK)
			if strings.Contains(body, `id="rekey"`) || !strings.Contains(body, "made against version 3") {
				t.Errorf("the rollback page over an unreadable version 4 asks to re-key or does not say what it is made against:\n%s", body)
			}
			call(http.MethodPost, "/policies/rollback", url.Values{"n": {"1"}, "base": {"4"}, "reason": {"back"}, "confirm": {"yes"}}, http.StatusSeeOther)
			waitVersion(t, f, 5)
			for _, n := range []int64{3, 5} {
				v, err := st.Version(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				ps, err := v.Policies()
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range ps {
					for _, r := range p.Rules() {
						if r.Epoch != 0 {
							t.Errorf("version %d: %s/%s has epoch %d, want 0 (version 1's: its counts carry)", n, p.Name(), r.Name, r.Epoch)
						}
					}
				}
			}
		})
	}
}
