package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/middleware/httplimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// WithPriority and WithClass reach the attempt: a policy keeping the
// last of its 3 units a minute for priority 1 lets a priority-0 request
// use 2 and a priority-1 request the third; a class exempt from the rule
// passes it; a class the policy does not declare and a priority out of
// range are key errors (400), consuming nothing.
func TestClassAndPriority(t *testing.T) {
	p, err := sdk.NewPolicy("api", []sdk.Rule{sdk.FixedWindow("per-minute", 3, time.Minute).By("client").WithHeadroom(1, 1)},
		sdk.WithClass(sdk.Class{Name: "internal", AllRules: true}))
	if err != nil {
		t.Fatal(err)
	}
	lim := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(start)}))
	mw, err := httplimit.New(lim, p, byHeader,
		httplimit.WithClass(func(r *http.Request) (string, error) { return r.Header.Get("X-Class"), nil }),
		httplimit.WithPriority(func(r *http.Request) (int, error) {
			if s := r.Header.Get("X-Priority"); s != "" {
				return strconv.Atoi(s)
			}
			return 0, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	var h served
	srv := httptest.NewServer(mw.Handler(&h))
	defer srv.Close()
	for i, tc := range []struct {
		header map[string]string
		want   int
	}{
		{map[string]string{"X-Client": "c1"}, http.StatusOK},
		{map[string]string{"X-Client": "c1"}, http.StatusOK},
		{map[string]string{"X-Client": "c1"}, http.StatusTooManyRequests}, // the last unit is kept
		{map[string]string{"X-Client": "c1", "X-Class": "marketing"}, http.StatusBadRequest},
		{map[string]string{"X-Client": "c1", "X-Priority": "10"}, http.StatusBadRequest},
		{map[string]string{"X-Client": "c1", "X-Priority": "x"}, http.StatusBadRequest},
		{map[string]string{"X-Client": "c1", "X-Priority": "1"}, http.StatusOK},
		{map[string]string{"X-Client": "c1", "X-Priority": "1"}, http.StatusTooManyRequests},
		{map[string]string{"X-Client": "c1", "X-Class": "internal"}, http.StatusOK},
	} {
		if got := get(t, srv.URL, tc.header); got.status != tc.want {
			t.Errorf("request %d %v = %v, want status %d", i, tc.header, got, tc.want)
		}
	}
	if got := h.n.Load(); got != 4 {
		t.Errorf("served %d, want 4", got)
	}
	in, err := lim.Admin().Inspect(t.Context(), p, sdk.Subject{"client": "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if used := in.Rules[0].Used; used != 3 {
		t.Errorf("per-minute used = %d, want 3 (the refused keys and the uncounted class consumed nothing)", used)
	}
}
