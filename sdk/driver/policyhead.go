package driver

import (
	"context"
	"errors"
	"fmt"
)

// PolicyHeader is implemented by PolicyStores that read a store's current
// version without its document: a follower polls the head and reads the
// document only when the head changed (sdk/policystore's Store.PolicyHead). The
// memory and Redis backends implement it.
type PolicyHeader interface {
	// PolicyHead returns key's current version without its Document:
	// Version, At, By and Reason; ErrNoPolicyVersion when the store is
	// empty. When the current version number names a version the store
	// does not hold (deleted by hand), or one whose fields were changed by
	// hand, it returns that number with a zero At and no error: the number
	// is what the next PutPolicies compares with (GetPolicies says what is
	// wrong with the version).
	PolicyHead(ctx context.Context, key string) (PolicyVersion, error)
}

// ErrPolicyTooLarge is returned (wrapped) by PutPolicies for a document
// larger than MaxPolicyDocument, and by GetPolicies for a stored one (put
// there by hand): a store refuses to read it, rather than hand it to
// every follower.
var ErrPolicyTooLarge = errors.New("freqcap: policy store: document larger than MaxPolicyDocument")

// CheckPolicyDocument returns an error wrapping ErrPolicyTooLarge when a
// document of size bytes is larger than MaxPolicyDocument, else nil. Puts
// check a document before storing it and reads before reading it.
func CheckPolicyDocument(size int64) error {
	if size > MaxPolicyDocument {
		return fmt.Errorf("%w: the document is %d bytes, more than %d", ErrPolicyTooLarge, size, MaxPolicyDocument)
	}
	return nil
}

// ErrMalformedPolicyVersion is returned (wrapped) by a PolicyStore's reads
// for a version, or a current version number, whose stored fields are not
// the ones its puts write (changed by hand): it cannot be read, and the
// store's other versions can.
var ErrMalformedPolicyVersion = errors.New("freqcap: policy store: malformed version")
