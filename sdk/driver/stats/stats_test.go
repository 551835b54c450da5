package stats_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestLeaf: the statistics contract imports only the standard library, so
// a backend implements it without importing sdk or fleet.
func TestLeaf(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("package stats imports %s: want the standard library only", imp)
		}
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports read: the check saw nothing")
	}
}
