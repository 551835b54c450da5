//go:build record

package capability

// The recorder of testdata/detect: not a test. Run it against a real
// server with
//
//	FREQCAP_RECORD_ADDR=127.0.0.1:6379 FREQCAP_RECORD_NAME=redis-x \
//	FREQCAP_RECORD_SERVER="Redis x.y" go test -tags record -run TestRecord ./backends/redis/capability/

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// record captures addr's replies to every probe command in both protocols.
func record(addr, server string) (*recording, error) {
	rec := &recording{Server: server, Origin: "recorded"}
	var cmds [][]string
	seen := map[string]bool{}
	for _, key := range []string{"", "fc:{probe}"} {
		for _, c := range probeCommands(key) {
			if k := strings.Join(c, "\x00"); !seen[k] {
				seen[k] = true
				cmds = append(cmds, c)
			}
		}
	}
	rec.Exchanges = append(rec.Exchanges, exchange{Command: []string{"HELLO", "2"}}, exchange{Command: []string{"HELLO", "3"}})
	for _, c := range cmds {
		rec.Exchanges = append(rec.Exchanges, exchange{Command: c})
	}
	for _, proto := range []string{"2", "3"} {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		r := bufio.NewReader(conn)
		for i := range rec.Exchanges {
			e := &rec.Exchanges[i]
			if e.Command[0] == "HELLO" && e.Command[1] != proto {
				continue
			}
			if err := writeCommand(conn, e.Command); err != nil {
				conn.Close()
				return nil, err
			}
			f, err := readFrame(r)
			if err != nil {
				conn.Close()
				return nil, fmt.Errorf("%q: %w", e.Command, err)
			}
			if proto == "2" {
				e.RESP2 = string(f)
			} else {
				e.RESP3 = string(f)
			}
		}
		conn.Close()
	}
	return rec, nil
}

// TestRecord writes testdata/detect/$FREQCAP_RECORD_NAME.json from the
// server at $FREQCAP_RECORD_ADDR, described by $FREQCAP_RECORD_SERVER. It
// is how the recorded replies were made.
func TestRecord(t *testing.T) {
	addr, name := os.Getenv("FREQCAP_RECORD_ADDR"), os.Getenv("FREQCAP_RECORD_NAME")
	if addr == "" || name == "" {
		t.Fatal("set FREQCAP_RECORD_ADDR, FREQCAP_RECORD_NAME and FREQCAP_RECORD_SERVER to record a server's probe replies")
	}
	server := os.Getenv("FREQCAP_RECORD_SERVER")
	if server == "" {
		t.Fatal("FREQCAP_RECORD_SERVER must say which server this is")
	}
	rec, err := record(addr, server)
	if err != nil {
		t.Fatal(err)
	}
	rec.Note = os.Getenv("FREQCAP_RECORD_NOTE")
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "..", "testdata", "detect", name+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

func writeCommand(w io.Writer, args []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
