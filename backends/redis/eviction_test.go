package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// evictingPolicies are every maxmemory-policy of Redis 7 but noeviction:
// each may evict freqcap's keys, which all have a TTL.
var evictingPolicies = []string{"allkeys-lru", "volatile-lru", "volatile-ttl", "allkeys-random", "volatile-random", "allkeys-lfu", "volatile-lfu"}

// evictionClient returns a client of the dedicated server s.
func evictionClient(t *testing.T, addrs ...string) goredis.UniversalClient {
	t.Helper()
	o := testserver.Patient(NewClientOptions(addrs...))
	var c goredis.UniversalClient
	if len(addrs) > 1 {
		c = goredis.NewClusterClient(o.Cluster())
	} else {
		c = goredis.NewClient(o.Simple())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func evictionPolicy(t *testing.T, name string) *sdk.Policy {
	t.Helper()
	p, err := sdk.NewPolicy(name, []sdk.Rule{sdk.FixedWindow("day", 1, 24*time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEvictionReported: on a server with maxmemory 3mb, every policy but
// noeviction is a warning in Describe and in the capability report
// (`freqcap detect`), both of which give maxmemory, maxmemory-policy and
// evicted_keys; with Options.Eviction EvictionRefuse such a server is
// never decided on (ErrEvictionPolicy, naming the policy and the fix),
// while noeviction, or any policy without a limit, decides.
func TestEvictionReported(t *testing.T) {
	srv := redistest.NewServer(t)
	ctx := context.Background()
	c := evictionClient(t, srv.Addr())
	p := evictionPolicy(t, "evict-report")
	type tc struct {
		maxmemory, policy string
		evicts            bool
	}
	cases := []tc{{"3mb", "noeviction", false}, {"0", "allkeys-lru", false}, {"0", "volatile-lru", false}}
	for _, pol := range evictingPolicies {
		cases = append(cases, tc{"3mb", pol, true})
	}
	for _, tc := range cases {
		t.Run(tc.maxmemory+"/"+tc.policy, func(t *testing.T) {
			srv.Memory(t, tc.maxmemory, tc.policy)
			wantMax := int64(0)
			if tc.maxmemory == "3mb" {
				wantMax = 3 << 20
			}

			d, err := New(c, nil).Describe(ctx)
			if err != nil {
				t.Fatalf("Describe() error: %v", err)
			}
			if len(d.Memory) != 1 || d.Memory[0].Node != srv.Addr() || !d.Memory[0].Known || d.Memory[0].Policy != tc.policy ||
				d.Memory[0].MaxMemory != wantMax || d.Memory[0].Evicts != tc.evicts || d.Memory[0].UsedMemory <= 0 {
				t.Errorf("Describe().Memory = %+v, want one node %s with maxmemory %d, policy %s, evicts %v", d.Memory, srv.Addr(), wantMax, tc.policy, tc.evicts)
			}
			if got := len(d.Warnings) > 0; got != tc.evicts {
				t.Errorf("Describe().Warnings = %q, want warnings: %v", d.Warnings, tc.evicts)
			}
			if tc.evicts && !strings.Contains(strings.Join(d.Warnings, " "), "maxmemory-policy "+tc.policy) {
				t.Errorf("Describe().Warnings = %q, want the policy %s named", d.Warnings, tc.policy)
			}

			rep, err := capability.Probe(ctx, c, capability.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(rep.Warnings) > 0; got != tc.evicts {
				t.Errorf("Probe().Warnings = %q, want warnings: %v", rep.Warnings, tc.evicts)
			}
			text := rep.String()
			for _, want := range []string{"maxmemory-policy " + tc.policy, "evicted_keys "} {
				if !strings.Contains(text, want) {
					t.Errorf("report text lacks %q:\n%s", want, text)
				}
			}
			if tc.evicts != strings.Contains(text, "WARNINGS:") {
				t.Errorf("report text has WARNINGS: %v, want %v:\n%s", !tc.evicts, tc.evicts, text)
			}

			refuse := New(c, &Options{Eviction: EvictionRefuse})
			s := sdk.Subject{"user": "refuse-" + tc.maxmemory + "-" + tc.policy + "-" + fmt.Sprint(time.Now().UnixNano())}
			dec, err := sdk.New(refuse).Allow(ctx, p, s)
			switch {
			case tc.evicts && (!errors.Is(err, ErrEvictionPolicy) || !errors.Is(err, driver.ErrRefused) || dec.Allowed ||
				!strings.Contains(err.Error(), "maxmemory-policy "+tc.policy) ||
				!strings.Contains(err.Error(), "CONFIG SET maxmemory-policy noeviction")):
				t.Errorf("Allow(refuse) = %+v, %v; want an error wrapping ErrEvictionPolicy naming %s and the fix", dec, err, tc.policy)
			case !tc.evicts && (err != nil || !dec.Allowed):
				t.Errorf("Allow(refuse) = %+v, %v; want allowed", dec, err)
			}
			res := sdk.New(refuse).TakeBatch(ctx, p, []sdk.Attempt{{Subject: s}})
			if tc.evicts != errors.Is(res[0].Err, ErrEvictionPolicy) {
				t.Errorf("TakeBatch(refuse) error = %v, want ErrEvictionPolicy: %v", res[0].Err, tc.evicts)
			}
			if d, err := refuse.Describe(ctx); err != nil || (len(d.Warnings) > 0) != tc.evicts ||
				tc.evicts && !strings.Contains(strings.Join(d.Warnings, " "), "decisions are refused") {
				t.Errorf("Describe(refuse) = %q, %v; want warnings saying decisions are refused: %v", d.Warnings, err, tc.evicts)
			}
		})
	}
}

// TestEvictionRefuseRechecks: under EvictionRefuse a CONFIG SET of
// maxmemory-policy at run time is seen within Options.EvictionRecheck
// (plus a probe), both ways.
func TestEvictionRefuseRechecks(t *testing.T) {
	srv := redistest.NewServer(t)
	srv.Memory(t, "64mb", "noeviction")
	ctx := context.Background()
	b := New(evictionClient(t, srv.Addr()), &Options{Eviction: EvictionRefuse, EvictionRecheck: 100 * time.Millisecond})
	lim := sdk.New(b)
	p, err := sdk.NewPolicy("evict-recheck", []sdk.Rule{sdk.FixedWindow("f", 1_000_000, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": fmt.Sprint("recheck-", time.Now().UnixNano())}
	if d, err := lim.Allow(ctx, p, s); err != nil || !d.Allowed {
		t.Fatalf("Allow under noeviction = %+v, %v; want allowed", d, err)
	}
	poll := func(what string, done func(error) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, err := lim.Allow(ctx, p, s)
			if done(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen within 20 s (last error %v)", what, err)
			}
			time.Sleep(10 * time.Millisecond) // polling the server's configuration
		}
	}
	redistest.ConfigSet(t, srv.Addr(), "maxmemory-policy", "volatile-lru")
	start := time.Now()
	poll("volatile-lru refused", func(err error) bool { return errors.Is(err, ErrEvictionPolicy) })
	t.Logf("volatile-lru refused after %v", time.Since(start))
	redistest.ConfigSet(t, srv.Addr(), "maxmemory-policy", "noeviction")
	poll("noeviction decided again", func(err error) bool { return err == nil })
}

// fill takes one unit for n new subjects of p, in batches, and returns the
// subjects admitted and the errors met.
func fill(t *testing.T, lim *sdk.Limiter, p *sdk.Policy, tag string, n int) (admitted []sdk.Subject, errs []error) {
	t.Helper()
	ctx := context.Background()
	const batch = 128
	for i := 0; i < n; i += batch {
		as := make([]sdk.Attempt, 0, batch)
		for j := i; j < min(i+batch, n); j++ {
			as = append(as, sdk.Attempt{Subject: sdk.Subject{"user": fmt.Sprintf("%s-%06d", tag, j)}})
		}
		for k, r := range lim.TakeBatch(ctx, p, as) {
			switch {
			case r.Err != nil:
				errs = append(errs, r.Err)
			case r.Decision.Allowed:
				admitted = append(admitted, as[k].Subject)
			default:
				t.Fatalf("first take of %v denied: %+v", as[k].Subject, r.Decision)
			}
		}
	}
	return admitted, errs
}

// TestEvictionUnderPressure drives a 3 MB server with more subjects than
// fit. Under noeviction the server refuses the writes (OOM): decisions
// fail, none admits uncounted, and every admitted subject stays capped.
// Under an evicting policy and the default EvictionWarn, evicted_keys
// rises and is reported (Describe, EvictedKeys, the warning), and the
// harm the warning is about shows: evicted people are admitted again.
func TestEvictionUnderPressure(t *testing.T) {
	// A 3 MB server holds about 9 900 of these subjects (measured on
	// Redis 7.0.15): 14 000 overflow it. The second takes go to the 2 000
	// admitted first, the first evicted by every policy here.
	const subjects, retaken = 14_000, 2_000
	for _, policy := range []string{"noeviction", "allkeys-lru", "volatile-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.NewServer(t)
			srv.Memory(t, "3mb", policy)
			ctx := context.Background()
			b := New(evictionClient(t, srv.Addr()), nil)
			lim := sdk.New(b)
			p := evictionPolicy(t, "pressure")
			admitted, errs := fill(t, lim, p, policy, subjects)
			// The server may still be evicting (its cron frees memory
			// over the limit in steps): evicted_keys only grows, so
			// EvictedKeys read between two Memory reads lies within them.
			ms, err := b.Memory(ctx)
			if err != nil {
				t.Fatal(err)
			}
			evicted, err := b.EvictedKeys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			after, err := b.Memory(ctx)
			if err != nil || len(ms) != 1 || len(after) != 1 || evicted < ms[0].EvictedKeys || evicted > after[0].EvictedKeys {
				t.Fatalf("EvictedKeys() = %d, %v; Memory() before and after = %+v, %+v", evicted, err, ms, after)
			}
			t.Logf("%s: %d admitted, %d errors, evicted_keys %d, used_memory %d", policy, len(admitted), len(errs), evicted, ms[0].UsedMemory)

			// Every admitted subject's second take: denied, unless its
			// counter was evicted.
			again, errs2 := 0, []error(nil)
			if len(admitted)+len(errs) != subjects {
				t.Errorf("%d admitted + %d errors, want %d decisions", len(admitted), len(errs), subjects)
			}
			admitted = admitted[:min(len(admitted), retaken)]
			for i := 0; i < len(admitted); i += 128 {
				as := make([]sdk.Attempt, 0, 128)
				for _, s := range admitted[i:min(i+128, len(admitted))] {
					as = append(as, sdk.Attempt{Subject: s})
				}
				for _, r := range lim.TakeBatch(ctx, p, as) {
					switch {
					case r.Err != nil:
						errs2 = append(errs2, r.Err)
					case r.Decision.Allowed:
						again++
					}
				}
			}
			t.Logf("%s: second takes of the admitted: %d admitted again, %d errors", policy, again, len(errs2))

			if policy == "noeviction" {
				if len(errs) == 0 || !strings.Contains(errs[0].Error(), "OOM") {
					t.Fatalf("under noeviction %d subjects gave %d errors (first %v), want OOM errors once memory is full", subjects, len(errs), first(errs))
				}
				if evicted != 0 || again != 0 {
					t.Errorf("under noeviction: evicted_keys %d, %d admitted subjects admitted again; want 0 and 0", evicted, again)
				}
				if len(errs2) != 0 && !strings.Contains(errs2[0].Error(), "OOM") {
					t.Errorf("second takes under noeviction: %d errors (first %v), want OOM ones", len(errs2), errs2[0])
				}
				d, err := b.Describe(ctx)
				if err != nil || len(d.Warnings) != 0 {
					t.Errorf("Describe() warnings = %q, %v; want none under noeviction", d.Warnings, err)
				}
				return
			}
			if len(errs) != 0 {
				t.Errorf("under %s: %d errors (first %v), want none: the server evicts instead", policy, len(errs), errs[0])
			}
			if evicted == 0 {
				t.Fatalf("under %s: evicted_keys 0 after %d subjects, want evictions", policy, subjects)
			}
			if again == 0 {
				t.Errorf("under %s: no evicted subject admitted again, want the harm shown", policy)
			}
			d, err := b.Describe(ctx)
			if err != nil || len(d.Memory) != 1 || d.Memory[0].EvictedKeys < evicted || len(d.Warnings) == 0 ||
				!strings.Contains(d.Warnings[0], fmt.Sprintf("evicted_keys %d", d.Memory[0].EvictedKeys)) {
				t.Errorf("Describe() = memory %+v, warnings %q, %v; want evicted_keys >= %d reported and warned", d.Memory, d.Warnings, err, evicted)
			}
		})
	}
}

func first(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

// TestEvictionCluster: every master of a cluster is reported, each with
// its own policy, and only the one that may evict is a warning, which
// EvictionRefuse refuses.
func TestEvictionCluster(t *testing.T) {
	addrs := redistest.NewCluster(t)
	set := map[string][2]string{
		addrs[0]: {"64mb", "noeviction"},
		addrs[1]: {"64mb", "allkeys-lru"},
		addrs[2]: {"0", "volatile-lru"},
	}
	for a, mp := range set {
		redistest.ConfigSet(t, a, "maxmemory-policy", mp[1])
		redistest.ConfigSet(t, a, "maxmemory", mp[0])
	}
	ctx := context.Background()
	c := evictionClient(t, addrs...)
	d, err := New(c, nil).Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Memory) != 3 {
		t.Fatalf("Describe().Memory = %+v, want 3 masters", d.Memory)
	}
	for _, m := range d.Memory {
		want, ok := set[m.Node]
		if !ok || m.Policy != want[1] || m.Evicts != (m.Node == addrs[1]) {
			t.Errorf("Describe().Memory entry %+v, want policy %v, evicts %v", m, want, m.Node == addrs[1])
		}
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], addrs[1]) || !strings.Contains(d.Warnings[0], "allkeys-lru") {
		t.Errorf("Describe().Warnings = %q, want one naming %s and allkeys-lru", d.Warnings, addrs[1])
	}
	rep, err := capability.Probe(ctx, c, capability.Config{})
	if err != nil || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], addrs[1]) {
		t.Errorf("Probe().Warnings = %q, %v; want one naming %s", rep.Warnings, err, addrs[1])
	}
	_, err = sdk.New(New(c, &Options{Eviction: EvictionRefuse})).Allow(ctx, evictionPolicy(t, "evict-cluster"), sdk.Subject{"user": "c"})
	if !errors.Is(err, ErrEvictionPolicy) || !strings.Contains(err.Error(), addrs[1]) {
		t.Errorf("Allow(refuse) error = %v, want ErrEvictionPolicy naming %s", err, addrs[1])
	}
}

func TestParseEviction(t *testing.T) {
	for _, e := range []Eviction{EvictionWarn, EvictionRefuse} {
		if got, err := ParseEviction(strings.ToUpper(e.String())); err != nil || got != e {
			t.Errorf("ParseEviction(%q) = %v, %v, want %v", e, got, err, e)
		}
	}
	if _, err := ParseEviction("lru"); err == nil {
		t.Error("ParseEviction(lru) succeeded, want an error")
	}
}
