package capability

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A recording holds a server's raw replies to the probe commands, in both
// protocols, as testdata/detect/*.json stores them (see its README).
type recording struct {
	// Server says which server produced the replies.
	Server string `json:"server"`
	// Origin is "recorded" (captured from the server by TestRecord) or
	// "written" (typed in from replies observed on real servers).
	Origin    string     `json:"origin"`
	Note      string     `json:"note,omitempty"`
	Exchanges []exchange `json:"exchanges"`
}

type exchange struct {
	Command []string `json:"command"`
	RESP2   string   `json:"resp2,omitempty"`
	RESP3   string   `json:"resp3,omitempty"`
}

func loadRecording(t *testing.T, name string) *recording {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "detect", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec recording
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, e := range rec.Exchanges {
		for _, raw := range []string{e.RESP2, e.RESP3} {
			if raw == "" {
				continue
			}
			r := bufio.NewReader(strings.NewReader(raw))
			if _, err := readFrame(r); err != nil {
				t.Fatalf("%s: %q: bad RESP: %v", name, e.Command, err)
			}
			if r.Buffered() != 0 {
				t.Fatalf("%s: %q: trailing bytes after the reply", name, e.Command)
			}
		}
	}
	return &rec
}

func (rec *recording) find(cmd []string) *exchange {
	for i, e := range rec.Exchanges {
		if len(e.Command) == len(cmd) && strings.EqualFold(strings.Join(e.Command, "\x00"), strings.Join(cmd, "\x00")) {
			return &rec.Exchanges[i]
		}
	}
	return nil
}

// readFrame reads one RESP2 or RESP3 reply and returns its raw bytes.
func readFrame(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("bad line %q", line)
	}
	out := line
	body := string(line[1 : len(line)-2])
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return out, nil
	case '$', '=', '!':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return out, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return append(out, buf...), nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for i := 0; i < n; i++ {
			f, err := readFrame(r)
			if err != nil {
				return nil, err
			}
			out = append(out, f...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown RESP type %q", line[0])
}

// readCommand reads a client's command: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not a command: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, l+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:l])
	}
	return args, nil
}

// replay serves rec on a loopback port, answering each command with its
// recorded reply in the protocol the client chose with HELLO, and anything
// else (CLIENT SETINFO, …) with an unknown-command error. It returns the
// address; the listener closes with the test.
func replay(t *testing.T, rec *recording) string {
	t.Helper()
	return replayWith(t, rec, nil)
}

// replayWith is replay calling hook (if not nil) with every command.
func replayWith(t *testing.T, rec *recording, hook func(args []string)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serveRecording(c, rec, hook)
			}()
		}
	}()
	return ln.Addr().String()
}

func serveRecording(c net.Conn, rec *recording, hook func([]string)) {
	r := bufio.NewReader(c)
	resp3 := false
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		if hook != nil {
			hook(args)
		}
		var out string
		e := rec.find(args)
		switch {
		case e != nil && resp3 && e.RESP3 != "":
			out = e.RESP3
		case e != nil && !resp3 && e.RESP2 != "":
			out = e.RESP2
		default:
			out = fmt.Sprintf("-ERR unknown command '%s', with args beginning with: \r\n", args[0])
		}
		if e != nil && strings.EqualFold(args[0], "HELLO") && len(args) > 1 {
			resp3 = args[1] == "3"
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}
