package serve_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// TestAuthBeforeBody: a wrong credential with a body that does not parse
// (or is over MaxRequestSize) is refused as unauthenticated, not as a bad
// request, on every protocol and service, and each such call counts
// toward the lockout: after the 5 free failures the 6th locks the
// address, whose next call (a valid credential, a good body) is refused
// with resource_exhausted.
func TestAuthBeforeBody(t *testing.T) {
	// post sends body to path over HTTP with a wrong credential and
	// returns the status and the error's reason.
	post := func(t *testing.T, url, path, contentType string, body []byte) (int, freqcapv1.Reason, error) {
		t.Helper()
		req, err := http.NewRequest("POST", url+path, bytes.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", "Bearer not-a-known-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		var reason freqcapv1.Reason
		if resp.StatusCode != http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			reason = reasonOfBody(t, resp.Body)
		}
		return resp.StatusCode, reason, nil
	}
	// invoke sends body to procedure over gRPC (grpc-go) with a wrong
	// credential and returns the status code.
	invoke := func(url, procedure string, body []byte) (codes.Code, error) {
		conn, err := grpc.NewClient(strings.TrimPrefix(url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer not-a-known-secret")
		var out []byte
		err = conn.Invoke(ctx, procedure, &body, &out, grpc.ForceCodec(rawCodec{}))
		return status.Code(err), nil
	}
	garbage := []byte{0xff, 0xff, 0xff, 0xff}
	tooLarge := bytes.Repeat([]byte("x"), serve.DefaultMaxRequestSize+1)
	unauth := freqcapv1.Reason_REASON_UNAUTHENTICATED
	for _, tc := range []struct {
		name string
		send func(t *testing.T, url string) error // one refused call; nil error: refused as unauthenticated
	}{
		{"json/malformed", func(t *testing.T, url string) error {
			return wantHTTP(post(t, url, "/freqcap.v1.FreqcapService/Take", "application/json", []byte(`{"policy": "push", "subject": {`)))(401, unauth)
		}},
		{"json/too-large", func(t *testing.T, url string) error {
			return wantHTTP(post(t, url, "/freqcap.v1.FreqcapService/TakeBatch", "application/json", tooLarge))(401, unauth)
		}},
		{"json/policy-service", func(t *testing.T, url string) error {
			return wantHTTP(post(t, url, "/freqcap.v1.PolicyService/ApplyPolicies", "application/json", []byte(`[1,`)))(401, unauth)
		}},
		{"json/override-service", func(t *testing.T, url string) error {
			return wantHTTP(post(t, url, "/freqcap.v1.OverrideService/SetOverride", "application/json", []byte(`{"kind": 7`)))(401, unauth)
		}},
		{"json/person-service", func(t *testing.T, url string) error {
			return wantHTTP(post(t, url, "/freqcap.v1.PersonService/LinkIdentity", "application/json", []byte(`{"identity": `)))(401, unauth)
		}},
		{"grpc/person-service", func(t *testing.T, url string) error {
			return wantCode(invoke(url, "/freqcap.v1.PersonService/GetPerson", garbage))
		}},
		{"connect-proto/malformed", func(t *testing.T, url string) error {
			return wantHTTP(post(t, url, "/freqcap.v1.FreqcapService/Take", "application/proto", garbage))(401, 0)
		}},
		{"grpc/malformed", func(t *testing.T, url string) error {
			return wantCode(invoke(url, "/freqcap.v1.FreqcapService/Take", garbage))
		}},
		{"grpc/too-large", func(t *testing.T, url string) error {
			return wantCode(invoke(url, "/freqcap.v1.FreqcapService/Take", tooLarge))
		}},
		{"envoy/malformed", func(t *testing.T, url string) error {
			return wantCode(invoke(url, shouldRateLimit, garbage))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, memory.New(nil), serve.Config{Callers: testCallers(t)})
			for i := 1; i <= 6; i++ {
				if err := tc.send(t, e.url); err != nil {
					t.Fatalf("failure %d: %v", i, err)
				}
			}
			good := client.New(e.url, &client.Options{Protocol: client.ConnectJSON, Token: supportSecret})
			_, err := good.Take(context.Background(), e.policies["push"], sdk.Attempt{Subject: sdk.Subject{"user": "u", "content": "c"}})
			if connect.CodeOf(err) != connect.CodeResourceExhausted || protoconv.ReasonOf(err) != freqcapv1.Reason_REASON_LOCKED_OUT {
				t.Errorf("a valid Take after 6 wrong credentials with bad bodies = %v, want resource_exhausted, LOCKED_OUT (each counted)", err)
			}
		})
	}
}

// wantHTTP checks an HTTP answer's status and reason (0: not checked).
func wantHTTP(status int, reason freqcapv1.Reason, err error) func(int, freqcapv1.Reason) error {
	return func(ws int, wr freqcapv1.Reason) error {
		switch {
		case err != nil:
			return err
		case status != ws || wr != 0 && reason != wr:
			return fmt.Errorf("answer %d, %v; want %d, %v", status, reason, ws, wr)
		}
		return nil
	}
}

// wantCode checks that a gRPC call was refused as unauthenticated.
func wantCode(c codes.Code, err error) error {
	if err != nil {
		return err
	}
	if c != codes.Unauthenticated {
		return fmt.Errorf("code %v, want Unauthenticated", c)
	}
	return nil
}

// TestEnvoyPeekNeedsPeek: a descriptor whose hits_addend is 0 peeks, and
// needs the peek grant as Peek does; one that consumes needs take. A
// request mixing both needs both, and a refused one decides nothing.
func TestEnvoyPeekNeedsPeek(t *testing.T) {
	const takerSecret, peekerSecret = "t4ker-s3cret", "p33ker-s3cret"
	callers, err := serve.ParseCallers("taker:" + takerSecret + ":take@ads peeker:" + peekerSecret + ":peek@ads")
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, memory.New(nil), serve.Config{Callers: callers})
	conn, err := grpc.NewClient(strings.TrimPrefix(e.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(token string, req []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		var out []byte
		return conn.Invoke(ctx, shouldRateLimit, &req, &out, grpc.ForceCodec(rawCodec{}))
	}
	ads := func(user string, hits int64) envoyDescriptor {
		return envoyDescriptor{entries: [][2]string{{"user", user}, {"campaign", "spring"}}, hits: hits}
	}
	for _, tc := range []struct {
		name  string
		token string
		req   []byte
		code  codes.Code
	}{
		{"take-only peeks", takerSecret, envoyRequest("ads", 0, ads("peek-1", 0)), codes.PermissionDenied},
		{"take-only takes and peeks", takerSecret, envoyRequest("ads", 0, ads("peek-2", 1), ads("peek-1", 0)), codes.PermissionDenied},
		{"take-only takes", takerSecret, envoyRequest("ads", 0, ads("peek-3", 1)), codes.OK},
		{"peek-only peeks", peekerSecret, envoyRequest("ads", 0, ads("peek-3", 0)), codes.OK},
		{"peek-only takes", peekerSecret, envoyRequest("ads", 0, ads("peek-4", -1)), codes.PermissionDenied},
		{"peek-only takes and peeks", peekerSecret, envoyRequest("ads", 0, ads("peek-4", 0), ads("peek-4", 2)), codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := call(tc.token, tc.req); status.Code(err) != tc.code {
				t.Errorf("ShouldRateLimit = %v, want %v", err, tc.code)
			}
		})
	}
	for user, want := range map[string]int64{"peek-2": 0, "peek-3": 1, "peek-4": 0} {
		if got := e.used(t, "ads", sdk.Subject{"user": user, "campaign": "spring"}, "daily"); got != want {
			t.Errorf("%s daily used = %d, want %d (a refused request decides nothing)", user, got, want)
		}
	}
}
