package console

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// noReset is an Admin whose backend cannot reset subjects and does not
// describe itself: an *sdk.Admin with two calls replaced.
type noReset struct {
	*sdk.Admin
	resets int
}

func (l *noReset) Reset(context.Context, *sdk.Policy, sdk.Subject) error {
	l.resets++
	return errors.ErrUnsupported
}

func (l *noReset) Describe(context.Context) (driver.Description, error) {
	return driver.Description{}, errors.ErrUnsupported
}

// TestConfigLimiter: the console works with any Limiter and Admin, not
// only *sdk.Limiter and its *sdk.Admin, and refuses no Limiter at all (a
// nil interface or a nil *sdk.Limiter), or no Admin where the Limiter has
// none.
func TestConfigLimiter(t *testing.T) {
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, lim := range []Limiter{nil, (*sdk.Limiter)(nil)} {
		if _, err := New(Config{Limiter: lim, Policies: pols, Logger: quiet}); err == nil {
			t.Errorf("New(Config{Limiter: %#v}) = nil error, want one", lim)
		}
	}

	lim := sdk.New(memory.New(nil))
	if _, err := New(Config{Limiter: struct{ Limiter }{lim}, Policies: pols, Logger: quiet}); err == nil {
		t.Error("New(Config{Limiter without Admin(), no Admin}) = nil error, want one")
	}
	fake := &noReset{Admin: lim.Admin()}
	srv, err := New(Config{Limiter: lim, Admin: fake, Policies: pols, Logger: quiet})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	f := &fixture{srv: srv}
	res := f.do(t, req{method: http.MethodPost, path: "/api/v1/reset", body: `{"policy":"push","subject":{"user":"42"}}`,
		header: map[string]string{"Content-Type": "application/json"}})
	if body := readBody(t, res); res.StatusCode != http.StatusNotImplemented || !strings.Contains(body, "cannot reset") {
		t.Errorf("POST /api/v1/reset = %d %s, want 501 saying the backend cannot reset", res.StatusCode, body)
	}
	if fake.resets != 1 {
		t.Errorf("the fake's Reset was called %d times, want 1", fake.resets)
	}
	if got := srv.audit.Entries(); len(got) != 1 || got[0].Outcome != "failed: the backend cannot reset" {
		t.Errorf("audit = %+v, want one entry with outcome %q", got, "failed: the backend cannot reset")
	}
	if body := readBody(t, f.do(t, req{path: "/"})); !strings.Contains(body, "This backend does not describe itself.") {
		t.Errorf("overview does not say the backend does not describe itself:\n%s", body)
	}
}
