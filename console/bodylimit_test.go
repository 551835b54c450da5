package console

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/sdk/policystore"
)

// TestBodyLimit: the policy editor takes a document up to the store's
// limit (policystore.MaxPolicyDocument), as a form and as JSON, far past the
// 64 KiB other bodies get; a body over its route's limit is answered 413
// saying the limit, never "missing or invalid CSRF token".
func TestBodyLimit(t *testing.T) {
	f, _ := newStoreFixture(t, testCredentials())
	cs := f.csrf(t)
	// A valid document of about 300 KB: the store's YAML and a comment.
	var pad strings.Builder
	for pad.Len() < 300_000 {
		pad.WriteString("# a comment line, long enough to pad the document past 64 KiB: x=1 & y=2\n")
	}
	big := string(storeYAML) + pad.String()
	if len(big) > policystore.MaxPolicyDocument {
		t.Fatalf("the padded document is %d bytes, over MaxPolicyDocument", len(big))
	}
	over := strings.Repeat("#", maxEditorBody) // a form of it is over the editor's limit
	post := func(path string, form url.Values) (int, string) {
		t.Helper()
		form.Set(csrfField, f.tok(cs))
		res := f.do(t, req{method: http.MethodPost, path: path, form: form, bearer: adminToken, cookies: []*http.Cookie{cs}})
		return res.StatusCode, html.UnescapeString(readBody(t, res))
	}
	api := func(path, body string) (int, string) {
		t.Helper()
		res := f.do(t, req{method: http.MethodPost, path: path, body: body, bearer: adminToken, header: map[string]string{"Content-Type": "application/json"}})
		return res.StatusCode, readBody(t, res)
	}
	doc := func(yaml string) string {
		b, err := json.Marshal(map[string]any{"yaml": yaml})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	editorLimit := "larger than " + strconv.Itoa(maxEditorBody) + " bytes"
	formLimit := "larger than " + strconv.Itoa(maxBody) + " bytes"
	for _, tc := range []struct {
		name   string
		send   func() (int, string)
		status int
		want   string // in the body
	}{
		{"preview of a large document", func() (int, string) { return post("/policies/preview", url.Values{"source": {big}}) }, http.StatusOK, `id="plan`},
		{"preview over the editor's limit", func() (int, string) { return post("/policies/preview", url.Values{"source": {over}}) }, http.StatusRequestEntityTooLarge, editorLimit},
		{"apply over the editor's limit", func() (int, string) {
			return post("/policies/apply", url.Values{"source": {over}, "base": {"1"}, "reason": {"r"}})
		}, http.StatusRequestEntityTooLarge, editorLimit},
		{"another form over 64 KiB", func() (int, string) {
			return post("/fingerprint", url.Values{"text": {strings.Repeat("x", maxBody)}, "dimension": {"user"}})
		}, http.StatusRequestEntityTooLarge, formLimit},
		{"API plan of a large document", func() (int, string) { return api("/api/v1/policies/plan", doc(big)) }, http.StatusOK, `"base"`},
		{"API plan over the editor's limit", func() (int, string) { return api("/api/v1/policies/plan", doc(over)) }, http.StatusRequestEntityTooLarge, editorLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := tc.send()
			if status != tc.status || !strings.Contains(body, tc.want) {
				if len(body) > 2000 {
					body = body[:2000] + "…"
				}
				t.Errorf("POST = %d, want %d with %q:\n%s", status, tc.status, tc.want, body)
			}
			if strings.Contains(body, "CSRF") {
				t.Errorf("the answer speaks of CSRF:\n%s", body)
			}
		})
	}
}
