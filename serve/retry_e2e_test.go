package serve_test

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// connKey holds a request's connection in its context.
type connKey struct{}

// discard swallows a reply.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// The Python sender's retry (docs/serve/retries.md): serve decides the first Take and its connection dies before
// the reply, as when serve is killed; the sender re-sends with the same
// idempotency key, gets the first decision, and prints what it prints
// when nothing is lost (pythonSenderPrints, by day in the recipient's
// zone). The take was counted once.
func TestPythonSenderLostReply(t *testing.T) {
	pyOK := exec.Command(debianPython, "-c", "import grpc, grpc_tools, google.protobuf").Run() == nil
	need(t, "Debian's python3-grpcio, python3-grpc-tools or python3-protobuf", "apt-get install python3-grpcio python3-grpc-tools python3-protobuf", pyOK)
	_, err := exec.LookPath("protoc")
	need(t, "protoc", "apt-get install protobuf-compiler libprotobuf-dev", err == nil)

	ps := mustLoad(t, sendersDoc(t))
	lim := sdk.New(memory.New(nil))
	callers, err := serve.ParseCallers("sender:sender-secret-1:take,peek,reserve@push,messages")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(serve.Config{Limiter: lim, Policies: ps, Callers: callers})
	if err != nil {
		t.Fatal(err)
	}
	var takes, lose atomic.Int64
	lose.Store(1)
	h := srv.Handler()
	lossy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/Take") {
			h.ServeHTTP(w, r)
			return
		}
		takes.Add(1)
		if lose.Add(-1) < 0 {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&discard{h: http.Header{}}, r) // decided
		r.Context().Value(connKey{}).(net.Conn).Close()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: lossy, Protocols: new(http.Protocols), ErrorLog: log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	gen := pythonStubs(t)
	day, _ := senderZones(t)
	cmd := exec.Command(debianPython, filepath.Join("..", "examples", "python", "sender.py"))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+gen, "FREQCAP_ADDR="+ln.Addr().String(),
		"FREQCAP_TOKEN=sender-secret-1", "FREQCAP_USER=py-lost", "FREQCAP_ZONE="+day)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sender.py: %v\n%s", err, out)
	}
	if !pythonSenderPrints.Match(out) {
		t.Errorf("sender.py with the first reply lost printed:\n%s\nwant:\n%s", out, pythonSenderPrints)
	}
	if got := takes.Load(); got != 10 {
		t.Errorf("serve got %d takes, want 10 (4 of push and the re-send of the lost one, 5 of messages)", got)
	}
	in, err := lim.Admin().Inspect(context.Background(), ps[0], sdk.Subject{"user": "py-lost"})
	if err != nil {
		t.Fatal(err)
	}
	if in.Rules[0].Rule != "recv-1m" || in.Rules[0].Used != 2 {
		t.Errorf("Inspect = %s used %d, want recv-1m used 2 (send #1 counted once)", in.Rules[0].Rule, in.Rules[0].Used)
	}
}
