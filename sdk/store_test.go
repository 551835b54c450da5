package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// takeOnlyBackend is a backend with no optional interface.
type takeOnlyBackend struct{}

func (takeOnlyBackend) Take(context.Context, driver.Request) (driver.Result, error) {
	return driver.Result{}, errors.New("not called")
}

func TestPolicyStoreLimiter(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	b := memory.New(&memory.Options{Clock: c})
	lim := sdk.New(b, sdk.WithPrefix("push"))

	if _, err := lim.GetPolicies(ctx, 0); !errors.Is(err, sdk.ErrNoPolicyVersion) {
		t.Errorf("GetPolicies(0) on an empty store = %v, want ErrNoPolicyVersion", err)
	}
	v1, err := lim.PutPolicies(ctx, 0, sdk.PolicyVersion{Document: []byte("a"), By: "ann", Reason: "first"})
	if err != nil || v1.Version != 1 || !v1.At.Equal(t0) || v1.By != "ann" || v1.Reason != "first" {
		t.Fatalf("PutPolicies(0) = %+v, %v, want version 1 at %v by ann", v1, err, t0)
	}
	c.Advance(time.Hour)
	if v2, err := lim.PutPolicies(ctx, 1, sdk.PolicyVersion{Document: []byte("b")}); err != nil || v2.Version != 2 || !v2.At.Equal(t0.Add(time.Hour)) {
		t.Fatalf("PutPolicies(1) = %+v, %v, want version 2 an hour later", v2, err)
	}
	_, err = lim.PutPolicies(ctx, 1, sdk.PolicyVersion{Document: []byte("c")})
	if !errors.Is(err, sdk.ErrVersionConflict) || !strings.HasPrefix(err.Error(), "sdk: put policies: ") {
		t.Errorf("PutPolicies(1) with current 2 = %v, want ErrVersionConflict named sdk: put policies", err)
	}
	if _, err := lim.PutPolicies(ctx, 2, sdk.PolicyVersion{Document: make([]byte, sdk.MaxPolicyDocument+1)}); err == nil || errors.Is(err, sdk.ErrVersionConflict) {
		t.Errorf("PutPolicies of MaxPolicyDocument+1 bytes = %v, want a size error", err)
	}
	if _, err := lim.PutPolicies(ctx, -1, sdk.PolicyVersion{}); err == nil {
		t.Error("PutPolicies(-1) = nil error, want one")
	}
	if v, err := lim.GetPolicies(ctx, 0); err != nil || string(v.Document) != "b" {
		t.Errorf("GetPolicies(0) = %q, %v, want b", v.Document, err)
	}
	if v, err := lim.GetPolicies(ctx, 1); err != nil || string(v.Document) != "a" {
		t.Errorf("GetPolicies(1) = %q, %v, want a", v.Document, err)
	}
	if _, err := lim.GetPolicies(ctx, 3); !errors.Is(err, sdk.ErrNoPolicyVersion) || !strings.HasPrefix(err.Error(), "sdk: get policies: ") {
		t.Errorf("GetPolicies(3) = %v, want ErrNoPolicyVersion named sdk: get policies", err)
	}
	h, err := lim.PolicyHistory(ctx, 0)
	if err != nil || len(h) != 2 || h[0].Version != 2 || h[1].Version != 1 {
		t.Errorf("PolicyHistory(0) = %v, %v, want versions 2, 1", h, err)
	}

	// One store per prefix, under "<prefix>:{!policies}".
	if v, err := b.GetPolicies(ctx, "push:{!policies}", 0); err != nil || v.Version != 2 {
		t.Errorf("the backend's store push:{!policies} = version %d, %v, want 2", v.Version, err)
	}
	same := sdk.New(b, sdk.WithPrefix("push"))
	if v, err := same.GetPolicies(ctx, 0); err != nil || v.Version != 2 {
		t.Errorf("another Limiter with the same prefix: GetPolicies(0) = %d, %v, want 2", v.Version, err)
	}
	other := sdk.New(b) // prefix fc
	if _, err := other.GetPolicies(ctx, 0); !errors.Is(err, sdk.ErrNoPolicyVersion) {
		t.Errorf("a Limiter with another prefix: GetPolicies(0) = %v, want ErrNoPolicyVersion (its own store)", err)
	}
}

func TestPolicyStoreLimiterWatch(t *testing.T) {
	b := memory.New(&memory.Options{Clock: newClock(t0)})
	writer, reader := sdk.New(b), sdk.New(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := reader.WatchPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for prev := int64(0); prev < 3; prev++ {
		if _, err := writer.PutPolicies(ctx, prev, sdk.PolicyVersion{Document: []byte("x")}); err != nil {
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

func TestPolicyStoreUnsupported(t *testing.T) {
	ctx := context.Background()
	lim := sdk.New(takeOnlyBackend{})
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"put policies", func() error { _, err := lim.PutPolicies(ctx, 0, sdk.PolicyVersion{}); return err }},
		{"get policies", func() error { _, err := lim.GetPolicies(ctx, 0); return err }},
		{"policy history", func() error { _, err := lim.PolicyHistory(ctx, 0); return err }},
		{"watch policies", func() error { _, err := lim.WatchPolicies(ctx); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, errors.ErrUnsupported) || !strings.HasPrefix(err.Error(), "sdk: "+tc.name+": ") {
				t.Errorf("%s on a backend without a store = %v, want errors.ErrUnsupported named sdk: %s", tc.name, err, tc.name)
			}
		})
	}
}

// A service applies a new version of its policies and another follows it.
func ExampleLimiter_PutPolicies() {
	ctx := context.Background()
	b := memory.New(&memory.Options{Clock: newClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))})
	admin, follower := sdk.New(b), sdk.New(b)

	watch, _ := follower.WatchPolicies(ctx)
	v, err := admin.PutPolicies(ctx, 0, sdk.PolicyVersion{Document: []byte("policies: …"), By: "ann", Reason: "first version"})
	fmt.Println(v.Version, v.At.Format(time.RFC3339), err)
	fmt.Println("follower sees version", <-watch)

	// A second admin still working from version 0 is refused.
	_, err = admin.PutPolicies(ctx, 0, sdk.PolicyVersion{Document: []byte("stale")})
	fmt.Println(errors.Is(err, sdk.ErrVersionConflict))
	// Output:
	// 1 2026-03-01T12:00:00Z <nil>
	// follower sees version 1
	// true
}
