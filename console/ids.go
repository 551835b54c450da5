package console

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/sdk"
)

// checkSubject applies the one rule for subject values, in the pages and
// the API alike: a value is taken exactly as given (no trimming: the SDK
// accepts " 42" and keys it apart from "42"), and must be valid UTF-8
// without U+FFFD. Invalid bytes cannot travel in JSON (a decoder replaces
// them with U+FFFD, which would make two byte strings one subject), so
// neither door accepts them. The error names the dimension, never the
// value.
func checkSubject(s sdk.Subject) error {
	dims := make([]string, 0, len(s))
	for d := range s {
		dims = append(dims, d)
	}
	sort.Strings(dims)
	for _, d := range dims {
		v := s[d]
		if !utf8.ValidString(v) || strings.ContainsRune(v, utf8.RuneError) {
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("dimension %q: the value is not valid UTF-8 (or holds U+FFFD)", d))
		}
	}
	return nil
}
