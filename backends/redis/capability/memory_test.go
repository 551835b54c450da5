package capability

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// withMemory returns a copy of rec answering INFO memory and INFO stats
// as a server with maxmemory and policy would (in both protocols: a bulk
// string in RESP2, a verbatim string in RESP3), or refusing them.
func withMemory(rec *recording, maxmemory int64, policy, refused string) *recording {
	out := *rec
	out.Exchanges = append([]exchange(nil), rec.Exchanges...)
	texts := []string{
		fmt.Sprintf("# Memory\r\nused_memory:1000000\r\nmaxmemory:%d\r\nmaxmemory_human:x\r\nmaxmemory_policy:%s\r\n", maxmemory, policy),
		"# Stats\r\nevicted_keys:7\r\n",
	}
	for i, cmd := range memoryCommands {
		e := exchange{Command: cmd}
		if refused != "" {
			e.RESP2 = "-" + refused + "\r\n"
			e.RESP3 = e.RESP2
		} else {
			e.RESP2 = fmt.Sprintf("$%d\r\n%s\r\n", len(texts[i]), texts[i])
			e.RESP3 = fmt.Sprintf("=%d\r\ntxt:%s\r\n", len(texts[i])+4, texts[i])
		}
		out.Exchanges = append(out.Exchanges, e)
	}
	return &out
}

// TestProbeMemory: the report gives each node's maxmemory, policy and
// evicted_keys, and warns where the node may evict or will not say.
func TestProbeMemory(t *testing.T) {
	base := loadRecording(t, "redis-7.0.15")
	tests := []struct {
		name      string
		rec       *recording
		want      Memory
		warning   string // "" for none
		textLacks string
	}{
		{"noeviction", withMemory(base, 3<<20, "noeviction", ""), Memory{MaxMemory: 3 << 20, Policy: "noeviction", UsedMemory: 1000000, EvictedKeys: 7}, "", ""},
		{"no limit", withMemory(base, 0, "allkeys-lru", ""), Memory{Policy: "allkeys-lru", UsedMemory: 1000000, EvictedKeys: 7}, "", ""},
		{"volatile-lru", withMemory(base, 3<<20, "volatile-lru", ""), Memory{MaxMemory: 3 << 20, Policy: "volatile-lru", UsedMemory: 1000000, EvictedKeys: 7},
			"maxmemory 3.0 MiB (3145728 B) with maxmemory-policy volatile-lru", ""},
		{"refused", withMemory(base, 0, "", "NOPERM this user has no permissions to run the 'info' command"), Memory{Refused: "NOPERM this user has no permissions to run the 'info' command"},
			"whether it evicts freqcap's keys under memory pressure is unknown", ""},
		{"not recorded", base, Memory{Refused: "ERR unknown command 'INFO', with args beginning with: "}, "is unknown", ""},
	}
	for _, tc := range tests {
		for _, proto := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/RESP%d", tc.name, proto), func(t *testing.T) {
				addr := replay(t, tc.rec)
				r, err := Probe(context.Background(), clientFor(t, []string{addr}, proto), Config{})
				if err != nil {
					t.Fatal(err)
				}
				want := tc.want
				want.Addr = addr
				if got := r.Nodes[0].Memory; got != want {
					t.Errorf("Memory = %+v, want %+v", got, want)
				}
				if tc.warning == "" && len(r.Warnings) != 0 || tc.warning != "" && !containsSub(r.Warnings, tc.warning) {
					t.Errorf("Warnings = %q, want %q", r.Warnings, tc.warning)
				}
				d := r.Description()
				if len(d.Memory) != 1 || d.Memory[0].Policy != want.Policy || d.Memory[0].Known != want.Known() || len(d.Warnings) != len(r.Warnings) {
					t.Errorf("Description() = memory %+v, warnings %q; want the report's", d.Memory, d.Warnings)
				}
				if text := r.String(); !strings.Contains(text, want.String()) || (tc.warning != "") != strings.Contains(text, "WARNINGS:") {
					t.Errorf("String() lacks %q or its warnings:\n%s", want.String(), text)
				}
			})
		}
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 3 << 20: "3.0 MiB (3145728 B)", 1536: "1.5 KiB (1536 B)", 5 << 30: "5.0 GiB (5368709120 B)"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
