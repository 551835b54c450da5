package serve_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

const (
	senderSecret  = "s3nder-s3cret"
	supportSecret = "supp0rt-s3cret"
	auditorSecret = "aud1tor-s3cret"
)

func testCallers(t testing.TB) []serve.Caller {
	t.Helper()
	cs, err := serve.ParseCallers("sender:" + senderSecret + ":take,peek,reserve@push;peek@ads\n" +
		"support:" + supportSecret + ":*@*\tauditor:" + auditorSecret + ":inspect@push,ads")
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Each credential may do its granted operations on its granted policies,
// and nothing else; refusals have clear codes, consume nothing, and resets
// are audited with the caller's name.
func TestAuthScopes(t *testing.T) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b, _ := bk.new(t)
			e := start(t, b, serve.Config{Callers: testCallers(t)})
			ctx := context.Background()
			push, ads := e.policies["push"], e.policies["ads"]
			for _, pr := range protocols {
				t.Run(pr.name, func(t *testing.T) {
					cl := func(tok string) *client.Client { return client.New(e.url, &client.Options{Protocol: pr.p, Token: tok}) }
					sender, support, auditor := cl(senderSecret), cl(supportSecret), cl(auditorSecret)
					user := "auth-" + pr.name
					s := sdk.Subject{"user": user, "content": "c"}
					as := sdk.Subject{"user": user, "campaign": "k"}
					take := func(c *client.Client, p *sdk.Policy, s sdk.Subject) error {
						_, err := c.Take(ctx, p, sdk.Attempt{Subject: s})
						return err
					}
					for _, tc := range []struct {
						name string
						call func() error
						code connect.Code
					}{
						{"sender takes on push", func() error { return take(sender, push, s) }, 0},
						{"sender batches on push", func() error { return sender.TakeBatch(ctx, push, []sdk.Attempt{{Subject: s}})[0].Err }, 0},
						{"sender peeks on ads", func() error { _, err := sender.Peek(ctx, ads, sdk.Attempt{Subject: as}); return err }, 0},
						{"sender may not take on ads", func() error { return take(sender, ads, as) }, connect.CodePermissionDenied},
						{"sender may not batch on ads", func() error { return sender.TakeBatch(ctx, ads, []sdk.Attempt{{Subject: as}})[0].Err }, connect.CodePermissionDenied},
						{"sender may not reset", func() error { return sender.Admin().Reset(ctx, push, sdk.Subject{"user": user}) }, connect.CodePermissionDenied},
						{"sender may not inspect", func() error { _, err := sender.Admin().Inspect(ctx, push, sdk.Subject{"user": user}); return err }, connect.CodePermissionDenied},
						{"sender may not take on an unknown policy", func() error {
							p, _ := sdk.NewPolicy("secret-policy", []sdk.Rule{sdk.FixedWindow("r", 1, time.Minute).By("user")})
							return take(sender, p, sdk.Subject{"user": user})
						}, connect.CodePermissionDenied},
						{"auditor inspects", func() error { _, err := auditor.Admin().Inspect(ctx, ads, sdk.Subject{"user": user}); return err }, 0},
						{"auditor may not take", func() error { return take(auditor, push, s) }, connect.CodePermissionDenied},
						{"no credential", func() error { return take(cl(""), push, s) }, connect.CodeUnauthenticated},
						{"wrong credential", func() error { return take(cl("not-a-known-secret"), push, s) }, connect.CodeUnauthenticated},
						{"a prefix of a secret", func() error { return take(cl(senderSecret[:8]), push, s) }, connect.CodeUnauthenticated},
						{"support resets", func() error { return support.Admin().Reset(ctx, ads, sdk.Subject{"user": user}) }, 0},
					} {
						t.Run(tc.name, func(t *testing.T) {
							err := tc.call()
							if connect.CodeOf(err) != tc.code && !(tc.code == 0 && err == nil) {
								t.Errorf("error = %v, want code %v", err, tc.code)
							}
							if err != nil && (strings.Contains(err.Error(), senderSecret) || strings.Contains(err.Error(), user)) {
								t.Errorf("error %q names a secret or the subject", err)
							}
						})
					}
					// Two takes by the sender (Take, TakeBatch); the refused ones consumed nothing.
					if got := e.used(t, "push", s, "recv-1m"); got != 2 {
						t.Errorf("push recv-1m used = %d, want 2", got)
					}
					if got := e.used(t, "ads", as, "daily"); got != 0 {
						t.Errorf("ads daily used = %d, want 0", got)
					}
					au := e.audits()
					if len(au) == 0 || au[len(au)-1].Caller != "support" || au[len(au)-1].Policy != "ads" || au[len(au)-1].Outcome != "ok" {
						t.Errorf("last audit entry = %+v, want support's reset of ads", au)
					}
					for _, a := range au {
						if a.Caller != "support" {
							t.Errorf("audit entry by %q: only support reset", a.Caller)
						}
					}
					// ListPolicies lists what the caller has a grant on.
					for _, c := range []struct {
						c    *client.Client
						want []string
					}{{sender, []string{"push", "ads"}}, {auditor, []string{"push", "ads"}}, {support, []string{"push", "ads", "bulk", "vip"}}} {
						ps, err := c.c.Policies(ctx)
						if err != nil {
							t.Fatal(err)
						}
						var names []string
						for _, p := range ps {
							names = append(names, p.Name())
						}
						if !slices.Equal(names, c.want) {
							t.Errorf("Policies = %v, want %v", names, c.want)
						}
					}
					if _, err := cl("").Policies(ctx); connect.CodeOf(err) != connect.CodeUnauthenticated {
						t.Errorf("Policies without a credential = %v, want unauthenticated", err)
					}
				})
			}
		})
	}
}

func TestParseCallers(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{"a:12345678:take@push", ""},
		{"a:12345678:take,peek@push;reset@*", ""},
		{"a:12345678:*@push,ads", ""},
		{"a:1234567:take@push", "at least 8 bytes"},
		{"a:12345678", "name:secret:grant"},
		{"a:12345678:take", `op[,op…]@policy`},
		{"a:12345678:steal@push", `unknown operation "steal"`},
		{"a:12345678:take@", "empty policy name"},
		{"a b:12345678:take@push", "name:secret:grant"},
		{"bad/name:12345678:take@push", "credential name"},
	} {
		_, err := serve.ParseCallers(tc.in)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseCallers(%q) = %v, want an error containing %q", tc.in, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "12345678") {
			t.Errorf("ParseCallers(%q) = %v: names the secret", tc.in, err)
		}
	}
	b, _ := backendKinds[0].new(t)
	lim := sdk.New(b)
	ps := loadPolicies(t)
	for _, tc := range []struct {
		name    string
		callers []serve.Caller
		err     string
	}{
		{"duplicate names", []serve.Caller{{Name: "a", Secret: "12345678"}, {Name: "a", Secret: "87654321"}}, "two credentials"},
		{"shared secret", []serve.Caller{{Name: "a", Secret: "12345678"}, {Name: "b", Secret: "12345678"}}, "secret of another"},
	} {
		if _, err := serve.New(serve.Config{Limiter: lim, Policies: ps, Callers: tc.callers}); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: New = %v, want an error containing %q", tc.name, err, tc.err)
		}
	}
}

// Without credentials the server answers loopback names only: a page
// that rebinds its own name to 127.0.0.1 gets 421.
func TestLoopbackOnlyWithoutCredentials(t *testing.T) {
	b, _ := backendKinds[0].new(t)
	e := start(t, b, serve.Config{})
	for _, host := range []string{"evil.example", "10.0.0.1:80"} {
		req, err := http.NewRequest(http.MethodPost, e.url+"/freqcap.v1.FreqcapService/Take", strings.NewReader(`{"policy":"push","subject":{"user":"x","content":"c"}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("Take with Host %q = %d, want 421", host, res.StatusCode)
		}
	}
	if got := e.used(t, "push", sdk.Subject{"user": "x", "content": "c"}, "recv-1m"); got != 0 {
		t.Errorf("used = %d, want 0", got)
	}
	if err := serve.CheckAddr("0.0.0.0:8081", false); !errors.Is(err, serve.ErrInsecureAddr) {
		t.Errorf("CheckAddr(0.0.0.0, no credentials) = %v, want ErrInsecureAddr", err)
	}
	for _, a := range []string{"127.0.0.1:1", "[::1]:1", "localhost:1"} {
		if err := serve.CheckAddr(a, false); err != nil {
			t.Errorf("CheckAddr(%s) = %v", a, err)
		}
	}
}
