package console

import (
	"errors"
	"fmt"
	"mime"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/sdk/policystore"
)

// maxBody is the largest request body accepted (API and forms), but on
// the policy editor's routes (bodyLimit).
const maxBody = 64 << 10

// maxEditorBody is the largest request body the policy editor's routes
// accept: a policy document of policystore.MaxPolicyDocument bytes (what the store
// keeps at most, and refuses beyond) in a form, where URL encoding can
// triple it, or in JSON, plus maxBody for the other fields.
const maxEditorBody = 3*policystore.MaxPolicyDocument + maxBody

// editorRoutes are the routes that post a whole policy document.
var editorRoutes = map[string]bool{
	"/policies/preview":      true,
	"/policies/apply":        true,
	"/api/v1/policies/plan":  true,
	"/api/v1/policies/apply": true,
}

// bodyLimit is the largest request body accepted on r's route.
func bodyLimit(r *http.Request) int64 {
	if editorRoutes[r.URL.Path] {
		return maxEditorBody
	}
	return maxBody
}

// tooLarge is the answer to a body over limit bytes: 413, saying the
// limit.
func tooLarge(limit int64) error {
	return echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", limit))
}

// parseForm reads a form post's body, at most bodyLimit bytes: a body
// over the limit is answered 413 (saying the limit), never as a form
// without its fields.
func parseForm(c echo.Context) error {
	req := c.Request()
	limit := bodyLimit(req)
	req.Body = http.MaxBytesReader(c.Response(), req.Body, limit)
	// ParseMultipartForm of a body that is not multipart returns
	// ErrNotMultipart, not ParseForm's error.
	parse := req.ParseForm
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt == "multipart/form-data" {
		parse = func() error { return req.ParseMultipartForm(limit) }
	}
	var mbe *http.MaxBytesError
	if err := parse(); errors.As(err, &mbe) {
		return tooLarge(limit)
	}
	return nil
}
