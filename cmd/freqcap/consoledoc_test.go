package main

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"testing"
)

// TestConsoleFlagsDocumented: every flag of freqcap console is named in
// docs/CONSOLE.md (as code starting `--name`), and every such `--name`
// there is a flag.
func TestConsoleFlagsDocumented(t *testing.T) {
	var usage bytes.Buffer
	if _, err := parseConsoleFlags([]string{"-h"}, &usage); err != flag.ErrHelp {
		t.Fatalf("parseConsoleFlags(-h) error = %v, want flag.ErrHelp", err)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`).FindAllStringSubmatch(usage.String(), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 10 {
		t.Fatalf("found %d flags in the usage, want more:\n%s", len(flags), usage.String())
	}
	doc, err := os.ReadFile("../../docs/CONSOLE.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`--([a-z-]+)").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	for f := range flags {
		if !documented[f] {
			t.Errorf("flag --%s is not in docs/CONSOLE.md", f)
		}
	}
	for f := range documented {
		if !flags[f] {
			t.Errorf("docs/CONSOLE.md names --%s, which freqcap console does not have", f)
		}
	}
}
