package connectlimit_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/middleware/connectlimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// WithPriority and WithClass reach the attempt: with the last of 2 units
// a minute kept for priority 1, a priority-0 call uses 1 and a priority-1
// call the second; an unknown class is a key error (invalid_argument).
func TestClassAndPriority(t *testing.T) {
	p, err := sdk.NewPolicy("api", []sdk.Rule{sdk.FixedWindow("per-minute", 2, time.Minute).By("client").WithHeadroom(1, 1)},
		sdk.WithClass(sdk.Class{Name: "internal", AllRules: true}))
	if err != nil {
		t.Fatal(err)
	}
	i, err := connectlimit.New(sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(start)})), p, byHeader,
		connectlimit.WithClass(func(_ context.Context, _ connect.Spec, _ connect.Peer, h http.Header) (string, error) {
			return h.Get("X-Class"), nil
		}),
		connectlimit.WithPriority(func(_ context.Context, _ connect.Spec, _ connect.Peer, h http.Header) (int, error) {
			if s := h.Get("X-Priority"); s != "" {
				return strconv.Atoi(s)
			}
			return 0, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, i)
	ping := connect.NewClient[emptypb.Empty, emptypb.Empty](h2c(t), url+pingProc)
	ctx := context.Background()
	for n, tc := range []struct {
		hdr  map[string]string
		want connect.Code
	}{
		{map[string]string{"X-Client": "c1"}, 0},
		{map[string]string{"X-Client": "c1"}, connect.CodeResourceExhausted},
		{map[string]string{"X-Client": "c1", "X-Class": "marketing"}, connect.CodeInvalidArgument},
		{map[string]string{"X-Client": "c1", "X-Priority": "1"}, 0},
		{map[string]string{"X-Client": "c1", "X-Class": "internal"}, 0},
	} {
		if got := call(ctx, ping, false, tc.hdr); got.code != tc.want {
			t.Errorf("call %d %v = %v, want code %v", n, tc.hdr, got, tc.want)
		}
	}
}
