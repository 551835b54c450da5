package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/middleware/grpclimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// A gRPC server limited per caller (its x-api-key metadata), here
// serving the standard health service on a loopback port.
func Example() {
	api, err := sdk.NewPolicy("api", []sdk.Rule{
		sdk.FixedWindow("per-minute", 2, time.Minute).By("client"),
	})
	if err != nil {
		panic(err)
	}
	lim := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))}))
	gl, err := grpclimit.New(lim, api, func(ctx context.Context, method string, req any) (sdk.Subject, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if key := md.Get("x-api-key"); len(key) == 1 && key[0] != "" {
			return sdk.Subject{"client": key[0]}, nil
		}
		return nil, fmt.Errorf("%s: no x-api-key", method) // INVALID_ARGUMENT, nothing consumed
	})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(gl.Unary()), grpc.StreamInterceptor(gl.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
	for range 3 {
		var hdr metadata.MD
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		fmt.Println(status.Code(err), hdr.Get("ratelimit"), hdr.Get("retry-after"))
		if err != nil {
			fmt.Println(" ", status.Convert(err).Message())
		}
	}
	// Output:
	// OK ["per-minute";r=1;t=60] []
	// OK ["per-minute";r=0;t=60] []
	// ResourceExhausted ["per-minute";r=0;t=60] [60]
	//   rate limited by policy "api" (per-minute): retry in 60s
}
