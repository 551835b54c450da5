package grpclimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/middleware/grpclimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// WithPriority and WithClass reach the attempt: with the last of 2 units
// a minute kept for priority 1, a priority-0 call uses 1 and a priority-1
// call the second; an unknown class is a key error (INVALID_ARGUMENT).
func TestClassAndPriority(t *testing.T) {
	p, err := sdk.NewPolicy("api", []sdk.Rule{sdk.FixedWindow("per-minute", 2, time.Minute).By("client").WithHeadroom(1, 1)},
		sdk.WithClass(sdk.Class{Name: "internal", AllRules: true}))
	if err != nil {
		t.Fatal(err)
	}
	first := func(ctx context.Context, k string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	lim, err := grpclimit.New(sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(start)})), p, byMetadata,
		grpclimit.WithClass(func(ctx context.Context, _ string, _ any) (string, error) { return first(ctx, "x-class"), nil }),
		grpclimit.WithPriority(func(ctx context.Context, _ string, _ any) (int, error) {
			if s := first(ctx, "x-priority"); s != "" {
				return strconv.Atoi(s)
			}
			return 0, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	hc := serve(t, lim)
	ctx := context.Background()
	for i, tc := range []struct {
		md   []string
		want codes.Code
	}{
		{[]string{"x-client", "c1"}, codes.OK},
		{[]string{"x-client", "c1"}, codes.ResourceExhausted},
		{[]string{"x-client", "c1", "x-class", "marketing"}, codes.InvalidArgument},
		{[]string{"x-client", "c1", "x-priority", "1"}, codes.OK},
		{[]string{"x-client", "c1", "x-class", "internal"}, codes.OK},
	} {
		if got := check(ctx, hc, tc.md...); got.code != tc.want {
			t.Errorf("call %d %v = %v, want %v", i, tc.md, got, tc.want)
		}
	}
}
