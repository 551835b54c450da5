package console

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

// policyBackend is a backend's policy store under one key, as
// policyfile.Store takes it.
type policyBackend struct {
	ps  driver.PolicyStore
	key string
}

func (b policyBackend) PutPolicies(ctx context.Context, prev int64, v driver.PolicyVersion) (driver.PolicyVersion, error) {
	return b.ps.PutPolicies(ctx, b.key, prev, v)
}

func (b policyBackend) GetPolicies(ctx context.Context, n int64) (driver.PolicyVersion, error) {
	return b.ps.GetPolicies(ctx, b.key, n)
}

func (b policyBackend) PolicyHistory(ctx context.Context, max int) ([]driver.PolicyVersion, error) {
	return b.ps.PolicyHistory(ctx, b.key, max)
}

func (b policyBackend) WatchPolicies(ctx context.Context) (<-chan int64, error) {
	return b.ps.WatchPolicies(ctx, b.key)
}

// storeYAML is the seed policy file with overrides on for push: version 1
// of the store fixtures.
var storeYAML = bytes.Replace(seed.YAML, []byte("    trail: {max: 100, ttl: 24h}\n"), []byte("    trail: {max: 100, ttl: 24h}\n    overrides: true\n"), 1)

// newStoreFixture is newFixture with the console following a policy store
// in the backend, whose version 1 (applied by "setup") is storeYAML, and
// its editor on that store.
func newStoreFixture(t *testing.T, creds []Credential) (*fixture, *policyfile.Store) {
	t.Helper()
	if bytes.Equal(storeYAML, seed.YAML) {
		t.Fatal("storeYAML: the seed's push trail line moved")
	}
	var st *policyfile.Store
	f := newFixtureCfg(t, creds, nil, nil, func(cfg *Config, be sdk.Backend, lim *sdk.Limiter) {
		ps, ok := be.(driver.PolicyStore)
		if !ok {
			t.Fatal("the memory backend is no driver.PolicyStore")
		}
		st = policyfile.NewStore(policyBackend{ps, sdk.DefaultPrefix + ":{!policies}"})
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
		live, err := st.Watch(wctx, policyfile.WatchOptions{})
		if err != nil {
			t.Fatalf("Watch() error: %v", err)
		}
		t.Cleanup(func() { live.Close() })
		cfg.Policies = nil
		cfg.Source = LiveSource(live)
		cfg.Editor = StoreEditor(st)
	})
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
