package serve

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/freqcap/freqcap/backends/memory"
	ratelimitv3 "github.com/freqcap/freqcap/gen/envoy/service/ratelimit/v3"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/sdk"
)

// TestGRPCServesEveryMethod: the gRPC stack serves every method of every
// service the schemas declare (freqcap.v1's and Envoy's rate-limit
// service), and nothing else.
func TestGRPCServesEveryMethod(t *testing.T) {
	s := &Server{cfg: Config{Limiter: sdk.New(memory.New(nil))}}
	var want, got []string
	for _, f := range []protoreflect.FileDescriptor{freqcapv1.File_freqcap_v1_freqcap_proto, ratelimitv3.File_envoy_service_ratelimit_v3_rls_proto} {
		for i := range f.Services().Len() {
			sd := f.Services().Get(i)
			for j := range sd.Methods().Len() {
				want = append(want, string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
	}
	for _, sd := range s.grpcServices() {
		for _, m := range sd.Methods {
			got = append(got, sd.ServiceName+"/"+m.MethodName)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the gRPC stack serves\n%v\nthe schemas declare\n%v", got, want)
	}
}
