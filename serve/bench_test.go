package serve_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// BenchmarkServeMemory measures freqcap serve on the memory backend, with
// the push policy (4 sliding windows, the seed's shape) and 100 000
// subjects:
//
//   - InProcess: sdk.Limiter.Take in this process, the reference;
//   - GRPC/Take: client.Client.Take over gRPC on loopback, 64 callers,
//     client.DefaultConns connections;
//   - GRPC/Take4Conns: the same over 4 connections (Options.Conns);
//   - GRPC/TakeBatch100: TakeBatch of 100 attempts per call, 64 callers
//     (decisions/s counts attempts);
//   - ConnectProto/Take: GRPC/Take in the Connect protocol, binary
//     protobuf (HTTP/1.1 on a clear-text URL: a connection per caller);
//   - GRPC/Floor: Peek of 64 subjects that stay in memory (a map
//     lookup, nothing written), as GRPC/Take calls it: about the RPC
//     layer's own cost ("decisions/s" counts calls);
//   - OneAtATime/GRPC, OneAtATime/JSON, OneAtATime/JSONNewConn: one
//     caller, one Take at a time: through the client over gRPC, and as
//     curl sends it (POST, a JSON body) on a kept connection and on a new
//     connection per call;
//   - EnvoyRLS: Envoy's ShouldRateLimit, one descriptor (user, content)
//     of push, 64 callers over 4 grpc-go connections (freqcap bench
//     -envoy's load, on the memory backend);
//   - Handler/Take: one Take request (Connect protocol, binary protobuf)
//     through the server's http.Handler, without a network or a client:
//     its allocs/op are the server's allocations per request.
//
// Each reports decisions/s. Client and server share this process (and
// the machine's cores) in the gRPC runs, so their allocs/op count both.
//
//	go test -run '^$' -bench ServeMemory -benchmem ./serve/
func BenchmarkServeMemory(b *testing.B) {
	const subjects = 100_000
	subject := func(i int64) sdk.Subject {
		return sdk.Subject{"user": "u" + strconv.FormatInt(i%subjects, 10), "content": "c" + strconv.FormatInt(i%4, 10)}
	}
	// Each run reports decisions/s and the process's CPU time (user and
	// system, every thread: client and server) per decision, which
	// other jobs on the machine move far less than the rate.
	var cpu0 time.Duration
	startCPU := func(b *testing.B) {
		b.ResetTimer()
		cpu0 = processCPU(b)
	}
	decisionsPerSecond := func(b *testing.B, n int64) {
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "decisions/s")
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(n), "cpu-µs/decision")
	}

	b.Run("InProcess", func(b *testing.B) {
		lim := sdk.New(memory.New(nil))
		push := loadPolicies(b)[0]
		var seq atomic.Int64
		b.ReportAllocs()
		startCPU(b)
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				if _, err := lim.Take(ctx, push, sdk.Attempt{Subject: subject(seq.Add(1))}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		decisionsPerSecond(b, int64(b.N))
	})

	for _, run := range []struct {
		name         string
		batch, conns int
		proto        client.Protocol
	}{
		{"GRPC/Take", 1, client.DefaultConns, client.GRPC},
		{"GRPC/Take4Conns", 1, 4, client.GRPC},
		{"GRPC/TakeBatch100", 100, client.DefaultConns, client.GRPC},
		{"ConnectProto/Take", 1, client.DefaultConns, client.ConnectProto},
	} {
		batch := run.batch
		b.Run(run.name, func(b *testing.B) {
			e := start(b, memory.New(nil), serve.Config{})
			c := client.New(e.url, &client.Options{Timeout: 30 * time.Second, Conns: run.conns, Protocol: run.proto, Retry: noRetry})
			push := e.policies["push"]
			var seq atomic.Int64
			b.ReportAllocs()
			startCPU(b)
			b.SetParallelism(32) // 64 callers on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				as := make([]sdk.Attempt, batch)
				for pb.Next() {
					if batch == 1 {
						if _, err := c.Take(ctx, push, sdk.Attempt{Subject: subject(seq.Add(1))}); err != nil {
							b.Error(err)
							return
						}
						continue
					}
					for i := range as {
						as[i] = sdk.Attempt{Subject: subject(seq.Add(1))}
					}
					for _, r := range c.TakeBatch(ctx, push, as) {
						if r.Err != nil {
							b.Error(r.Err)
							return
						}
					}
				}
			})
			decisionsPerSecond(b, int64(b.N)*int64(batch))
		})
	}

	b.Run("GRPC/Floor", func(b *testing.B) {
		e := start(b, memory.New(nil), serve.Config{})
		c := client.New(e.url, &client.Options{Timeout: 30 * time.Second, Retry: noRetry})
		push := e.policies["push"]
		var seq atomic.Int64
		b.ReportAllocs()
		startCPU(b)
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				if _, err := c.Peek(ctx, push, sdk.Attempt{Subject: subject(seq.Add(1) % 64)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		decisionsPerSecond(b, int64(b.N))
	})

	// One call at a time, as curl or a simple sender calls: gRPC through
	// the client (coalescing has nothing to share), HTTP/JSON on a kept
	// connection, and HTTP/JSON on a new connection per call (curl's).
	for _, run := range []struct {
		name string
		call func(b *testing.B, e *env) func(i int64) error
	}{
		{"OneAtATime/GRPC", func(b *testing.B, e *env) func(i int64) error {
			c := client.New(e.url, &client.Options{Retry: noRetry})
			b.Cleanup(func() { c.Close() })
			return func(i int64) error {
				_, err := c.Take(context.Background(), e.policies["push"], sdk.Attempt{Subject: subject(i)})
				return err
			}
		}},
		{"OneAtATime/JSON", func(b *testing.B, e *env) func(i int64) error {
			return postJSON(e.url, &http.Client{Transport: &http.Transport{}}, subject)
		}},
		{"OneAtATime/JSONNewConn", func(b *testing.B, e *env) func(i int64) error {
			return postJSON(e.url, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, subject)
		}},
	} {
		b.Run(run.name, func(b *testing.B) {
			e := start(b, memory.New(nil), serve.Config{})
			call := run.call(b, e)
			b.ReportAllocs()
			startCPU(b)
			for i := 0; i < b.N; i++ {
				if err := call(int64(i)); err != nil {
					b.Fatal(err)
				}
			}
			decisionsPerSecond(b, int64(b.N))
		})
	}

	b.Run("EnvoyRLS", func(b *testing.B) {
		e := start(b, memory.New(nil), serve.Config{})
		var conns []*grpc.ClientConn
		for range 4 {
			cc, err := grpc.NewClient(strings.TrimPrefix(e.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cc.Close() })
			conns = append(conns, cc)
		}
		reqs := make([][]byte, 1024)
		for i := range reqs {
			s := subject(int64(i))
			reqs[i] = envoyRequest("push", 0, envoyDescriptor{entries: [][2]string{{"user", s["user"]}, {"content", s["content"]}}, hits: -1})
		}
		var seq atomic.Int64
		b.ReportAllocs()
		startCPU(b)
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				i := seq.Add(1)
				var out []byte
				if err := conns[i%4].Invoke(ctx, shouldRateLimit, &reqs[i%1024], &out, grpc.ForceCodec(rawCodec{})); err != nil {
					b.Error(err)
					return
				}
			}
		})
		decisionsPerSecond(b, int64(b.N))
	})

	b.Run("Handler/Take", func(b *testing.B) {
		e := start(b, memory.New(nil), serve.Config{})
		h := e.srv.Handler()
		bodies := make([][]byte, 1024)
		for i := range bodies {
			m := &freqcapv1.TakeRequest{Policy: "push", Subject: subject(int64(i))}
			var err error
			if bodies[i], err = proto.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
		body := &rewindBody{}
		req, err := http.NewRequest("POST", "http://127.0.0.1/freqcap.v1.FreqcapService/Take", body)
		if err != nil {
			b.Fatal(err)
		}
		req.RemoteAddr = "127.0.0.1:40000"
		req.Header.Set("Content-Type", "application/proto")
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		startCPU(b)
		for i := 0; i < b.N; i++ {
			body.Reset(bodies[i%len(bodies)])
			req.ContentLength = int64(len(bodies[i%len(bodies)]))
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, req)
			if w.code != http.StatusOK {
				b.Fatalf("Take through the handler = %d", w.code)
			}
		}
		decisionsPerSecond(b, int64(b.N))
	})
}

// postJSON returns a Take of subject(i) under push as curl sends it:
// POST, a JSON body, through hc.
func postJSON(url string, hc *http.Client, subject func(int64) sdk.Subject) func(i int64) error {
	return func(i int64) error {
		s := subject(i)
		body := `{"policy":"push","subject":{"user":"` + s["user"] + `","content":"` + s["content"] + `"}}`
		resp, err := hc.Post(url+"/freqcap.v1.FreqcapService/Take", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("Take over JSON: %s", resp.Status)
		}
		return nil
	}
}

// processCPU is the process's CPU time so far, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rewindBody is a request body read again for every request.
type rewindBody struct{ bytes.Reader }

func (*rewindBody) Close() error { return nil }

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}
func (w *discardWriter) WriteHeader(code int) { w.code = code }

// noRetry keeps the benchmarks' takes without idempotency keys, as the
// figures in docs/benchmarks were measured: client.DefaultRetry gives
// each take one (one record per take, and no fast script or hot-deny
// cache: docs/serve/retries.md).
var noRetry = &client.Retry{Tries: 1}
