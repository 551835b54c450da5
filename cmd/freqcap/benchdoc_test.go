package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestBenchmarksDocOpensWithATable: docs/BENCHMARKS.md opens with what a
// user compares, one table of at most 60 lines under the title, not a
// development log (that goes to docs/benchmarks/HISTORY.md), and each
// relative link of it names a file that exists.
func TestBenchmarksDocOpensWithATable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	if lines[0] != "# Benchmarks" {
		t.Fatalf("first line %q, want the title # Benchmarks", lines[0])
	}
	first := -1 // the first table's first line
	for i, l := range lines {
		if strings.HasPrefix(l, "#") && i > 0 && first < 0 {
			t.Fatalf("line %d: heading %q before the table: the top is the table", i+1, l)
		}
		if strings.HasPrefix(l, "|") {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatal("no table in docs/BENCHMARKS.md")
	}
	last := first
	for last+1 < len(lines) && strings.HasPrefix(lines[last+1], "|") {
		last++
	}
	if n := last - first + 1; n > 60 || n < 4 {
		t.Errorf("the top table has %d lines, want 4 to 60", n)
	}
	if last >= 80 {
		t.Errorf("the top table ends at line %d: keep it in the first screenful", last+1)
	}
	for _, name := range []string{"raw(R)", "ulule", "redis_rate", "TairHash", "redis-cell", "7.4.1", "serve", "Envoy", "memory"} {
		if !strings.Contains(strings.Join(lines[:last+1], "\n"), name) {
			t.Errorf("the top does not name %s", name)
		}
	}
	for _, m := range regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(string(doc), -1) {
		if _, err := os.Stat("../../docs/" + m[1]); err != nil {
			t.Errorf("link %s: %v", m[1], err)
		}
	}
}
