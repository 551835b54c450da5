package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDesignNamesEveryPackage: docs/DESIGN.md's layer diagram (the first
// code block under "## Layers") names every Go package of the repository
// but the generated ones under gen/, and names none that is gone.
func TestDesignNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("../../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "## Layers\n")
	if i < 0 {
		t.Fatal("docs/DESIGN.md has no ## Layers")
	}
	a := strings.Index(s[i:], "```\n")
	if a < 0 {
		t.Fatal("## Layers has no code block")
	}
	block := s[i+a+4:]
	block = block[:strings.Index(block, "```")]
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`[a-z][a-z0-9]*(?:/[a-z0-9]+)+|\b(?:sdk|console|serve|client|fleet|middleware|ratelimitheaders|lua)\b`).FindAllString(block, -1) {
		named[m] = true
	}
	var pkgs []string
	err = filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", p)
		if d.IsDir() {
			if base := d.Name(); rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "node_modules" || rel == "gen" || strings.HasPrefix(rel, "gen/")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dir := filepath.ToSlash(filepath.Dir(rel))
			if len(pkgs) == 0 || pkgs[len(pkgs)-1] != dir {
				pkgs = append(pkgs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 30 {
		t.Fatalf("found %d packages, want more: %v", len(pkgs), pkgs)
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[p] = true
		if !named[p] {
			t.Errorf("docs/DESIGN.md's layer diagram does not name package %s", p)
		}
	}
	for n := range named {
		if strings.HasPrefix(n, "gen/") {
			continue
		}
		if _, err := os.Stat("../../" + n); err != nil && !seen[n] {
			t.Errorf("docs/DESIGN.md's layer diagram names %s, which does not exist", n)
		}
	}
}
