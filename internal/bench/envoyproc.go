package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Envoy's rate-limit service, as the comparison builds it: the module's
// service command at a pinned version (the one `go list -m
// github.com/envoyproxy/ratelimit@latest` gave when the comparison was
// written: a pseudo-version of its main branch of 2026-01-22).
const (
	EnvoyRLSModule  = "github.com/envoyproxy/ratelimit"
	EnvoyRLSPackage = EnvoyRLSModule + "/src/service_cmd"
	EnvoyRLSVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

// EnvoyRLSInstall is the command that builds Envoy's rate-limit service
// into dir: `go install` of the pinned version, built with the module's
// own go.mod and go.sum (checked against the Go checksum database), so
// that none of its dependencies enters freqcap's go.mod.
func EnvoyRLSInstall(dir string) []string {
	return []string{"env", "GOBIN=" + dir, "GOFLAGS=-mod=mod", "go", "install", EnvoyRLSPackage + "@" + EnvoyRLSVersion}
}

// DefaultEnvoyRLSBin is where EnsureEnvoyRLS keeps the binary: under the
// user's cache directory, by version.
func DefaultEnvoyRLSBin() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	return filepath.Join(d, "freqcap", "envoy-ratelimit", EnvoyRLSVersion, "service_cmd"), nil
}

// EnsureEnvoyRLS returns the binary of Envoy's rate-limit service at
// DefaultEnvoyRLSBin, building it there first (EnvoyRLSInstall, which
// needs the go command and the Go module proxy) when it is missing; the
// build's output goes to log. The error says how to build it by hand.
func EnsureEnvoyRLS(ctx context.Context, log io.Writer) (string, error) {
	bin, err := DefaultEnvoyRLSBin()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	dir := filepath.Dir(bin)
	install := EnvoyRLSInstall(dir)
	how := fmt.Sprintf("build it with `%s` (needs Go and the Go module proxy), or pass -envoy-bin PATH", strings.Join(install, " "))
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("bench: Envoy's rate-limit service is not at %s and there is no go command to build it: %s", bin, how)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	fmt.Fprintf(log, "building Envoy's rate-limit service: %s\n", strings.Join(install, " "))
	cmd := exec.CommandContext(ctx, install[0], install[1:]...)
	cmd.Dir = dir // outside any module: the version's own go.mod decides
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("bench: building Envoy's rate-limit service failed (%v): %s", err, how)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("bench: %s built nothing at %s: %s", strings.Join(install, " "), bin, how)
	}
	return bin, nil
}

// process is a child process of the comparison (a service or a
// redis-server).
type process struct {
	name  string
	cmd   *exec.Cmd
	addr  string
	lines chan string   // its output, line by line, while someone reads
	done  chan struct{} // closed when it has exited
	tail  tailBuffer
}

// tailBuffer keeps the last lines a process wrote, for errors.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailBuffer) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 10 {
		t.lines = t.lines[1:]
	}
	t.lines = append(t.lines, l)
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// startProcess starts bin with args and env (added to this process's),
// its output copied to log, each line prefixed.
func startProcess(ctx context.Context, bin string, args, env []string, log io.Writer, prefix string) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = childAttr()
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	p := &process{name: filepath.Base(bin), cmd: cmd, lines: make(chan string, 64), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", bin, err)
	}
	go func() {
		_ = cmd.Wait()
		w.Close()
		close(p.done)
	}()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			p.tail.add(l)
			fmt.Fprintf(log, "%s%s\n", prefix, l)
			select {
			case p.lines <- l:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	return p, nil
}

// waitLine waits up to 30 s for a line of the process's output starting
// with prefix and returns the rest of it.
func (p *process) waitLine(ctx context.Context, prefix string) (string, error) {
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case l := <-p.lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest, nil
			}
		case <-p.done:
			return "", fmt.Errorf("it exited: %s", p.tail.String())
		case <-t.C:
			return "", fmt.Errorf("no line %q within 30s: %s", prefix, p.tail.String())
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// waitHTTP waits up to 30 s for url to answer 200.
func (p *process) waitHTTP(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("it exited: %s", p.tail.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within 30s: %s", url, p.tail.String())
		}
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (p *process) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpu is the process's CPU time so far (user + system, every thread, in
// seconds).
func (p *process) cpu() (float64, error) {
	s, err := procCPU(p.cmd.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("bench: the CPU time of %s: %w", p.name, err)
	}
	return s, nil
}

// startRedis starts a redis-server of its own on a free loopback port,
// without persistence, in dir.
func startRedis(ctx context.Context, cfg EnvoyConfig, dir string) (*process, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var last error
	for range 5 {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		args := []string{"--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--loglevel", "warning", "--logfile", ""}
		p, err := startProcess(ctx, cfg.RedisServer, args, nil, cfg.Log, "redis-server "+addr+": ")
		if err != nil {
			return nil, err
		}
		p.addr = addr
		if last = p.waitPing(ctx); last == nil {
			return p, nil
		}
		p.stop()
	}
	return nil, fmt.Errorf("bench: redis-server: %w", last)
}

// waitPing waits up to 10 s for the redis-server to answer.
func (p *process) waitPing(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			b := make([]byte, 7)
			n, _ := io.ReadFull(c, b)
			c.Close()
			if string(b[:n]) == "+PONG\r\n" {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("it exited: %s", p.tail.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("no PONG within 10s")
		}
	}
}

// freePorts returns n loopback ports free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
