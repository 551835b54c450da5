package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
)

// TestDetectReplica: detect pointed at a read-only replica says it is a
// replica, names its master and reports no usable strategy (it used to
// report "1 master" and plain Lua everywhere, and takes then failed with
// READONLY); its JSON says the same.
func TestDetectReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a master and a replica")
	}
	master := redistest.NewServer(t)
	replica := redistest.NewServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: replica.Addr()})
	defer c.Close()
	host, port, _ := strings.Cut(master.Addr(), ":")
	if err := c.SlaveOf(context.Background(), host, port).Err(); err != nil {
		t.Fatal(err)
	}

	out, err := captureStdout(t, func() error { return runDetect([]string{"--redis", replica.Addr()}) })
	if err != nil {
		t.Fatalf("detect = %v:\n%s", err, out)
	}
	for _, want := range []string{
		"server " + replica.Addr() + " (1 replica)",
		"replica of " + master.Addr(),
		"fixed_window    unavailable",
		"sliding_window  unavailable",
		"sliding_log     unavailable",
		"gcra            unavailable",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("detect output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"1 master", "usable", "  lua"} {
		if strings.Contains(out, bad) {
			t.Errorf("detect output has %q:\n%s", bad, out)
		}
	}

	out, err = captureStdout(t, func() error { return runDetect([]string{"--redis", replica.Addr(), "--json"}) })
	if err != nil {
		t.Fatalf("detect --json = %v:\n%s", err, out)
	}
	var rep struct {
		Nodes []struct {
			Replica bool   `json:"replica"`
			Master  string `json:"master"`
		} `json:"nodes"`
		Choices []struct {
			Strategy string `json:"strategy"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Nodes) != 1 || !rep.Nodes[0].Replica || rep.Nodes[0].Master != master.Addr() {
		t.Errorf("detect --json nodes = %+v, want one replica of %s", rep.Nodes, master.Addr())
	}
	for _, ch := range rep.Choices {
		if ch.Strategy != "unavailable" {
			t.Errorf("detect --json strategy %q on a replica, want unavailable", ch.Strategy)
		}
	}
}
