package serve_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/serve"
)

// The Envoy tests build the request bytes and read the answer with
// protowire at the field numbers of Envoy's own schema
// (envoy/service/ratelimit/v3/rls.proto and
// envoy/extensions/common/ratelimit/v3/ratelimit.proto in envoyproxy's
// api), not with serve's generated code, and send them with grpc-go, a
// gRPC implementation of its own, as Envoy's gRPC client does.

const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// rawCodec sends and receives message bytes as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string   { return "proto" }
func (rawCodec) String() string { return "raw" }
func appendString(b []byte, n protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, n, protowire.BytesType), s)
}

// envoyDescriptor is one RateLimitDescriptor: entries in order, and the
// descriptor's hits_addend (field 3, a UInt64Value) when hits >= 0.
type envoyDescriptor struct {
	entries [][2]string
	hits    int64
}

// envoyRequest encodes a RateLimitRequest: domain = 1, descriptors = 2
// (entries = 1 {key = 1, value = 2}, hits_addend = 3 {value = 1}),
// hits_addend = 3.
func envoyRequest(domain string, hits uint32, ds ...envoyDescriptor) []byte {
	b := appendString(nil, 1, domain)
	for _, d := range ds {
		var db []byte
		for _, e := range d.entries {
			eb := appendString(appendString(nil, 1, e[0]), 2, e[1])
			db = protowire.AppendBytes(protowire.AppendTag(db, 1, protowire.BytesType), eb)
		}
		if d.hits >= 0 {
			var hb []byte
			if d.hits > 0 {
				hb = protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(d.hits))
			}
			db = protowire.AppendBytes(protowire.AppendTag(db, 3, protowire.BytesType), hb)
		}
		b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), db)
	}
	if hits > 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.VarintType), uint64(hits))
	}
	return b
}

// envoyStatus is a DescriptorStatus as decoded.
type envoyStatus struct {
	code            uint64 // 1 OK, 2 OVER_LIMIT
	name            string // current_limit.name (3)
	requestsPerUnit uint64 // current_limit.requests_per_unit (1)
	unit            uint64 // current_limit.unit (2): 1 s, 2 min, 3 h, 4 day, 7 week
	remaining       uint64 // limit_remaining (3)
	resetSeconds    int64  // duration_until_reset (4).seconds (1)
}

// envoyResponse is a RateLimitResponse as decoded.
type envoyResponse struct {
	overall  uint64 // overall_code (1)
	statuses []envoyStatus
	headers  map[string]string // response_headers_to_add (3): key = 1, value = 2
}

// fields calls f for each field of b.
func fields(t *testing.T, b []byte, f func(n protowire.Number, typ protowire.Type, v uint64, bs []byte)) {
	t.Helper()
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(l))
		}
		b = b[l:]
		switch typ {
		case protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				t.Fatalf("bad varint: %v", protowire.ParseError(l))
			}
			f(n, typ, v, nil)
			b = b[l:]
		case protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				t.Fatalf("bad bytes: %v", protowire.ParseError(l))
			}
			f(n, typ, 0, v)
			b = b[l:]
		default:
			l := protowire.ConsumeFieldValue(n, typ, b)
			if l < 0 {
				t.Fatalf("bad field: %v", protowire.ParseError(l))
			}
			b = b[l:]
		}
	}
}

func decodeEnvoyResponse(t *testing.T, b []byte) envoyResponse {
	t.Helper()
	r := envoyResponse{headers: map[string]string{}}
	fields(t, b, func(n protowire.Number, _ protowire.Type, v uint64, bs []byte) {
		switch n {
		case 1:
			r.overall = v
		case 2:
			var st envoyStatus
			fields(t, bs, func(n protowire.Number, _ protowire.Type, v uint64, bs []byte) {
				switch n {
				case 1:
					st.code = v
				case 2:
					fields(t, bs, func(n protowire.Number, _ protowire.Type, v uint64, bs []byte) {
						switch n {
						case 1:
							st.requestsPerUnit = v
						case 2:
							st.unit = v
						case 3:
							st.name = string(bs)
						}
					})
				case 3:
					st.remaining = v
				case 4:
					fields(t, bs, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) {
						if n == 1 {
							st.resetSeconds = int64(v)
						}
					})
				}
			})
			r.statuses = append(r.statuses, st)
		case 3:
			var k, val string
			fields(t, bs, func(n protowire.Number, _ protowire.Type, _ uint64, bs []byte) {
				switch n {
				case 1:
					k = string(bs)
				case 2:
					val = string(bs)
				}
			})
			r.headers[k] = val
		}
	})
	return r
}

// TestEnvoyRateLimitService speaks Envoy's rate-limit service API to
// serve over gRPC: descriptors map to the subject of the policy named by
// the domain, hits_addend to the cost (the descriptor's over the
// request's; 0 peeks), the answer gives OK or OVER_LIMIT overall and per
// descriptor with the governing rule's limit, unit, remaining units and
// reset, and the IETF RateLimit headers for Envoy to add; bad requests
// are refused whole with clear codes, consuming nothing.
func TestEnvoyRateLimitService(t *testing.T) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b, _ := bk.new(t)
			testEnvoyRateLimitService(t, b)
		})
	}
}

// testEnvoyRateLimitService: on b (memory; Redis, where a request's
// descriptors go through the coalescer; a cluster).
func testEnvoyRateLimitService(t *testing.T, b driver.Backend) {
	e := start(t, b, serve.Config{Callers: testCallers(t)})
	conn, err := grpc.NewClient(strings.TrimPrefix(e.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(token string, req []byte) (envoyResponse, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		var out []byte
		if err := conn.Invoke(ctx, shouldRateLimit, &req, &out, grpc.ForceCodec(rawCodec{})); err != nil {
			return envoyResponse{}, err
		}
		return decodeEnvoyResponse(t, out), nil
	}
	ads := func(user string, hits int64) envoyDescriptor {
		return envoyDescriptor{entries: [][2]string{{"user", user}, {"campaign", "spring"}}, hits: hits}
	}
	const OK, OVER = 1, 2

	// ads: daily (fixed window, 3 per 24 h by user and campaign) and
	// burst (GCRA 30/min, burst 4, by user).
	r, err := call(supportSecret, envoyRequest("ads", 0, ads("envoy-1", -1)))
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	want := envoyStatus{code: OK, name: "daily", requestsPerUnit: 3, unit: 4, remaining: 2}
	if r.overall != OK || len(r.statuses) != 1 || r.statuses[0].resetSeconds <= 0 {
		t.Fatalf("ShouldRateLimit = %+v, want OK with one status", r)
	}
	if got := r.statuses[0]; got.code != want.code || got.name != want.name || got.requestsPerUnit != want.requestsPerUnit || got.unit != want.unit || got.remaining != want.remaining {
		t.Errorf("status = %+v, want %+v", got, want)
	}
	if !strings.HasPrefix(r.headers["ratelimit"], `"daily";r=2;t=`) || !strings.Contains(r.headers["ratelimit-policy"], `"daily";q=3;w=86400`) || r.headers["retry-after"] != "" {
		t.Errorf("response headers = %v, want RateLimit for daily, RateLimit-Policy, no Retry-After", r.headers)
	}

	// The request's hits_addend is the cost: 2 more use up daily.
	if r, err = call(supportSecret, envoyRequest("ads", 2, ads("envoy-1", -1))); err != nil || r.overall != OK || r.statuses[0].remaining != 0 {
		t.Fatalf("ShouldRateLimit(hits_addend 2) = %+v, %v; want OK, 0 remaining", r, err)
	}
	// Over limit: the denial's status, and Retry-After for Envoy to add.
	r, err = call(supportSecret, envoyRequest("ads", 0, ads("envoy-1", -1)))
	if err != nil || r.overall != OVER || r.statuses[0].code != OVER || r.statuses[0].name != "daily" || r.statuses[0].resetSeconds <= 0 {
		t.Fatalf("ShouldRateLimit over the limit = %+v, %v; want OVER_LIMIT by daily", r, err)
	}
	if r.headers["retry-after"] == "" || !strings.HasPrefix(r.headers["ratelimit"], `"daily";r=0;t=`) {
		t.Errorf("response headers over the limit = %v, want Retry-After and RateLimit for daily", r.headers)
	}
	if got := e.used(t, "ads", sdk.Subject{"user": "envoy-1", "campaign": "spring"}, "daily"); got != 3 {
		t.Errorf("daily used = %d, want 3 (a denial consumes nothing)", got)
	}

	// Two descriptors: each decided alone, OVER_LIMIT overall when one
	// is; the descriptor's hits_addend wins over the request's, and 0
	// peeks.
	r, err = call(supportSecret, envoyRequest("ads", 2, ads("envoy-2", 1), ads("envoy-1", -1), ads("envoy-3", 0)))
	if err != nil {
		t.Fatal(err)
	}
	if r.overall != OVER || len(r.statuses) != 3 || r.statuses[0].code != OK || r.statuses[1].code != OVER || r.statuses[2].code != OK {
		t.Fatalf("ShouldRateLimit of three descriptors = %+v, want OVER_LIMIT, [OK OVER_LIMIT OK]", r)
	}
	if r.statuses[0].remaining != 2 || r.statuses[2].remaining != 3 {
		t.Errorf("statuses = %+v, want 2 remaining for envoy-2 (cost 1) and 3 for envoy-3 (a peek consumes nothing)", r.statuses)
	}
	for user, want := range map[string]int64{"envoy-2": 1, "envoy-3": 0} {
		if got := e.used(t, "ads", sdk.Subject{"user": user, "campaign": "spring"}, "daily"); got != want {
			t.Errorf("%s daily used = %d, want %d", user, got, want)
		}
	}

	// Refusals: clear codes, nothing consumed.
	fresh := ads("envoy-4", -1)
	for _, tc := range []struct {
		name  string
		token string
		req   []byte
		code  codes.Code
	}{
		{"no credential", "", envoyRequest("ads", 0, fresh), codes.Unauthenticated},
		{"no take on the policy", senderSecret, envoyRequest("ads", 0, fresh), codes.PermissionDenied},
		{"unknown domain", supportSecret, envoyRequest("nope", 0, fresh), codes.NotFound},
		{"no descriptor", supportSecret, envoyRequest("ads", 0), codes.InvalidArgument},
		{"a key the policy lacks", supportSecret, envoyRequest("ads", 0, fresh, envoyDescriptor{entries: [][2]string{{"user", "envoy-4"}, {"campaign", "spring"}, {"path", "/"}}, hits: -1}), codes.InvalidArgument},
		{"a dimension missing", supportSecret, envoyRequest("ads", 0, fresh, envoyDescriptor{entries: [][2]string{{"user", "envoy-4"}}, hits: -1}), codes.InvalidArgument},
		{"an empty value", supportSecret, envoyRequest("ads", 0, fresh, envoyDescriptor{entries: [][2]string{{"user", "envoy-4"}, {"campaign", ""}}, hits: -1}), codes.InvalidArgument},
		{"a key twice", supportSecret, envoyRequest("ads", 0, fresh, envoyDescriptor{entries: [][2]string{{"user", "envoy-4"}, {"campaign", "a"}, {"campaign", "b"}}, hits: -1}), codes.InvalidArgument},
		{"a cost above MaxLimit", supportSecret, envoyRequest("ads", 0, fresh, ads("envoy-4", driver.MaxLimit+1)), codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(tc.token, tc.req)
			if status.Code(err) != tc.code {
				t.Errorf("ShouldRateLimit = %v, want %v", err, tc.code)
			}
			if strings.Contains(fmt.Sprint(err), "envoy-4") {
				t.Errorf("error %q names a subject value", err)
			}
		})
	}
	if got := e.used(t, "ads", sdk.Subject{"user": "envoy-4", "campaign": "spring"}, "daily"); got != 0 {
		t.Errorf("envoy-4 daily used = %d after refused requests, want 0", got)
	}
}

// TestEnvoyCoalesces: concurrent rate-limit requests of two descriptors
// each, on Redis with coalescing (as serve runs it), are decided exactly
// (every unit counted once) and share scripts: Redis runs fewer EVALSHAs
// than requests (INFO commandstats, on a server of the test's own).
func TestEnvoyCoalesces(t *testing.T) {
	const workers, requests, users = 32, 25, 8
	srv := redistest.NewServer(t)
	b, _ := redisBackend(t, srv.Addr())
	e := start(t, b, serve.Config{})
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(e.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	user := func(k int) envoyDescriptor {
		return envoyDescriptor{entries: [][2]string{{"user", fmt.Sprintf("co-%d", k%users)}}, hits: -1}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range requests {
				req := envoyRequest("bulk", 1, user(w), user(w+1))
				var out []byte
				if err := conn.Invoke(context.Background(), shouldRateLimit, &req, &out, grpc.ForceCodec(rawCodec{})); err != nil {
					errs <- err
					return
				}
				if r := decodeEnvoyResponse(t, out); r.overall != 1 || len(r.statuses) != 2 {
					errs <- fmt.Errorf("ShouldRateLimit = %+v, want OK with two statuses", r)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range users {
		// Each worker's request counts one unit on its user and one on the next.
		if got, want := e.used(t, "bulk", sdk.Subject{"user": fmt.Sprintf("co-%d", k)}, "big"), int64(2*workers/users*requests); got != want {
			t.Errorf("co-%d used = %d, want %d", k, got, want)
		}
	}
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := int64(-1)
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "cmdstat_evalsha:calls="); ok {
			n, _, _ := strings.Cut(v, ",")
			calls, _ = strconv.ParseInt(n, 10, 64)
		}
	}
	if calls <= 0 || calls >= workers*requests {
		t.Errorf("EVALSHAs = %d for %d requests, want fewer than requests (coalesced)", calls, workers*requests)
	}
	t.Logf("%d requests of 2 descriptors: %d EVALSHAs", workers*requests, calls)
}
