// Package ginlimit adapts httplimit's middleware to gin: the decision,
// headers and answers are httplimit's; this package only passes gin's
// request and response to it.
//
//	lim, err := httplimit.New(limiter, policy, keyFromRequest)
//	…
//	router.Use(ginlimit.Middleware(lim, nil))
package ginlimit

import (
	"github.com/gin-gonic/gin"

	"github.com/freqcap/freqcap/middleware/httplimit"
	"github.com/freqcap/freqcap/sdk"
)

// KeyFunc names a request's subject from its *gin.Context: path
// parameters (c.Param), c.ClientIP(), values set by earlier middleware
// (c.Get). Its errors are answered as httplimit.KeyFunc's.
type KeyFunc func(c *gin.Context) (sdk.Subject, error)

// Middleware returns a gin handler that decides each request with l: a
// request it admits goes on (c.Next), one it refuses gets l's answer
// (429, 400 or 503, or l's handlers') and the chain is aborted. key, when
// not nil, replaces l's own key function.
func Middleware(l *httplimit.Limiter, key KeyFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		var ok bool
		if key != nil {
			s, err := key(c)
			ok = l.AdmitSubject(c.Writer, c.Request, s, err)
		} else {
			ok = l.Admit(c.Writer, c.Request)
		}
		if !ok {
			c.Abort()
			return
		}
		c.Next()
	}
}
