package serve_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestClientConns: a Client opens Options.Conns connections to the
// server and takes them in turn (client.DefaultConns without the
// option), over each protocol. (The transport may open one more than
// asked: the test counts at least.)
func TestClientConns(t *testing.T) {
	for _, proto := range []client.Protocol{client.GRPC, client.ConnectProto} {
		for _, conns := range []int{0, 1, 3} {
			push := loadPolicies(t)[0]
			srv, err := serve.New(serve.Config{Limiter: sdk.New(memory.New(nil)), Policies: []*sdk.Policy{push}})
			if err != nil {
				t.Fatal(err)
			}
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ln := &countingListener{Listener: inner}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			c := client.New("http://"+ln.Addr().String(), &client.Options{Protocol: proto, Conns: conns, Timeout: 30 * time.Second})
			ctx := context.Background()
			for i := 0; i < 9; i++ { // one after another: no call needs a new connection of its own
				if _, err := c.Allow(ctx, push, sdk.Subject{"user": "u", "content": "c"}); err != nil {
					t.Fatal(err)
				}
			}
			want := int64(conns)
			if conns == 0 {
				want = client.DefaultConns
			}
			if got := ln.n.Load(); got < want {
				t.Errorf("protocol %v, Conns %d: the server accepted %d connections for 9 calls in a row, want at least %d", proto, conns, got, want)
			}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := srv.Shutdown(sctx); err != nil {
				t.Error(err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
}
