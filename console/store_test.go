package console

import (
	"bytes"
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// fixtureSeq numbers the store fixtures on a real clock (their prefixes).
var fixtureSeq atomic.Int64

// storeYAML is the seed policy file with overrides on for push: version 1
// of the store fixtures.
var storeYAML = bytes.Replace(seed.YAML, []byte("    trail: {max: 100, ttl: 24h}\n"), []byte("    trail: {max: 100, ttl: 24h}\n    overrides: true\n"), 1)

// newStoreFixture is newFixture with the console following a policy store
// in the backend, whose version 1 (applied by "setup") is storeYAML, and
// its editor on that store.
func newStoreFixture(t *testing.T, creds []Credential) (*fixture, *policystore.Store) {
	t.Helper()
	return newStoreFixtureOn(t, creds, "memory")
}

// newStoreFixtureOn is newStoreFixture on backend "memory" (the fixture's
// fake clock), "memory-now" (the real clock, for browsers), "redis" or
// "cluster" (the test binary's shared Redis server or 3-master cluster, a
// prefix of the fixture's own; the real clock, which the server's TIME
// follows).
func newStoreFixtureOn(t *testing.T, creds []Credential, backend string) (*fixture, *policystore.Store) {
	t.Helper()
	var mk func(clk *fakeclock.Clock) driver.Backend
	var realClock bool
	switch backend {
	case "memory-now":
		// The real clock: browsers drop cookies that expired by theirs.
		mk = func(*fakeclock.Clock) driver.Backend { return memory.New(nil) }
		realClock = true
	case "redis":
		addr := redistest.Standalone(t)
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		mk = func(*fakeclock.Clock) driver.Backend { return redis.New(c, nil) }
		realClock = true
	case "cluster":
		o := testserver.Patient(redis.NewClientOptions(redistest.Cluster(t)...))
		o.IsClusterMode = true
		c := goredis.NewUniversalClient(o)
		t.Cleanup(func() { c.Close() })
		mk = func(*fakeclock.Clock) driver.Backend { return redis.New(c, nil) }
		realClock = true
	default:
		if backend != "memory" {
			t.Fatalf("newStoreFixtureOn: unknown backend %q", backend)
		}
	}
	if bytes.Equal(storeYAML, seed.YAML) {
		t.Fatal("storeYAML: the seed's push trail line moved")
	}
	var st *policystore.Store
	var lim *sdk.Limiter
	prefix := keyname.DefaultPrefix
	f := newFixtureCfg(t, creds, mk, nil, func(cfg *Config, be driver.Backend, flim *sdk.Limiter) {
		lim = flim
		if realClock {
			// Tests share a Redis server: each fixture its own prefix.
			prefix = "t" + strconv.FormatInt(fixtureSeq.Add(1), 10)
			lim = sdk.New(be, sdk.WithPrefix(prefix), sdk.WithObserver(cfg.Metrics.Observe))
			cfg.Limiter, cfg.Now = lim, time.Now
			cfg.Fleet = fleetOf(be, &fleet.Options{Prefix: prefix})
			cfg.Refresh = 200 * time.Millisecond
		}
		if r, ok := cfg.Fleet.(*fleet.Reader); ok {
			cfg.WhatIf = FleetWhatIf(r)
		}
		st = policystore.New(be, policystore.WithPrefix(prefix))
		ctx := context.Background()
		plan, err := st.Plan(ctx, storeYAML)
		if err != nil {
			t.Fatalf("Plan(storeYAML) error: %v", err)
		}
		if _, err := st.Apply(ctx, plan, "setup", "the seed policies"); err != nil {
			t.Fatalf("Apply(storeYAML) error: %v", err)
		}
		wctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		live, err := st.Watch(wctx, policystore.WatchOptions{})
		if err != nil {
			t.Fatalf("Watch() error: %v", err)
		}
		t.Cleanup(func() { live.Close() })
		cfg.Policies = nil
		cfg.Source = live
		cfg.Store = st
	})
	f.lim, f.prefix = lim, prefix
	return f, st
}

// waitVersion polls until the console runs version n (the Live follows
// the store's notifications, or polls it every second).
func waitVersion(t *testing.T, f *fixture, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.srv.snap().version != n {
		if time.Now().After(deadline) {
			t.Fatalf("the console runs version %d, want %d after 10 s", f.srv.snap().version, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
