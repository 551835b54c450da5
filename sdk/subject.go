package sdk

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
)

// MaxValueLen is the longest subject value, in bytes. Hash longer content
// with Fingerprint.
const MaxValueLen = 256

// Subject is what a decision is about: dimension name -> value, e.g.
// Subject{"user": "u42", "content": Fingerprint(body)}. Each rule is keyed
// by the values of its dimensions; every dimension a rule names must be
// given, with a non-empty value of at most MaxValueLen bytes. Extra
// dimensions are ignored. A nil Subject is an empty one.
//
// Values may hold any bytes: they are escaped in storage keys, and never
// appear in error messages.
type Subject map[string]string

// b32 is RFC 4648 base32 in lower case, unpadded: Fingerprint's and the
// rule ids' alphabet.
var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Fingerprint returns a short stable hash of content (16 lowercase base32
// characters: the first 10 bytes of its SHA-256), for use as a subject
// value when the content itself is long.
func Fingerprint(content string) string {
	sum := sha256.Sum256([]byte(content))
	return b32.EncodeToString(sum[:10])
}

// value returns the checked value of dimension d.
func (s Subject) value(d string) (string, error) {
	v, ok := s[d]
	switch {
	case !ok:
		return "", fmt.Errorf("%w: dimension %q missing", ErrInvalidSubject, d)
	case v == "":
		return "", fmt.Errorf("%w: dimension %q is empty", ErrInvalidSubject, d)
	case len(v) > MaxValueLen:
		return "", fmt.Errorf("%w: dimension %q is %d bytes, want <= %d (use Fingerprint)", ErrInvalidSubject, d, len(v), MaxValueLen)
	}
	return v, nil
}
