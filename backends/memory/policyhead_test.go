package memory

import (
	"context"
	"errors"
	"testing"

	"github.com/freqcap/freqcap/sdk/driver"
)

// TestPolicyReadBounds: the head of a store reads without the document;
// a document larger than driver.MaxPolicyDocument (which only a test can
// store: PutPolicies refuses it) is refused on read.
func TestPolicyReadBounds(t *testing.T) {
	ctx := context.Background()
	b := New(nil)
	const key = "t:{!policies}"
	if _, err := b.PolicyHead(ctx, key); !errors.Is(err, driver.ErrNoPolicyVersion) {
		t.Errorf("PolicyHead(empty) = %v, want ErrNoPolicyVersion", err)
	}
	if _, err := b.PutPolicies(ctx, key, 0, driver.PolicyVersion{Document: []byte("doc"), By: "ann"}); err != nil {
		t.Fatal(err)
	}
	h, err := b.PolicyHead(ctx, key)
	if err != nil || h.Version != 1 || h.By != "ann" || h.At.IsZero() || h.Document != nil {
		t.Errorf("PolicyHead = %+v, %v; want version 1 by ann, no document", h, err)
	}
	// By hand: an oversize version 2.
	b.policies.mu.Lock()
	s := b.policies.store(key, false)
	s.versions = append(s.versions, driver.PolicyVersion{Version: 2, Document: make([]byte, driver.MaxPolicyDocument+1)})
	b.policies.mu.Unlock()
	for _, n := range []int64{0, 2} {
		if _, err := b.GetPolicies(ctx, key, n); !errors.Is(err, driver.ErrPolicyTooLarge) {
			t.Errorf("GetPolicies(%d) of an oversize document = %v, want ErrPolicyTooLarge", n, err)
		}
	}
	if _, err := b.PutPolicies(ctx, key, 2, driver.PolicyVersion{Document: make([]byte, driver.MaxPolicyDocument+1)}); !errors.Is(err, driver.ErrPolicyTooLarge) {
		t.Errorf("PutPolicies(oversize) = %v, want ErrPolicyTooLarge", err)
	}
}
