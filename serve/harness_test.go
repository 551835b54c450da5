package serve_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policyfile"
	"github.com/freqcap/freqcap/sdk/prom"
	"github.com/freqcap/freqcap/serve"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// testPolicies are the policies the tests serve: push (the seed's shape,
// shard user, a content dimension) and ads (fail-open, per campaign).
const testPolicies = `
policies:
  - name: push
    rules:
      - {name: recv-1m,     algorithm: sliding_window, limit: 15, window: 1m,  by: [user]}
      - {name: recv-24h,    algorithm: sliding_window, limit: 50, window: 24h, by: [user]}
      - {name: content-59s, algorithm: sliding_window, limit: 2,  window: 59s, by: [user, content]}
      - {name: content-59m, algorithm: sliding_window, limit: 5,  window: 59m, by: [user, content]}
  - name: ads
    failure: open
    rules:
      - {name: daily, algorithm: fixed_window, limit: 3, window: 24h, by: [user, campaign]}
      - {name: burst, algorithm: gcra, limit: 30, window: 1m, burst: 4, by: [user]}
  - name: bulk
    rules:
      - {name: big, algorithm: fixed_window, limit: 1000000, window: 24h, by: [user]}
  - name: vip
    overrides: true
    rules:
      - {name: daily, algorithm: fixed_window, limit: 2, window: 24h, by: [user]}
      - {name: trial, algorithm: fixed_window, limit: 1, window: 24h, by: [user], shadow: true}
`

func loadPolicies(t testing.TB) []*sdk.Policy {
	t.Helper()
	return loadDoc(t, testPolicies)
}

func loadDoc(t testing.TB, doc string) []*sdk.Policy {
	t.Helper()
	ps, err := policyfile.Load(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// backendKind names a backend the tests run against.
type backendKind struct {
	name string
	new  func(t testing.TB) (driver.Backend, func(context.Context) error)
}

// backendKinds are memory, a real Redis (coalescing on, as serve runs it)
// and a Redis Cluster.
var backendKinds = []backendKind{
	{"memory", func(t testing.TB) (driver.Backend, func(context.Context) error) { return memory.New(nil), nil }},
	{"redis", func(t testing.TB) (driver.Backend, func(context.Context) error) {
		c := goredis.NewUniversalClient(testserver.Patient(redis.NewClientOptions(redistest.Standalone(t))))
		t.Cleanup(func() { c.Close() })
		return redis.New(c, &redis.Options{Coalesce: 4}), func(ctx context.Context) error { return c.Ping(ctx).Err() }
	}},
	{"cluster", func(t testing.TB) (driver.Backend, func(context.Context) error) {
		o := testserver.Patient(redis.NewClientOptions(redistest.Cluster(t)...))
		o.IsClusterMode = true
		c := goredis.NewUniversalClient(o)
		t.Cleanup(func() { c.Close() })
		return redis.New(c, nil), func(ctx context.Context) error { return c.Ping(ctx).Err() }
	}},
}

var protocols = []struct {
	name string
	p    client.Protocol
}{
	{"grpc", client.GRPC},
	{"json", client.ConnectJSON},
}

var prefixSeq atomic.Int64

// env is a running server and what the tests check it with.
type env struct {
	url      string
	srv      *serve.Server
	lim      *sdk.Limiter // the server's limiter: counts read directly
	policies map[string]*sdk.Policy
	reg      *prometheus.Registry
	done     chan error

	mu    sync.Mutex
	audit []serve.AuditEntry
}

// start serves policies over b on a loopback port; cfg's Limiter (unless
// given: then it must be over b), Policies, Audit and Registry are filled
// in. Each env has its own key prefix.
func start(t testing.TB, b driver.Backend, cfg serve.Config) *env {
	t.Helper()
	return startWith(t, b, cfg, testPolicies)
}

// startWith is start serving the policies of doc instead of testPolicies.
func startWith(t testing.TB, b driver.Backend, cfg serve.Config, doc string) *env {
	t.Helper()
	return startPolicies(t, b, cfg, loadDoc(t, doc))
}

// startPolicies is start serving ps instead of testPolicies.
func startPolicies(t testing.TB, b driver.Backend, cfg serve.Config, ps []*sdk.Policy) *env {
	t.Helper()
	e := &env{policies: map[string]*sdk.Policy{}, reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	col := prom.New(nil)
	e.reg.MustRegister(col)
	e.lim = cfg.Limiter
	if e.lim == nil {
		e.lim = sdk.New(b, sdk.WithPrefix(uniquePrefix()), sdk.WithObserver(col.Observe))
	}
	for _, p := range ps {
		e.policies[p.Name()] = p
	}
	cfg.Limiter, cfg.Policies, cfg.Registry = e.lim, ps, e.reg
	if cfg.Audit == nil {
		cfg.Audit = func(a serve.AuditEntry) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.audit = append(e.audit, a)
			return nil
		}
	}
	srv, err := serve.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.url = "http://" + ln.Addr().String()
	go func() { e.done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-e.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return e
}

// uniquePrefix is a key prefix no other test uses.
func uniquePrefix() string {
	return fmt.Sprintf("st%d-%d", time.Now().UnixNano()%1e6, prefixSeq.Add(1))
}

func (e *env) audits() []serve.AuditEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]serve.AuditEntry(nil), e.audit...)
}

// used reads a rule's count for s directly from the backend.
func (e *env) used(t testing.TB, policy string, s sdk.Subject, rule string) int64 {
	t.Helper()
	in, err := e.lim.Admin().Inspect(context.Background(), e.policies[policy], s)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	for _, r := range in.Rules {
		if r.Rule == rule {
			return r.Used
		}
	}
	t.Fatalf("Inspect: no rule %q", rule)
	return 0
}

// redisBackend is a Redis backend on addr with coalescing, as serve runs
// it, and its readiness probe.
func redisBackend(t testing.TB, addr string) (driver.Backend, func(context.Context) error) {
	c := goredis.NewUniversalClient(testserver.Patient(redis.NewClientOptions(addr)))
	t.Cleanup(func() { c.Close() })
	return redis.New(c, &redis.Options{Coalesce: 4}), func(ctx context.Context) error { return c.Ping(ctx).Err() }
}
