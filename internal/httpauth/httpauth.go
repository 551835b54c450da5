// Package httpauth is what freqcap's two HTTP servers, serve and the
// console, share about who may call them: the loopback test that lets a
// server without credentials answer local callers only, and the
// comparison of secrets in constant time.
package httpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// Loopback reports whether host (a name or an IP, no port; an IPv6
// address may be bracketed) names the loopback interface: localhost,
// 127.0.0.0/8, ::1.
func Loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// LoopbackHostport reports whether a Host header or a remote address
// ("host:port", or a bare host) names the loopback interface. An empty
// host does not.
func LoopbackHostport(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return host != "" && Loopback(host)
}

// LoopbackAddr reports whether a listen address ("host:port") is on the
// loopback interface. An empty host (":8080", every interface) is not;
// an address without a port is an error (net.SplitHostPort's).
func LoopbackAddr(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	return Loopback(host), nil
}

// Digest is a secret's SHA-256. Comparing digests takes the same time
// whatever the secrets' lengths, which comparing secrets does not.
type Digest [sha256.Size]byte

// DigestOf returns secret's digest.
func DigestOf(secret string) Digest { return sha256.Sum256([]byte(secret)) }

// Match returns the index of the digest of secret among digests, or -1.
// It compares with every digest, in constant time, with no early exit.
func Match(digests []Digest, secret string) int {
	d := DigestOf(secret)
	found := -1
	for i := range digests {
		if subtle.ConstantTimeCompare(d[:], digests[i][:]) == 1 {
			found = i
		}
	}
	return found
}

// Equal reports whether two secrets are equal, in a time that depends on
// neither their contents nor their lengths.
func Equal(a, b string) bool {
	da, db := DigestOf(a), DigestOf(b)
	return subtle.ConstantTimeCompare(da[:], db[:]) == 1
}

// Bearer returns the token of an "Authorization: Bearer TOKEN" header
// (the scheme in any case, the token trimmed of spaces), and whether
// there is a non-empty one.
func Bearer(h http.Header) (string, bool) {
	scheme, tok, ok := strings.Cut(h.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
