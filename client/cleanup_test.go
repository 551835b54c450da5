package client_test

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// A Client dropped without Close closes its connections once the
// collector finds it unreachable, but never under a call it is making:
// a Client whose last use is the call it is in
// (client.New(…).Admin().Overrides(…)) keeps its connection until the
// call returns. Client b, dropped idle, shows the cleanups have run
// (serve sees its connection close); then a's call, held by the server
// meanwhile, must still succeed.
func TestDroppedClientCallInFlight(t *testing.T) {
	push, err := sdk.NewPolicy("push", []sdk.Rule{sdk.FixedWindow("daily", 100, 24*time.Hour).By("user")}, sdk.WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(serve.Config{Limiter: sdk.New(memory.New(nil)), Policies: []*sdk.Policy{push}})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	arrived, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	gate := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/ListOverrides") && held.CompareAndSwap(false, true) {
			close(arrived)
			<-release
		}
		h.ServeHTTP(w, r)
	})
	var closed atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: gate, Protocols: new(http.Protocols), ErrorLog: log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed {
				closed.Add(1)
			}
		}}
	hs.Protocols.SetUnencryptedHTTP2(true)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := &client.Options{Protocol: client.GRPC, Conns: 1}

	b := client.New(url, opts)
	if _, err := b.Take(ctx, push, sdk.Attempt{Subject: sdk.Subject{"user": "b"}}); err != nil {
		t.Fatal(err)
	}
	b = nil

	done := make(chan error, 1)
	go func() {
		_, err := client.New(url, opts).Admin().Overrides(ctx, push, sdk.Subject{"user": "a"})
		done <- err
	}()
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the held call never reached the server")
	}
	for closed.Load() == 0 { // b's connection: its cleanup ran
		if ctx.Err() != nil {
			t.Fatal("a dropped Client's connection was never closed")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the cleanup goroutine and the server's read loop run
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Overrides of a Client dropped during the call = %v, want nil", err)
	}
	if n := closed.Load(); n != 1 {
		t.Errorf("%d connections closed before the held call returned, want 1 (the idle Client's)", n)
	}
}
