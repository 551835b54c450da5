package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// TestReadmeQuickStart keeps the README's quick start the same program as
// this one (from its package clause on).
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```go\npackage main\n")
	if !ok {
		t.Fatal("README.md has no Go block starting with package main")
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatal("README.md: the quick start's code block does not end")
	}
	_, prog, ok := strings.Cut(string(src), "package main\n")
	if !ok {
		t.Fatal("main.go has no package clause")
	}
	if block != prog {
		t.Errorf("README.md's quick start differs from examples/quickstart/main.go:\n--- README\n%s--- main.go\n%s", block, prog)
	}
}

// TestQuickStartOutput runs the quick start and checks the output its
// comment promises.
func TestQuickStartOutput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	main()
	os.Stdout = old
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != "true 14\n" {
		t.Errorf("quick start printed %q, want %q", got, "true 14\n")
	}
}
