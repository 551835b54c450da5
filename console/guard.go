package console

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/internal/lockout"
)

// tryAuth judges one authentication attempt through the console's
// lockout.Guard (failed attempts counted per remote address, and basic
// auth's also per user name tried; see package lockout for the rule).
// It answers a 429 error with Retry-After, without calling verify, when
// a key is locked out; else verify's answer, and for a failure the count
// and the lockout it starts.
func (s *Server) tryAuth(c echo.Context, verify func() bool, keys ...lockout.Key) (lockout.Verdict, error) {
	v := s.guard.Try(verify, keys...)
	if v.Locked <= 0 {
		return v, nil
	}
	secs := strconv.FormatInt(int64((v.Locked+time.Second-1)/time.Second), 10)
	c.Response().Header().Set("Retry-After", secs)
	who := "from your address"
	if v.Key.User {
		who = "for this user name"
	}
	return v, echo.NewHTTPError(http.StatusTooManyRequests, "too many failed sign-in attempts "+who+": try again in "+secs+"s")
}
