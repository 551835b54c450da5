package demo

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
)

// counts counts a limiter's take decisions per policy.
type counts struct {
	mu              sync.Mutex
	allowed, denied map[string]int
}

func (c *counts) observe(e sdk.Event) {
	if e.Op != "take" || e.Err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Decision.Allowed {
		c.allowed[e.Policy]++
	} else {
		c.denied[e.Policy]++
	}
}

func (c *counts) get(policy string) (allowed, denied int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.allowed[policy], c.denied[policy]
}

// TestDemoProducesDenials runs the demo for ten seconds of synctest's
// fake time: push sees allowed and denied decisions, the hot user has a
// denial trail, and after Close no decision is made.
func TestDemoProducesDenials(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pols, err := seed.Policies()
		if err != nil {
			t.Fatal(err)
		}
		c := &counts{allowed: map[string]int{}, denied: map[string]int{}}
		lim := sdk.New(memory.New(nil), sdk.WithObserver(c.observe))
		d := Start(lim, pols, Options{Rate: 500})
		time.Sleep(10 * time.Second) // fake time: 5000 ticks
		synctest.Wait()
		if a, n := c.get("push"); a == 0 || n == 0 {
			t.Fatalf("push after 10s of demo traffic: %d allowed, %d denied, want both > 0", a, n)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
		a0, n0 := c.get("push")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if a, n := c.get("push"); a != a0 || n != n0 {
			t.Errorf("decisions after Close: before %d/%d, after %d/%d", a0, n0, a, n)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("second Close() = %v", err)
		}
		ins, err := lim.Admin().Inspect(context.Background(), pols[0], sdk.Subject{"user": Users[0]})
		if err != nil || len(ins.Denials) == 0 {
			t.Errorf("hot demo user has no denial trail: %+v, %v", ins, err)
		}
	})
}
