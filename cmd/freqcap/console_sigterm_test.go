package main

import (
	"bytes"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestConsoleSIGTERMLogs runs the built binary's console (memory backend),
// sends SIGTERM once it listens, and checks that it says it is shutting
// down, then that it stopped, and exits 0.
func TestConsoleSIGTERMLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "freqcap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out lockedBuffer
	cmd := exec.Command(bin, "console", "--addr", addr)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "freqcap console on http://") {
		if time.Now().After(deadline) {
			t.Fatalf("the console did not start within 30 s:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling its output until a deadline
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the console exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the console did not exit within 30 s of SIGTERM:\n%s", out.String())
	}
	got := out.String()
	i, j := strings.Index(got, "console: shutting down"), strings.Index(got, "console: stopped")
	if i < 0 || j < i {
		t.Errorf("after SIGTERM the console's output lacks 'console: shutting down' then 'console: stopped':\n%s", got)
	}
}
