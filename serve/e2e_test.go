package serve_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policystore"
	"github.com/freqcap/freqcap/serve"
)

// need skips the test, loudly, when a tool is missing, or fails it when
// FREQCAP_REQUIRE_SERVERS=1 (CI: scripts/test.sh installs them).
func need(t *testing.T, what, install string, ok bool) {
	t.Helper()
	if ok {
		return
	}
	msg := what + " is missing: " + install + " (scripts/test.sh installs it)"
	if os.Getenv("FREQCAP_REQUIRE_SERVERS") == "1" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPED, NOT PASSED: " + msg)
}

// debianPython is Debian's interpreter, where python3-grpcio installs
// (another python3 on PATH may lack it).
const debianPython = "/usr/bin/python3"

// The Python sender of examples/python (shown in docs/serve/python.md) against a
// live server of examples/senders.yaml, over gRPC with stubs generated from
// the repository's .proto by Debian's protoc and grpc_tools: for a person
// by day (pythonSenderPrints), one blocked by an override, and one at
// night, whose promotions quiet hours deny (messagesAtNight).
func TestPythonSender(t *testing.T) {
	pyOK := exec.Command(debianPython, "-c", "import grpc, grpc_tools, google.protobuf").Run() == nil
	need(t, "Debian's python3-grpcio, python3-grpc-tools or python3-protobuf", "apt-get install python3-grpcio python3-grpc-tools python3-protobuf", pyOK)
	_, err := exec.LookPath("protoc")
	need(t, "protoc", "apt-get install protobuf-compiler libprotobuf-dev", err == nil)

	b, _ := backendKinds[0].new(t)
	callers, err := serve.ParseCallers("sender:sender-secret-1:take,peek,reserve@push,messages")
	if err != nil {
		t.Fatal(err)
	}
	// push reads overrides here: one person is blocked.
	ps := mustLoad(t, sendersDoc(t))
	e := start(t, b, serve.Config{Callers: callers, Live: func() *policystore.Snapshot { return &policystore.Snapshot{Policies: ps} }})
	blocked := sdk.Subject{"user": "py-blocked"}
	if _, err := e.lim.Admin().SetOverride(context.Background(), ps[0], blocked, driver.Override{Kind: driver.Block, Until: time.Now().Add(time.Hour), Reason: "complaint"}); err != nil {
		t.Fatal(err)
	}

	gen := pythonStubs(t)
	day, night := senderZones(t)
	run := func(user, zone string) []byte {
		t.Helper()
		cmd := exec.Command(debianPython, filepath.Join("..", "examples", "python", "sender.py"))
		cmd.Env = append(os.Environ(), "PYTHONPATH="+gen, "FREQCAP_ADDR="+strings.TrimPrefix(e.url, "http://"),
			"FREQCAP_TOKEN=sender-secret-1", "FREQCAP_USER="+user, "FREQCAP_ZONE="+zone)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sender.py: %v\n%s", err, out)
		}
		return out
	}
	if out := run("py-user", day); !pythonSenderPrints.Match(out) {
		t.Errorf("sender.py in %s printed:\n%s\nwant:\n%s", day, out, pythonSenderPrints)
	}
	out := run(blocked["user"], day)
	if want := regexp.MustCompile(`^send #1: blocked by override #\d+ \(complaint\), retry in 3[56]\d\ds\n`); !want.Match(out) {
		t.Errorf("sender.py for a blocked person printed:\n%s\nwant its first line to match %s", out, want)
	}
	if out := run("py-night", night); !strings.Contains(string(out), messagesAtNight) {
		t.Errorf("sender.py in %s, at night, printed:\n%s\nwant its messages:\n%s", night, out, messagesAtNight)
	}
}

// pythonSenderPrints is what examples/python/sender.py prints for a person
// with no override, in a zone where it is day (senderZones).
var pythonSenderPrints = regexp.MustCompile(`^send #1: allowed, 14 of 15 left this minute
send #2: allowed, 13 of 15 left this minute
send #3: blocked by content-59s, retry in \d+s
retry of #1: allowed=True replayed=True
` + regexp.QuoteMeta(messagesByDay) + `reset: PERMISSION_DENIED
$`)

// pythonStubs generates the Python stubs of proto/freqcap/v1 into a
// temporary directory, with Debian's protoc and grpc_tools, and returns it.
func pythonStubs(t *testing.T) string {
	t.Helper()
	gen := t.TempDir()
	for _, cmd := range [][]string{
		{"protoc", "-I", "../proto", "-I", "/usr/include", "--python_out=" + gen, "freqcap/v1/freqcap.proto"},
		{debianPython, "-m", "grpc_tools.protoc", "-I", "../proto", "-I", "/usr/include", "--grpc_python_out=" + gen, "freqcap/v1/freqcap.proto"},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
	}
	return gen
}

// curl speaks the HTTP/JSON protocol: a take, its headers, a denial (still
// 200, with Retry-After) and an error with its code.
func TestCurl(t *testing.T) {
	_, err := exec.LookPath("curl")
	need(t, "curl", "apt-get install curl", err == nil)
	b, _ := backendKinds[0].new(t)
	e := start(t, b, serve.Config{})
	curl := func(body string) (status string, headers string, out map[string]any) {
		t.Helper()
		raw, err := exec.Command("curl", "-sS", "-i", "-H", "Content-Type: application/json", "-d", body,
			e.url+"/freqcap.v1.FreqcapService/Take").Output()
		if err != nil {
			t.Fatalf("curl: %v", err)
		}
		head, js, _ := strings.Cut(string(raw), "\r\n\r\n")
		status, headers, _ = strings.Cut(head, "\r\n")
		if err := json.Unmarshal([]byte(js), &out); err != nil {
			t.Fatalf("curl: body %q: %v", js, err)
		}
		return status, headers, out
	}
	req := `{"policy": "push", "subject": {"user": "curl", "content": "c"}, "cost": 2}`
	status, headers, out := curl(req)
	d, _ := out["decision"].(map[string]any)
	if status != "HTTP/1.1 200 OK" || d["allowed"] != true || !strings.Contains(headers, "Ratelimit: \"content-59s\";r=0;") {
		t.Errorf("take = %s %v\n%s", status, out, headers)
	}
	status, headers, out = curl(req)
	d, _ = out["decision"].(map[string]any)
	if status != "HTTP/1.1 200 OK" || d["allowed"] != false || !strings.Contains(headers, "Retry-After: ") {
		t.Errorf("denied take = %s %v\n%s", status, out, headers)
	}
	status, _, out = curl(`{"policy": "nope", "subject": {"user": "curl"}}`)
	if status != "HTTP/1.1 404 Not Found" || out["code"] != "not_found" {
		t.Errorf("take of an unknown policy = %s %v", status, out)
	}
}
