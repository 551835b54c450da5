package memory_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

const policyKey = "fc:{!policies}"

func putPolicies(t *testing.T, b *memory.Backend, prev int64, doc string) driver.PolicyVersion {
	t.Helper()
	v, err := b.PutPolicies(context.Background(), policyKey, prev, driver.PolicyVersion{Document: []byte(doc), By: "ann", Reason: "r" + doc})
	if err != nil {
		t.Fatalf("PutPolicies(prev %d) error: %v", prev, err)
	}
	return v
}

func TestPolicyStoreVersions(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := fakeclock.New(t0)
	b := memory.New(&memory.Options{Clock: clock})
	ctx := context.Background()

	if _, err := b.GetPolicies(ctx, policyKey, 0); !errors.Is(err, driver.ErrNoPolicyVersion) {
		t.Errorf("GetPolicies(0) on an empty store = %v, want ErrNoPolicyVersion", err)
	}
	if h, err := b.PolicyHistory(ctx, policyKey, 0); err != nil || len(h) != 0 {
		t.Errorf("PolicyHistory on an empty store = %v, %v, want none", h, err)
	}
	v1 := putPolicies(t, b, 0, "one")
	clock.Advance(time.Minute)
	v2 := putPolicies(t, b, 1, "two")
	clock.Advance(time.Minute)
	v3 := putPolicies(t, b, 2, "three")
	for i, v := range []driver.PolicyVersion{v1, v2, v3} {
		wantAt := t0.Add(time.Duration(i) * time.Minute)
		if v.Version != int64(i+1) || !v.At.Equal(wantAt) || v.By != "ann" {
			t.Errorf("PutPolicies #%d = {version %d at %v by %q}, want {%d %v ann}", i+1, v.Version, v.At, v.By, i+1, wantAt)
		}
	}
	if _, err := b.PutPolicies(ctx, policyKey, 2, driver.PolicyVersion{Document: []byte("late")}); !errors.Is(err, driver.ErrVersionConflict) {
		t.Errorf("PutPolicies(prev 2) with current 3 = %v, want ErrVersionConflict", err)
	}
	if _, err := b.PutPolicies(ctx, policyKey, 4, driver.PolicyVersion{}); !errors.Is(err, driver.ErrVersionConflict) {
		t.Errorf("PutPolicies(prev 4) with current 3 = %v, want ErrVersionConflict", err)
	}
	if _, err := b.PutPolicies(ctx, policyKey, 3, driver.PolicyVersion{Document: make([]byte, driver.MaxPolicyDocument+1)}); err == nil || errors.Is(err, driver.ErrVersionConflict) {
		t.Errorf("PutPolicies of MaxPolicyDocument+1 bytes = %v, want a size error", err)
	}

	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "three"}, {1, "one"}, {2, "two"}, {3, "three"}} {
		v, err := b.GetPolicies(ctx, policyKey, tc.n)
		if err != nil || string(v.Document) != tc.want || v.Reason != "r"+tc.want {
			t.Errorf("GetPolicies(%d) = %q (reason %q), %v, want %q", tc.n, v.Document, v.Reason, err, tc.want)
		}
	}
	for _, n := range []int64{-1, 4, 100} {
		if _, err := b.GetPolicies(ctx, policyKey, n); !errors.Is(err, driver.ErrNoPolicyVersion) {
			t.Errorf("GetPolicies(%d) = %v, want ErrNoPolicyVersion", n, err)
		}
	}
	if _, err := b.GetPolicies(ctx, "fc:{!other}", 1); !errors.Is(err, driver.ErrNoPolicyVersion) {
		t.Errorf("GetPolicies on another key = %v, want ErrNoPolicyVersion (one store per key)", err)
	}

	for _, tc := range []struct {
		max  int
		want []int64
	}{{0, []int64{3, 2, 1}}, {-1, []int64{3, 2, 1}}, {2, []int64{3, 2}}, {5, []int64{3, 2, 1}}} {
		h, err := b.PolicyHistory(ctx, policyKey, tc.max)
		var got []int64
		for _, v := range h {
			got = append(got, v.Version)
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("PolicyHistory(%d) = %v, %v, want %v", tc.max, got, err, tc.want)
		}
	}
}

// TestPolicyStoreCopies: the store keeps its own copy of a document and
// hands out copies.
func TestPolicyStoreCopies(t *testing.T) {
	b := memory.New(nil)
	doc := []byte("rules")
	if _, err := b.PutPolicies(context.Background(), policyKey, 0, driver.PolicyVersion{Document: doc}); err != nil {
		t.Fatal(err)
	}
	doc[0] = 'X'
	v, _ := b.GetPolicies(context.Background(), policyKey, 1)
	v.Document[1] = 'Y'
	if v2, _ := b.GetPolicies(context.Background(), policyKey, 1); !bytes.Equal(v2.Document, []byte("rules")) {
		t.Errorf("GetPolicies(1) after the callers changed their slices = %q, want %q", v2.Document, "rules")
	}
}

// TestPolicyStoreConcurrentPuts: of many puts on the same previous version,
// exactly one wins, round after round.
func TestPolicyStoreConcurrentPuts(t *testing.T) {
	b := memory.New(nil)
	const writers, rounds = 8, 20
	for round := int64(0); round < rounds; round++ {
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			won, lost int
		)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := b.PutPolicies(context.Background(), policyKey, round, driver.PolicyVersion{Document: []byte(fmt.Sprint(w))})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, driver.ErrVersionConflict):
					lost++
				default:
					t.Errorf("PutPolicies error: %v", err)
				}
			}()
		}
		wg.Wait()
		if won != 1 || lost != writers-1 {
			t.Fatalf("round %d: %d puts won, %d conflicted, want 1 and %d", round, won, lost, writers-1)
		}
	}
	if h, _ := b.PolicyHistory(context.Background(), policyKey, 0); len(h) != rounds {
		t.Errorf("PolicyHistory = %d versions, want %d", len(h), rounds)
	}
}

// receive waits for a number on ch, failing the test when none comes
// within a generous deadline or ch is closed.
func receive(t *testing.T, ch <-chan int64) int64 {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed, want a version")
		}
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no version within 10s")
	}
	return 0
}

func TestPolicyStoreWatch(t *testing.T) {
	b := memory.New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	putPolicies(t, b, 0, "one")
	w1, err := b.WatchPolicies(ctx, policyKey)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := b.WatchPolicies(ctx, policyKey)
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.WatchPolicies(ctx, "fc:{!other}")
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []<-chan int64{w1, w2} {
		if got := receive(t, w); got != 1 {
			t.Errorf("watcher %d's first number = %d, want the current version 1", i, got)
		}
	}
	for prev := int64(1); prev < 5; prev++ {
		putPolicies(t, b, prev, "next")
		for i, w := range []<-chan int64{w1, w2} {
			if got := receive(t, w); got != prev+1 {
				t.Errorf("watcher %d after put #%d = %d, want %d", i, prev+1, got, prev+1)
			}
		}
	}
	select {
	case v := <-other:
		t.Errorf("a watcher of another key received %d, want nothing", v)
	default:
	}

	// A reader that falls behind finds the latest version, not a queue.
	putPolicies(t, b, 5, "six")
	putPolicies(t, b, 6, "seven")
	if got := receive(t, w1); got != 7 {
		t.Errorf("a late reader received %d, want the latest, 7", got)
	}
	receive(t, w2)

	cancel()
	for i, w := range []<-chan int64{w1, w2, other} {
		select {
		case v, ok := <-w:
			if ok {
				t.Errorf("watcher %d after cancel received %d, want a closed channel", i, v)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("watcher %d not closed within 10s of cancel", i)
		}
	}
	// Puts after the close neither block nor panic.
	putPolicies(t, b, 7, "eight")

	if _, err := b.WatchPolicies(ctx, policyKey); err == nil {
		t.Error("WatchPolicies on a done context = nil error, want its error")
	}
}

// TestPolicyStoreWatchCancelRace: watchers cancelled while puts notify
// them: no send on a closed channel, every channel closed.
func TestPolicyStoreWatchCancelRace(t *testing.T) {
	b := memory.New(nil)
	var chans []<-chan int64
	var cancels []context.CancelFunc
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := b.WatchPolicies(ctx, policyKey)
		if err != nil {
			t.Fatal(err)
		}
		chans, cancels = append(chans, ch), append(cancels, cancel)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for prev := int64(0); prev < 200; prev++ {
			if _, err := b.PutPolicies(context.Background(), policyKey, prev, driver.PolicyVersion{}); err != nil {
				t.Errorf("PutPolicies: %v", err)
				return
			}
		}
	}()
	for _, cancel := range cancels {
		cancel()
	}
	wg.Wait()
	for i, ch := range chans {
		deadline := time.After(10 * time.Second)
	drain:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break drain
				}
			case <-deadline:
				t.Fatalf("watcher %d not closed within 10s of cancel", i)
			}
		}
	}
}
