package main

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestTable runs every configuration briefly against a real Redis and
// checks the table: one row per run, raw(R) at 1.00 of itself, and no key
// of the program's left behind.
func TestTable(t *testing.T) {
	addr := redistest.Standalone(t)
	var out strings.Builder
	cfg := config{addr: addr, workers: 2, subjects: 50, duration: 100 * time.Millisecond, rounds: 2, maxDecisions: 200}
	if err := mainErr(cfg, &out); err != nil {
		t.Fatalf("mainErr: %v\n%s", err, out.String())
	}
	table := out.String()
	for _, row := range []string{
		"| raw(1) | 1 |", "| raw(2) | 2 |", "| raw(4) | 4 |",
		"| freqcap fixed window | 1 |", "| freqcap fixed window | 4 |",
		"| freqcap sliding window | 1 |", "| freqcap sliding window | 4 |",
		"| freqcap GCRA | 1 |", "| freqcap GCRA | 4 |",
		"| freqcap sliding log | 1 |", "| freqcap sliding log | 4 |",
		"| ulule/limiter (fixed window) | 1 |", "| ulule/limiter (fixed window) | 2 |", "| ulule/limiter (fixed window) | 4 |",
		"| redis_rate (GCRA) | 1 |", "| redis_rate (GCRA) | 2 |", "| redis_rate (GCRA) | 4 |",
		"| ZSET + ZCOUNT per rule (sliding log) | 1 |", "| ZSET + ZCOUNT per rule (sliding log) | 2 |", "| ZSET + ZCOUNT per rule (sliding log) | 4 |",
	} {
		if strings.Count(table, row) != 1 {
			t.Errorf("the table has %d rows starting %q, want 1:\n%s", strings.Count(table, row), row, table)
		}
	}
	for _, r := range []string{"raw(1) | 1", "raw(2) | 2", "raw(4) | 4"} {
		i := strings.Index(table, "| "+r+" |")
		if i < 0 || !strings.HasSuffix(strings.SplitN(table[i:], "\n", 2)[0], "| 1.00 |") {
			t.Errorf("%s is not at 1.00 of itself:\n%s", r, table)
		}
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	keys, err := c.Keys(context.Background(), "peers-*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("%d keys left under peers-*, e.g. %q", len(keys), keys[0])
	}
}

// TestOnlyLoopback checks that -redis refuses an address off 127.0.0.1.
func TestOnlyLoopback(t *testing.T) {
	cfg := config{addr: "10.0.0.1:6379", workers: 1, subjects: 1, duration: time.Millisecond, rounds: 1, maxDecisions: 1}
	if err := mainErr(cfg, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "only 127.0.0.1") {
		t.Errorf("mainErr with -redis 10.0.0.1:6379: %v, want an error saying only 127.0.0.1", err)
	}
}
