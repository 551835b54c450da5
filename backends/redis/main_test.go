package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk/driver"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// standalone returns a backend and its client on the shared server.
func standalone(t *testing.T) (*Backend, *goredis.Client) {
	t.Helper()
	o := testserver.Patient(NewClientOptions(redistest.Standalone(t))).Simple()
	c := goredis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return New(c, nil), c
}

// plainStandalone is standalone with the plain Lua strategies forced: for
// tests of their storage layout, which a server with modules or native
// hash-field expiry (Redis >= 7.4) would otherwise not use.
func plainStandalone(t *testing.T) (*Backend, *goredis.Client) {
	t.Helper()
	return moduleBackend(t, redistest.Standalone(t), capability.Config{ForcePlainLua: true})
}

// cluster returns a backend and its client on the shared 3-master cluster.
func cluster(t *testing.T) (*Backend, *goredis.ClusterClient) {
	t.Helper()
	o := testserver.Patient(NewClientOptions(redistest.Cluster(t)...)).Cluster()
	c := goredis.NewClusterClient(o)
	t.Cleanup(func() { c.Close() })
	return New(c, nil), c
}

// escape is DESIGN.md's key escaping of a subject value: '%', '{', '}',
// ':' and bytes below 0x21 or 0x7f become %XX; unicode passes.
func escape(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x21 || c == 0x7f || c == '%' || c == '{' || c == '}' || c == ':' {
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(hex.EncodeToString([]byte{c})))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// subject builds the keys of one subject of one policy the DESIGN.md way:
// <prefix>:{<shard values>}:<policy>:<rule>.<id>[:<other values>].
type subject struct {
	base string // "fct:{<shard>}:<policy>:"
}

// newSubject returns a subject whose shard value is unique to this test
// run, suffixed to user.
func newSubject(t testing.TB, user string) subject {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	v := user + "-" + hex.EncodeToString(r[:])
	return subject{base: "fct:{" + escape(v) + "}:p:"}
}

func (s subject) key(rule string, others ...string) string {
	k := s.base + rule + ".abcdef"
	for _, o := range others {
		k += ":" + escape(o)
	}
	return k
}

func (s subject) trail() string        { return s.base + "!t" }
func (s subject) reservations() string { return s.base + "!h" }

func (s subject) fixed(name string, limit int64, w time.Duration) driver.Rule {
	return driver.Rule{Name: name, Key: s.key(name), Algorithm: driver.FixedWindow, Limit: limit, Window: w}
}

func (s subject) sliding(name string, limit int64, w time.Duration, cells int) driver.Rule {
	return driver.Rule{Name: name, Key: s.key(name), Algorithm: driver.SlidingWindow, Limit: limit, Window: w, SubWindows: cells}
}

func (s subject) log(name string, limit int64, w time.Duration) driver.Rule {
	return driver.Rule{Name: name, Key: s.key(name), Algorithm: driver.SlidingLog, Limit: limit, Window: w}
}

func (s subject) gcra(name string, limit int64, per time.Duration, burst int64) driver.Rule {
	return driver.Rule{Name: name, Key: s.key(name), Algorithm: driver.GCRA, Limit: limit, Window: per, Burst: burst}
}

// request returns an o of cost on rules, with the subject's trail and
// reservation keys.
func (s subject) request(o op, cost int64, rules ...driver.Rule) request {
	return request{op: o, Request: driver.Request{
		Policy: "p", Rules: rules, Cost: cost,
		TrailKey: s.trail(), TrailMax: 5, TrailTTL: time.Hour,
		ReservationKey: s.reservations(),
	}}
}

// take carries out req (its op: Take, Peek, Reserve or Inspect).
func take(t *testing.T, b *Backend, req request) driver.Result {
	t.Helper()
	res, err := b.decide(context.Background(), req.op, req.Request)
	if err != nil {
		t.Fatalf("%v error: %v", req.op, err)
	}
	if len(res.Rules) != len(req.Rules) {
		t.Fatalf("%v = %d rule results, want %d", req.op, len(res.Rules), len(req.Rules))
	}
	return res
}

// serverNow reads the server's clock.
func serverNow(t *testing.T, c goredis.UniversalClient) time.Time {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now
}

// eventually polls f until it returns true or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond) // polling a real server's clock, not passing time
	}
}

func checkRule(t *testing.T, what string, got driver.RuleResult, allowed bool, used, limit int64) {
	t.Helper()
	rem := max(0, limit-used)
	if got.Allowed != allowed || got.Used != used || got.Limit != limit || got.Remaining != rem {
		t.Errorf("%s = {allowed %v used %d limit %d remaining %d}, want {%v %d %d %d}",
			what, got.Allowed, got.Used, got.Limit, got.Remaining, allowed, used, limit, rem)
	}
}

func goredisZ(score float64, member string) goredis.Z { return goredis.Z{Score: score, Member: member} }

type goredisClient = goredis.Client

// do carries out r (its op) as the driver method of that op would.
func (b *Backend) do(ctx context.Context, r request) (driver.Result, error) {
	return b.decide(ctx, r.op, r.Request)
}
