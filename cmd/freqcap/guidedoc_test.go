package main

import (
	"os"
	"strings"
	"testing"
)

// maxGuideLines bounds the guides a person reads in ten minutes; their
// examples live in transcripts of their own (docs/serve, docs/console).
const maxGuideLines = 400

// TestGuidesAreShort keeps docs/SERVE.md and docs/CONSOLE.md guides, not
// transcripts: at most maxGuideLines lines each, and no replayed example
// in them.
func TestGuidesAreShort(t *testing.T) {
	for _, f := range []string{"../../docs/SERVE.md", "../../docs/CONSOLE.md"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(data), "\n"); n > maxGuideLines {
			t.Errorf("%s has %d lines, want at most %d: move examples and reference to its transcripts", f, n, maxGuideLines)
		}
		if strings.Contains(string(data), "```http request") {
			t.Errorf("%s holds a replayed example: it belongs in a transcript file", f)
		}
	}
}
