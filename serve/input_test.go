package serve_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/serve"
)

// post sends body as JSON to a procedure with the Connect protocol and
// returns the status, headers and body.
func post(t testing.TB, url, method, body, token string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/freqcap.v1.FreqcapService/"+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, string(b)
}

// Bad input gets a clear code and consumes nothing, on every backend and
// both protocols.
func TestBadInput(t *testing.T) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b, _ := bk.new(t)
			e := start(t, b, serve.Config{MaxBatch: 10, MaxRequestSize: 4 << 10})
			ctx := context.Background()
			push, bulk := e.policies["push"], e.policies["bulk"]
			unknown, err := sdk.NewPolicy("nope", []sdk.Rule{sdk.FixedWindow("r", 1, time.Minute).By("user")})
			if err != nil {
				t.Fatal(err)
			}
			for _, pr := range protocols {
				t.Run(pr.name, func(t *testing.T) {
					c := client.New(e.url, &client.Options{Protocol: pr.p})
					user := "bad-" + pr.name
					s := sdk.Subject{"user": user, "content": "c"}
					many := make([]sdk.Attempt, 11)
					for i := range many {
						many[i] = sdk.Attempt{Subject: s}
					}
					for _, tc := range []struct {
						name   string
						call   func() error
						code   connect.Code
						target error
					}{
						{"unknown policy", func() error { _, err := c.Take(ctx, unknown, sdk.Attempt{Subject: s}); return err }, connect.CodeNotFound, sdk.ErrInvalidPolicy},
						{"no policy", func() error { _, err := c.Take(ctx, nil, sdk.Attempt{Subject: s}); return err }, connect.CodeInvalidArgument, nil},
						{"unknown dimension", func() error {
							_, err := c.Take(ctx, push, sdk.Attempt{Subject: sdk.Subject{"user": user, "content": "c", "colour": "red"}})
							return err
						}, connect.CodeInvalidArgument, sdk.ErrInvalidSubject},
						{"missing dimension", func() error { _, err := c.Take(ctx, push, sdk.Attempt{Subject: sdk.Subject{"user": user}}); return err }, connect.CodeInvalidArgument, sdk.ErrInvalidSubject},
						{"empty value", func() error {
							_, err := c.Take(ctx, push, sdk.Attempt{Subject: sdk.Subject{"user": user, "content": ""}})
							return err
						}, connect.CodeInvalidArgument, sdk.ErrInvalidSubject},
						{"value too long", func() error {
							_, err := c.Take(ctx, push, sdk.Attempt{Subject: sdk.Subject{"user": user, "content": strings.Repeat("x", sdk.MaxValueLen+1)}})
							return err
						}, connect.CodeInvalidArgument, sdk.ErrInvalidSubject},
						{"negative cost", func() error { _, err := c.Take(ctx, push, sdk.Attempt{Subject: s, Cost: -1}); return err }, connect.CodeInvalidArgument, sdk.ErrInvalidCost},
						{"cost above MaxLimit", func() error {
							_, err := c.Take(ctx, bulk, sdk.Attempt{Subject: sdk.Subject{"user": user}, Cost: driver.MaxLimit + 1})
							return err
						}, connect.CodeInvalidArgument, sdk.ErrInvalidCost},
						{"peek cost above MaxLimit", func() error {
							_, err := c.Peek(ctx, push, sdk.Attempt{Subject: s, Cost: driver.MaxLimit + 1})
							return err
						}, connect.CodeInvalidArgument, sdk.ErrInvalidCost},
						{"idempotency key too long", func() error {
							_, err := c.Take(ctx, push, sdk.Attempt{Subject: s, IdempotencyKey: strings.Repeat("k", sdk.MaxIdempotencyKeyLen+1)})
							return err
						}, connect.CodeInvalidArgument, sdk.ErrInvalidIdempotencyKey},
						{"reserve ttl too long", func() error { _, _, err := c.Reserve(ctx, push, sdk.Attempt{Subject: s}, 2*time.Hour); return err }, connect.CodeInvalidArgument, nil},
						{"unknown reservation id", func() error {
							r, err := c.ReservationOf(push, s, "0123456789abcdef")
							if err != nil {
								return err
							}
							return r.Commit(ctx)
						}, connect.CodeNotFound, sdk.ErrReservationNotFound},
						{"batch too long", func() error { return c.TakeBatch(ctx, push, many)[0].Err }, connect.CodeInvalidArgument, nil},
						{"oversized request", func() error {
							_, err := c.Take(ctx, push, sdk.Attempt{Subject: s, IdempotencyKey: strings.Repeat("k", 5<<10)})
							return err
						}, connect.CodeResourceExhausted, nil},
						{"inspect without shard value", func() error { _, err := c.Admin().Inspect(ctx, push, sdk.Subject{"content": "c"}); return err }, connect.CodeInvalidArgument, sdk.ErrInvalidSubject},
						{"reset without shard value", func() error { return c.Admin().Reset(ctx, push, sdk.Subject{"content": "c"}) }, connect.CodeInvalidArgument, sdk.ErrInvalidSubject},
					} {
						t.Run(tc.name, func(t *testing.T) {
							err := tc.call()
							if connect.CodeOf(err) != tc.code {
								t.Errorf("error = %v (code %v), want code %v", err, connect.CodeOf(err), tc.code)
							}
							if tc.target != nil && !errors.Is(err, tc.target) {
								t.Errorf("error = %v, want it to wrap %v", err, tc.target)
							}
							if err != nil && strings.Contains(err.Error(), user) {
								t.Errorf("error %q names the subject", err)
							}
						})
					}
					if got := e.used(t, "push", s, "recv-1m"); got != 0 {
						t.Errorf("recv-1m used after bad input = %d, want 0", got)
					}
				})
			}
			t.Run("malformed JSON", func(t *testing.T) {
				for _, body := range []string{`{"policy":`, `{"policy":"push","subject":{"user":"m","content":"c"},"cots":2}`, `[1]`, `{"policy":"push","subject":{"user":"m","content":"c"},"cost":"many"}`, "\xff"} {
					status, _, out := post(t, e.url, "Take", body, "")
					if status != http.StatusBadRequest || !strings.Contains(out, `"invalid_argument"`) {
						t.Errorf("Take(%q) = %d %s, want 400 invalid_argument", body, status, out)
					}
				}
				if got := e.used(t, "push", sdk.Subject{"user": "m", "content": "c"}, "recv-1m"); got != 0 {
					t.Errorf("recv-1m used after malformed bodies = %d, want 0", got)
				}
			})
		})
	}
}
