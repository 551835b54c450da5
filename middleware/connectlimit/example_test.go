package connectlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/middleware/connectlimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// A connect handler limited per caller (its X-Api-Key header).
func Example() {
	api, err := sdk.NewPolicy("api", []sdk.Rule{
		sdk.FixedWindow("per-minute", 1, time.Minute).By("client"),
	})
	if err != nil {
		panic(err)
	}
	lim := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))}))
	interceptor, err := connectlimit.New(lim, api, func(ctx context.Context, spec connect.Spec, peer connect.Peer, h http.Header) (sdk.Subject, error) {
		if key := h.Get("X-Api-Key"); key != "" {
			return sdk.Subject{"client": key}, nil
		}
		return nil, errors.New("no X-Api-Key") // CodeInvalidArgument, nothing consumed
	})
	if err != nil {
		panic(err)
	}
	const ping = "/example.v1.PingService/Ping"
	mux := http.NewServeMux()
	mux.Handle(ping, connect.NewUnaryHandler(ping, func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
		return connect.NewResponse(&emptypb.Empty{}), nil
	}, connect.WithInterceptors(interceptor)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client := connect.NewClient[emptypb.Empty, emptypb.Empty](srv.Client(), srv.URL+ping)
	for range 2 {
		req := connect.NewRequest(&emptypb.Empty{})
		req.Header().Set("X-Api-Key", "k1")
		res, err := client.CallUnary(context.Background(), req)
		if err != nil {
			var ce *connect.Error
			if errors.As(err, &ce) {
				fmt.Println(ce.Code(), ce.Meta()["Ratelimit"], ce.Meta()["Retry-After"])
				fmt.Println(" ", ce.Message())
			}
			continue
		}
		fmt.Println("ok", res.Header()["Ratelimit"], res.Header()["Retry-After"])
	}
	// Output:
	// ok ["per-minute";r=0;t=60] []
	// resource_exhausted ["per-minute";r=0;t=60] [60]
	//   rate limited by policy "api" (per-minute): retry in 60s
}
