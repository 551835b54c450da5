package serve_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// TestEveryStack: whichever stack serves a call (grpc-go's for gRPC,
// net/http's for the rest) and whichever client transport sends it, the
// same call gets the same answer: each of these clients takes from one
// subject in turn (the counts go on from one to the next), and a call of
// an unknown policy and one with an unknown credential are refused with
// the same code and reason by all.
func TestEveryStack(t *testing.T) {
	e := start(t, memory.New(nil), serve.Config{Callers: testCallers(t)})
	h2c := func() *http.Client {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		return &http.Client{Transport: tr}
	}
	clients := []struct {
		name string
		opts client.Options
	}{
		{"grpc-go", client.Options{}},
		{"connect-grpc-h2c", client.Options{HTTPClient: h2c()}},
		{"connect-proto-h2c", client.Options{HTTPClient: h2c(), Protocol: client.ConnectProto}},
		{"connect-json-http1", client.Options{Protocol: client.ConnectJSON}},
	}
	ctx := context.Background()
	push := e.policies["push"]
	r := 0 // the rule with the largest limit: never reached here
	for i, rule := range push.Rules() {
		if rule.Limit > push.Rules()[r].Limit {
			r = i
		}
	}
	for i, c := range clients {
		c.opts.Token = supportSecret
		c.opts.Retry = &client.Retry{Tries: 1}
		cl := client.New(e.url, &c.opts)
		s := sdk.Subject{"user": "stacks", "content": c.name} // recv-24h counts the user's
		d, err := cl.Take(ctx, push, sdk.Attempt{Subject: s})
		if err != nil {
			t.Fatalf("%s: Take: %v", c.name, err)
		}
		if want := int64(i + 1); !d.Allowed || d.Rules[r].Used != want {
			t.Errorf("%s: Take allowed %v, used %d of rule %s, want allowed, %d (the calls before it counted)", c.name, d.Allowed, d.Rules[r].Used, d.Rules[r].Rule, want)
		}
		other, err := sdk.NewPolicy("no-such-policy", push.Rules())
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Take(ctx, other, sdk.Attempt{Subject: s})
		if connect.CodeOf(err) != connect.CodeNotFound || protoconv.ReasonOf(err) != freqcapv1.Reason_REASON_UNKNOWN_POLICY {
			t.Errorf("%s: Take of an unknown policy = %v, want not_found, UNKNOWN_POLICY", c.name, err)
		}
		c.opts.Token = "not-a-known-secret"
		_, err = client.New(e.url, &c.opts).Take(ctx, push, sdk.Attempt{Subject: s})
		if connect.CodeOf(err) != connect.CodeUnauthenticated || protoconv.ReasonOf(err) != freqcapv1.Reason_REASON_UNAUTHENTICATED {
			t.Errorf("%s: Take with an unknown credential = %v, want unauthenticated, UNAUTHENTICATED", c.name, err)
		}
		cl.Close()
	}
}
