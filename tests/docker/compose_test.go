package docker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/sdk/conformance/containers"
)

// repoRoot is the repository's top directory (this file is tests/docker/…).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// composeCommand returns the Compose CLI: docker-compose, the docs'
// spelling (Debian's 1.29, which scripts/test.sh installs when no Compose
// is found), if present, else the v2 plugin (docker compose).
func composeCommand(t *testing.T) []string {
	t.Helper()
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	msg := "neither `docker compose` nor docker-compose is installed (apt-get install docker-compose)"
	if containers.Required() {
		t.Fatal(msg)
	}
	t.Skip("SKIPPED: " + msg)
	return nil
}

// compose runs the Compose CLI on the repository's docker-compose.yml with
// env added to the environment.
type compose struct {
	t       *testing.T
	cmd     []string
	root    string
	project string
	env     []string
}

func newCompose(t *testing.T, env ...string) *compose {
	t.Helper()
	return &compose{
		t: t, cmd: composeCommand(t), root: repoRoot(t),
		project: "freqcaptest" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36),
		env:     env,
	}
}

// run runs a compose subcommand and returns its output and error.
func (c *compose) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	full := append(append([]string{}, c.cmd[1:]...),
		"--project-directory", c.root, "-f", filepath.Join(c.root, "docker-compose.yml"), "-p", c.project)
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, c.cmd[0], full...)
	cmd.Dir = c.root
	// Start from a clean slate of FREQCAP_* variables so the host's
	// settings do not leak into the check.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FREQCAP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, c.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

const (
	testAdminToken   = "admin-token-for-compose-test"
	testCheckerToken = "checker-token-for-compose-test"
	testViewerToken  = "viewer-token-for-compose-test"
	testServeSecret  = "sender-secret-for-compose-test"
	testServeTokens  = "sender:" + testServeSecret + ":take,peek,reserve,inspect@*"
)

// TestComposeConfig validates docker-compose.yml with `config`: with and
// without the modules profile, without any token (commands that start
// nothing, such as down, must work without them: the console itself
// refuses to start without credentials), and that every port is
// published on 127.0.0.1 only.
func TestComposeConfig(t *testing.T) {
	tokens := []string{"FREQCAP_ADMIN_TOKEN=" + testAdminToken, "FREQCAP_VIEWER_TOKEN=" + testViewerToken}
	tests := []struct {
		name    string
		env     []string
		args    []string
		wantErr string // substring of the output when config must fail
	}{
		{name: "default", env: tokens},
		{name: "modules profile", env: tokens, args: []string{"--profile", "modules"}},
		{name: "local images", env: append([]string{"FREQCAP_IMAGE_REDIS=freqcap/redis:7.0-debian"}, tokens...)},
		{name: "no tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCompose(t, tc.env...)
			args := append(append([]string{}, tc.args...), "config")
			out, err := c.run(time.Minute, args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(out, tc.wantErr) {
					t.Fatalf("compose config without tokens = %v, %q; want an error naming %s", err, out, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("compose %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			for _, svc := range []string{"redis:", "console:", "serve-1:", "serve-2:"} {
				if !strings.Contains(out, "\n  "+svc) {
					t.Errorf("compose config lacks service %s\n%s", svc, out)
				}
			}
			if !strings.Contains(out, "--demo=true") {
				t.Errorf("compose config: the console runs without demo traffic\n%s", out)
			}
			if tc.env == nil && strings.Contains(out, testAdminToken) {
				t.Errorf("compose config without tokens shows a token\n%s", out)
			}
			if len(tc.args) > 0 {
				for _, svc := range []string{"tairhash:", "cell:", "console-tairhash:", "console-cell:"} {
					if !strings.Contains(out, "\n  "+svc) {
						t.Errorf("compose config with %v lacks service %s", tc.args, svc)
					}
				}
			}
			ports := publishedPorts(out)
			if len(ports) < 4 {
				t.Errorf("compose config publishes %q, want at least redis, console and the two serve replicas", ports)
			}
			for _, p := range ports {
				if !strings.HasPrefix(p, "127.0.0.1:") && !strings.Contains(p, "host_ip: 127.0.0.1") {
					t.Errorf("port %q is published beyond 127.0.0.1", p)
				}
			}
		})
	}
}

// publishedPorts returns the entries under every "ports:" key of compose
// config output (short syntax "ip:host:container" or a long-syntax block).
func publishedPorts(config string) []string {
	var ports []string
	lines := strings.Split(config, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "ports:" {
			continue
		}
		indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
		var cur []string
		for i+1 < len(lines) {
			l := lines[i+1]
			in := len(l) - len(strings.TrimLeft(l, " "))
			if strings.TrimSpace(l) == "" || in < indent || (in == indent && !strings.HasPrefix(strings.TrimSpace(l), "-")) {
				break
			}
			i++
			s := strings.TrimSpace(l)
			if strings.HasPrefix(s, "- ") && len(cur) > 0 {
				ports = append(ports, strings.Join(cur, " "))
				cur = nil
			}
			cur = append(cur, strings.Trim(strings.TrimPrefix(s, "- "), `"`))
		}
		if len(cur) > 0 {
			ports = append(ports, strings.Join(cur, " "))
		}
	}
	return ports
}

func TestPublishedPorts(t *testing.T) {
	short := "services:\n  a:\n    ports:\n    - 127.0.0.1:1:2/tcp\n    - 0.0.0.0:3:4/tcp\n    restart: x\n"
	long := "services:\n  a:\n    ports:\n      - target: 6379\n        published: \"6379\"\n        host_ip: 127.0.0.1\n    restart: x\n"
	if got := publishedPorts(short); len(got) != 2 || got[0] != "127.0.0.1:1:2/tcp" || got[1] != "0.0.0.0:3:4/tcp" {
		t.Errorf("publishedPorts(short) = %q", got)
	}
	if got := publishedPorts(long); len(got) != 1 || !strings.Contains(got[0], "host_ip: 127.0.0.1") {
		t.Errorf("publishedPorts(long) = %q", got)
	}
}

// localImage returns the image named by env, or def; the test skips (or
// fails under FREQCAP_REQUIRE_SERVERS=1) when it is not present locally:
// compose up here must not pull.
func localImage(t *testing.T, env, def string) string {
	t.Helper()
	img := os.Getenv(env)
	if img == "" {
		img = def
	}
	if exec.Command("docker", "image", "inspect", img).Run() != nil {
		msg := fmt.Sprintf("image %s (%s) is not present; run scripts/build-images.sh", img, env)
		if containers.Required() {
			t.Fatal(msg)
		}
		t.Skip("SKIPPED: " + msg)
	}
	return img
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestComposeUp runs the docs' `docker-compose up -d` (redis and the
// console, from local images) and checks that the console answers, that
// its API needs a token, and that a check through it lands in the compose
// Redis; then the docs' `down` commands, without the token variables.
func TestComposeUp(t *testing.T) {
	containers.Pool(t) // skips without an engine
	redisImage := localImage(t, "FREQCAP_IMAGE_REDIS", containers.LocalRedisImage)
	consoleImage := localImage(t, "FREQCAP_IMAGE_CONSOLE", "freqcap/console:dev")
	redisPort, consolePort := freePort(t), freePort(t)
	servePorts := []int{freePort(t), freePort(t)}
	ups, downs := documentedRuns(t, "up"), documentedRuns(t, "down")
	c := newCompose(t,
		"FREQCAP_IMAGE_REDIS="+redisImage, "FREQCAP_IMAGE_CONSOLE="+consoleImage,
		"FREQCAP_REDIS_PORT="+strconv.Itoa(redisPort), "FREQCAP_CONSOLE_PORT="+strconv.Itoa(consolePort),
		"FREQCAP_ADMIN_TOKEN="+testAdminToken, "FREQCAP_VIEWER_TOKEN="+testViewerToken,
		"FREQCAP_CHECKER_TOKEN="+testCheckerToken, "FREQCAP_DEMO=false",
		"FREQCAP_SERVE_TOKENS="+testServeTokens,
		"FREQCAP_SERVE_1_PORT="+strconv.Itoa(servePorts[0]), "FREQCAP_SERVE_2_PORT="+strconv.Itoa(servePorts[1]),
	)
	t.Cleanup(func() {
		// down needs none of the tokens.
		bare := *c
		bare.env = nil
		for _, kv := range c.env {
			if !strings.Contains(kv, "TOKEN=") {
				bare.env = append(bare.env, kv)
			}
		}
		for _, down := range downs {
			if out, err := bare.run(2*time.Minute, down...); err != nil {
				t.Errorf("compose %s without the token variables: %v\n%s", strings.Join(down, " "), err, out)
			}
		}
		// Whatever the docs say, leave nothing behind.
		if out, err := bare.run(2*time.Minute, "down", "-v", "--remove-orphans", "-t", "2"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})
	// The images are local (localImage), so up builds nothing.
	for _, up := range ups {
		if out, err := c.run(3*time.Minute, up...); err != nil {
			t.Fatalf("compose %s: %v\n%s", strings.Join(up, " "), err, out)
		}
	}
	base := "http://127.0.0.1:" + strconv.Itoa(consolePort)
	hc := &http.Client{Timeout: 2 * time.Second}

	// The console answers (it starts once redis is healthy).
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := hc.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			logs, _ := c.run(time.Minute, "logs", "--no-color", "--tail", "40")
			t.Fatalf("console at %s/healthz did not answer 200 within 60s (last: %v)\n%s", base, err, logs)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The API needs a token.
	if code, _ := httpDo(t, hc, "GET", base+"/api/v1/policies", "", nil); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("GET /api/v1/policies without a token = %d, want 401 or 403", code)
	}
	code, body := httpDo(t, hc, "GET", base+"/api/v1/policies", testViewerToken, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/policies = %d, want 200\n%s", code, body)
	}
	var pols struct {
		Policies []struct {
			Name       string   `json:"name"`
			Dimensions []string `json:"dimensions"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(body, &pols); err != nil || len(pols.Policies) == 0 {
		t.Fatalf("GET /api/v1/policies = %s, %v; want at least one policy", body, err)
	}

	// The console's retired decision API names serve's instead, and
	// decides nothing.
	p := pols.Policies[0]
	subject := map[string]string{}
	for _, d := range p.Dimensions {
		subject[d] = "compose-test-" + d
	}
	req, _ := json.Marshal(map[string]any{"policy": p.Name, "subject": subject})
	if code, body := httpDo(t, hc, "POST", base+"/api/v1/check", testCheckerToken, req); code != http.StatusGone || !bytes.Contains(body, []byte("/freqcap.v1.FreqcapService/Take")) {
		t.Errorf("POST /api/v1/check = %d, want 410 naming serve's Take\n%s", code, body)
	}

	checkServeReplicas(t, c, hc, base, servePorts)
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + strconv.Itoa(redisPort), MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n == 0 {
		t.Errorf("compose redis DBSIZE after serve's takes = %d, %v; want keys written by serve", n, err)
	}
}

func httpDo(t *testing.T, hc *http.Client, method, url, token string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b
}
