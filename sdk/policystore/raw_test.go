package policystore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// takeOnlyBackend is a backend with no optional interface.
type takeOnlyBackend struct{}

func (takeOnlyBackend) Take(context.Context, driver.Request) (driver.Result, error) {
	return driver.Result{}, errors.New("not called")
}

// t0 is the raw tests' start time.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestRawVersions(t *testing.T) {
	ctx := context.Background()
	c := fakeclock.New(t0)
	b := memory.New(&memory.Options{Clock: c})
	st := policystore.New(b, policystore.WithPrefix("push"))

	if _, err := st.GetPolicies(ctx, 0); !errors.Is(err, policystore.ErrNoPolicyVersion) {
		t.Errorf("GetPolicies(0) on an empty store = %v, want ErrNoPolicyVersion", err)
	}
	v1, err := st.PutPolicies(ctx, 0, policystore.PolicyVersion{Document: []byte("a"), By: "ann", Reason: "first"})
	if err != nil || v1.Version != 1 || !v1.At.Equal(t0) || v1.By != "ann" || v1.Reason != "first" {
		t.Fatalf("PutPolicies(0) = %+v, %v, want version 1 at %v by ann", v1, err, t0)
	}
	c.Advance(time.Hour)
	if v2, err := st.PutPolicies(ctx, 1, policystore.PolicyVersion{Document: []byte("b")}); err != nil || v2.Version != 2 || !v2.At.Equal(t0.Add(time.Hour)) {
		t.Fatalf("PutPolicies(1) = %+v, %v, want version 2 an hour later", v2, err)
	}
	_, err = st.PutPolicies(ctx, 1, policystore.PolicyVersion{Document: []byte("c")})
	if !errors.Is(err, policystore.ErrVersionConflict) || !strings.HasPrefix(err.Error(), "policystore: put policies: ") {
		t.Errorf("PutPolicies(1) with current 2 = %v, want ErrVersionConflict named policystore: put policies", err)
	}
	if _, err := st.PutPolicies(ctx, 2, policystore.PolicyVersion{Document: make([]byte, policystore.MaxPolicyDocument+1)}); err == nil || errors.Is(err, policystore.ErrVersionConflict) {
		t.Errorf("PutPolicies of MaxPolicyDocument+1 bytes = %v, want a size error", err)
	}
	if _, err := st.PutPolicies(ctx, -1, policystore.PolicyVersion{}); err == nil {
		t.Error("PutPolicies(-1) = nil error, want one")
	}
	if v, err := st.GetPolicies(ctx, 0); err != nil || string(v.Document) != "b" {
		t.Errorf("GetPolicies(0) = %q, %v, want b", v.Document, err)
	}
	if v, err := st.GetPolicies(ctx, 1); err != nil || string(v.Document) != "a" {
		t.Errorf("GetPolicies(1) = %q, %v, want a", v.Document, err)
	}
	if _, err := st.GetPolicies(ctx, 3); !errors.Is(err, policystore.ErrNoPolicyVersion) || !strings.HasPrefix(err.Error(), "policystore: get policies: ") {
		t.Errorf("GetPolicies(3) = %v, want ErrNoPolicyVersion named policystore: get policies", err)
	}
	h, err := st.PolicyHistory(ctx, 0)
	if err != nil || len(h) != 2 || h[0].Version != 2 || h[1].Version != 1 {
		t.Errorf("PolicyHistory(0) = %v, %v, want versions 2, 1", h, err)
	}

	// One store per prefix, under "<prefix>:{!policies}".
	if v, err := b.GetPolicies(ctx, "push:{!policies}", 0); err != nil || v.Version != 2 {
		t.Errorf("the backend's store push:{!policies} = version %d, %v, want 2", v.Version, err)
	}
	same := policystore.New(b, policystore.WithPrefix("push"))
	if v, err := same.GetPolicies(ctx, 0); err != nil || v.Version != 2 {
		t.Errorf("another Store with the same prefix: GetPolicies(0) = %d, %v, want 2", v.Version, err)
	}
	other := policystore.New(b) // prefix fc
	if _, err := other.GetPolicies(ctx, 0); !errors.Is(err, policystore.ErrNoPolicyVersion) {
		t.Errorf("a Store with another prefix: GetPolicies(0) = %v, want ErrNoPolicyVersion (its own store)", err)
	}
}

func TestRawWatch(t *testing.T) {
	b := memory.New(&memory.Options{Clock: fakeclock.New(t0)})
	writer, reader := policystore.New(b), policystore.New(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := reader.WatchPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for prev := int64(0); prev < 3; prev++ {
		if _, err := writer.PutPolicies(ctx, prev, policystore.PolicyVersion{Document: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		select {
		case v := <-ch:
			if v != prev+1 {
				t.Errorf("watch after put %d = %d, want %d", prev+1, v, prev+1)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("watch after put %d: nothing within 10s", prev+1)
		}
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("watch after cancel delivered a number, want a closed channel")
		}
	case <-time.After(10 * time.Second):
		t.Error("watch not closed within 10s of cancel")
	}
}

func TestRawUnsupported(t *testing.T) {
	ctx := context.Background()
	st := policystore.New(takeOnlyBackend{})
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"put policies", func() error { _, err := st.PutPolicies(ctx, 0, policystore.PolicyVersion{}); return err }},
		{"get policies", func() error { _, err := st.GetPolicies(ctx, 0); return err }},
		{"policy history", func() error { _, err := st.PolicyHistory(ctx, 0); return err }},
		{"watch policies", func() error { _, err := st.WatchPolicies(ctx); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, errors.ErrUnsupported) || !strings.HasPrefix(err.Error(), "policystore: "+tc.name+": ") {
				t.Errorf("%s on a backend without a store = %v, want errors.ErrUnsupported named policystore: %s", tc.name, err, tc.name)
			}
		})
	}
}

// A service applies a new version of its policies and another follows it.
func ExampleStore_PutPolicies() {
	ctx := context.Background()
	b := memory.New(&memory.Options{Clock: fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))})
	admin, follower := policystore.New(b), policystore.New(b)

	watch, _ := follower.WatchPolicies(ctx)
	v, err := admin.PutPolicies(ctx, 0, policystore.PolicyVersion{Document: []byte("policies: …"), By: "ann", Reason: "first version"})
	fmt.Println(v.Version, v.At.Format(time.RFC3339), err)
	fmt.Println("follower sees version", <-watch)

	// A second admin still working from version 0 is refused.
	_, err = admin.PutPolicies(ctx, 0, policystore.PolicyVersion{Document: []byte("stale")})
	fmt.Println(errors.Is(err, policystore.ErrVersionConflict))
	// Output:
	// 1 2026-03-01T12:00:00Z <nil>
	// follower sees version 1
	// true
}

// TestRawNoBackend: a Store without a backend (New(nil)) answers every
// raw call with an error naming it, and Plan and Version too.
func TestRawNoBackend(t *testing.T) {
	ctx := context.Background()
	st := policystore.New(nil)
	for name, call := range map[string]func() error{
		"put policies":   func() error { _, err := st.PutPolicies(ctx, 0, policystore.PolicyVersion{}); return err },
		"get policies":   func() error { _, err := st.GetPolicies(ctx, 0); return err },
		"policy head":    func() error { _, err := st.PolicyHead(ctx); return err },
		"policy history": func() error { _, err := st.PolicyHistory(ctx, 0); return err },
		"watch policies": func() error { _, err := st.WatchPolicies(ctx); return err },
		"plan":           func() error { _, err := st.Plan(ctx, []byte(fileV1)); return err },
		"version":        func() error { _, err := st.Version(ctx, 0); return err },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "no backend") {
			t.Errorf("%s without a backend = %v, want an error naming no backend", name, err)
		}
	}
}
