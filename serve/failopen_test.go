package serve_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
)

// With no server to answer, the client answers a fail-open policy's
// calls allowed and degraded, as the in-process Limiter does when its
// backend fails, and fails a fail-closed policy's with unavailable.
func TestClientFailOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	ps := loadPolicies(t)
	push, ads := ps[0], ps[1]
	if push.FailOpen() || !ads.FailOpen() {
		t.Fatal("test policies: want push fail-closed, ads fail-open")
	}
	ctx := context.Background()
	for _, pr := range protocols {
		c := client.New(url, &client.Options{Protocol: pr.p, Timeout: 5 * time.Second})
		s := sdk.Subject{"user": "fo", "campaign": "k"}
		d, err := c.Take(ctx, ads, sdk.Attempt{Subject: s})
		if err != nil || !d.Allowed || !d.Degraded || d.Err == nil {
			t.Errorf("%s: Take(fail-open) = %+v, %v, want allowed and degraded", pr.name, d, err)
		}
		d, r, err := c.Reserve(ctx, ads, sdk.Attempt{Subject: s}, time.Minute)
		if err != nil || !d.Degraded || r == nil || r.ID() != "" || r.Commit(ctx) != nil {
			t.Errorf("%s: Reserve(fail-open) = %+v, %v, %v, want a degraded reservation that commits as a no-op", pr.name, d, r, err)
		}
		rs := c.TakeBatch(ctx, ads, []sdk.Attempt{{Subject: s}, {Subject: s}})
		if len(rs) != 2 || rs[0].Err != nil || !rs[0].Decision.Degraded || !rs[1].Decision.Allowed {
			t.Errorf("%s: TakeBatch(fail-open) = %+v", pr.name, rs)
		}
		_, err = c.Take(ctx, push, sdk.Attempt{Subject: sdk.Subject{"user": "fo", "content": "c"}})
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("%s: Take(fail-closed) = %v, want unavailable", pr.name, err)
		}
		if _, err := c.Admin().Inspect(ctx, ads, s); err == nil || errors.Is(err, sdk.ErrInvalidSubject) {
			t.Errorf("%s: Inspect = %v, want a transport error", pr.name, err)
		}
	}
}
