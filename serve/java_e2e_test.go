package serve_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/sdk/policystore"
	"github.com/freqcap/freqcap/serve"
)

// javaDoc shows the Java sender and what it prints.
const javaDoc = "../docs/serve/java.md"

// javaBuild builds examples/java/Sender.java (examples/java/README.md).
const javaBuild = "../examples/java/build.sh"

// The Java sender of examples/java against a live server following
// examples/senders.yaml (the seed's push and messages), over gRPC with
// stubs generated from the repository's .proto by Debian's protoc and
// grpc-java plugin and compiled (once, into a temporary directory)
// against Debian's grpc-java jars by examples/java/build.sh. By day in the
// recipient's zone it prints what docs/serve/java.md shows (messagesByDay
// among it), a denial by a per-person block for a blocked person, and at
// night its promotions denied for quiet hours (messagesAtNight).
func TestJavaSender(t *testing.T) {
	missing, err := exec.Command("bash", javaBuild, "--missing").Output()
	if err != nil {
		t.Fatalf("%s --missing: %v", javaBuild, err)
	}
	pkgs := strings.Join(strings.Fields(string(missing)), " ")
	need(t, "what the Java sender is built and run with ("+pkgs+")", "apt-get install "+pkgs, pkgs == "")
	md, err := os.ReadFile(javaDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, printed, ok := strings.Cut(string(md), "```text\n")
	printed, _, ok2 := strings.Cut(printed, "```\n")
	if !ok || !ok2 {
		t.Fatalf("%s has no ```text block of what the sender prints", javaDoc)
	}
	if !strings.Contains(printed, messagesByDay) {
		t.Errorf("%s's ```text block does not show the messages by day:\n%s", javaDoc, messagesByDay)
	}
	// The retry times are the server's clock's: any whole number of seconds.
	want := regexp.MustCompile("^" + regexp.MustCompile(`retry in \d+s`).ReplaceAllLiteralString(
		regexp.QuoteMeta(printed), `retry in \d+s`) + "$")

	b, _ := backendKinds[0].new(t)
	callers, err := serve.ParseCallers("sender:sender-secret-1:take,peek,reserve@push,messages ops:ops-secret-1:admin@*")
	if err != nil {
		t.Fatal(err)
	}
	// push reads overrides here: one person is blocked.
	ps := mustLoad(t, sendersDoc(t))
	e := start(t, b, serve.Config{Callers: callers, Live: func() *policystore.Snapshot { return &policystore.Snapshot{Policies: ps} }})
	block, err := http.NewRequest("POST", e.url+"/freqcap.v1.OverrideService/SetOverride", strings.NewReader(
		`{"policy": "push", "subject": {"user": "java-blocked"}, "override": {"kind": "OVERRIDE_KIND_BLOCK", "reason": "complaint"}, "ttl": "3600s"}`))
	if err != nil {
		t.Fatal(err)
	}
	block.Header.Set("Authorization", "Bearer ops-secret-1")
	block.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(block)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("SetOverride: %s", resp.Status)
	}

	out := t.TempDir()
	if build, err := exec.Command("bash", javaBuild, out).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", javaBuild, err, build)
	}
	day, night := senderZones(t)
	run := func(user, zone string) string {
		t.Helper()
		cmd := exec.Command("java", "-jar", filepath.Join(out, "sender.jar"))
		cmd.Env = append(os.Environ(), "FREQCAP_ADDR="+strings.TrimPrefix(e.url, "http://"), "FREQCAP_TOKEN=sender-secret-1",
			"FREQCAP_ZONE="+zone)
		if user != "" {
			cmd.Env = append(cmd.Env, "FREQCAP_USER="+user)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		got, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			t.Fatalf("java -jar sender.jar: %v\n%s%s", err, got, stderr.String())
		}
		return string(got)
	}
	if got := run("", day); !want.MatchString(got) {
		t.Errorf("the Java sender in %s printed:\n%s\nwant what %s shows:\n%s", day, got, javaDoc, printed)
	}
	if got, want := run("java-blocked", day), regexp.MustCompile(`^send #1: blocked by override #\d+ \(complaint\), retry in 3[56]\d\ds\n`); !want.MatchString(got) {
		t.Errorf("the Java sender for a blocked person printed:\n%s\nwant its first line to match %s", got, want)
	}
	if got := run("java-night", night); !strings.Contains(got, messagesAtNight) {
		t.Errorf("the Java sender in %s, at night, printed:\n%s\nwant its messages:\n%s", night, got, messagesAtNight)
	}
}

// docs/serve/java.md shows examples/java/Sender.java, which TestJavaSender
// runs, and examples/java/README.md its build script.
func TestServeDocsJavaSnippet(t *testing.T) {
	for _, c := range []struct{ doc, src, block string }{
		{javaDoc, "../examples/java/Sender.java", "```java\n"},
		{"../examples/java/README.md", javaBuild, "```sh\n"},
	} {
		md, err := os.ReadFile(c.doc)
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(c.src)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(md), c.block+string(src)+"```\n") {
			t.Errorf("%s does not show %s verbatim in a %s block", c.doc, c.src, strings.TrimSpace(c.block))
		}
	}
}
