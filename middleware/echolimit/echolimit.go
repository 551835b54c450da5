// Package echolimit adapts httplimit's middleware to echo (v4): the
// decision, headers and answers are httplimit's; this package only
// passes echo's request and response to it.
//
//	lim, err := httplimit.New(limiter, policy, keyFromRequest)
//	…
//	e.Use(echolimit.Middleware(lim, nil))
package echolimit

import (
	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/middleware/httplimit"
	"github.com/freqcap/freqcap/sdk"
)

// KeyFunc names a request's subject from its echo.Context: path
// parameters (c.Param), c.RealIP(), values set by earlier middleware
// (c.Get). Its errors are answered as httplimit.KeyFunc's.
type KeyFunc func(c echo.Context) (sdk.Subject, error)

// Middleware returns echo middleware that decides each request with l: a
// request it admits runs the next handler, one it refuses gets l's answer
// (429, 400 or 503, or l's handlers') and the handler chain stops. key,
// when not nil, replaces l's own key function.
func Middleware(l *httplimit.Limiter, key KeyFunc) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			var ok bool
			if key != nil {
				s, err := key(c)
				ok = l.AdmitSubject(c.Response(), c.Request(), s, err)
			} else {
				ok = l.Admit(c.Response(), c.Request())
			}
			if !ok {
				return nil
			}
			return next(c)
		}
	}
}
