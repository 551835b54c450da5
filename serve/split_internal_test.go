package serve

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/gen/freqcap/v1/freqcapv1connect"
)

// TestSplitRoutes: split gives a connection whose first request is gRPC
// (grpc-go's client, or connect's gRPC over net/http's HTTP/2) to the
// gRPC stack, and every other (HTTP/1.1, the Connect protocol and
// gRPC-Web over HTTP/2 with prior knowledge, a GET) to net/http's.
func TestSplitRoutes(t *testing.T) {
	h2c := func() *http.Client {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		return &http.Client{Transport: tr}
	}
	take := func(opts ...connect.ClientOption) func(hc *http.Client, url string) {
		return func(hc *http.Client, url string) {
			c := freqcapv1connect.NewFreqcapServiceClient(hc, url, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			c.Take(ctx, connect.NewRequest(&freqcapv1.TakeRequest{Policy: "p"})) // the answer does not matter
		}
	}
	for _, tc := range []struct {
		name     string
		hc       func() *http.Client
		call     func(hc *http.Client, url string)
		wantGRPC bool
	}{
		{"grpc-go", nil, func(_ *http.Client, url string) {
			cc, err := grpc.NewClient(strings.TrimPrefix(url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			cc.Invoke(ctx, freqcapv1connect.FreqcapServiceTakeProcedure, &freqcapv1.TakeRequest{}, &freqcapv1.TakeResponse{})
		}, true},
		{"connect-grpc-h2c", h2c, take(connect.WithGRPC()), true},
		{"connect-proto-h2c", h2c, take(), false},
		{"connect-json-h2c", h2c, take(connect.WithProtoJSON()), false},
		{"grpc-web-h2c", h2c, take(connect.WithGRPCWeb()), false},
		{"connect-json-http1", func() *http.Client { return &http.Client{Transport: &http.Transport{}} }, take(connect.WithProtoJSON()), false},
		{"get-http1", func() *http.Client { return &http.Client{Transport: &http.Transport{}} }, func(hc *http.Client, url string) {
			if r, err := hc.Get(url + "/healthz"); err == nil {
				r.Body.Close()
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			sp := &split{ln: ln, grpc: newConnQueue(ln.Addr()), web: newConnQueue(ln.Addr()), timeout: 5 * time.Second}
			go sp.run()
			defer ln.Close()
			var hc *http.Client
			if tc.hc != nil {
				hc = tc.hc()
			}
			go tc.call(hc, "http://"+ln.Addr().String())
			got := make(chan bool, 2)
			for _, q := range []struct {
				q    *connQueue
				grpc bool
			}{{sp.grpc, true}, {sp.web, false}} {
				go func() {
					if c, err := q.q.Accept(); err == nil {
						c.Close()
						got <- q.grpc
					}
				}()
			}
			select {
			case g := <-got:
				if g != tc.wantGRPC {
					t.Errorf("routed to the gRPC stack: %v, want %v", g, tc.wantGRPC)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the connection was routed nowhere")
			}
		})
	}
}
