package redis

import (
	"go/build"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is this repository's module path; telemetry is the package tree
// storage must not depend on.
const (
	module    = "github.com/freqcap/freqcap"
	telemetry = module + "/fleet"
)

// TestStorageImportsNoTelemetry: no package under backends/ (non-test
// files) imports package fleet or one of its subpackages, directly or
// through another package of this module. The statistics interfaces a
// backend implements live beside the driver, in sdk/driver/stats.
func TestStorageImportsNoTelemetry(t *testing.T) {
	root := filepath.Join("..", "..") // the module's directory
	var roots []string
	err := filepath.WalkDir(filepath.Join(root, "backends"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if _, err := build.ImportDir(p, 0); err == nil {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			roots = append(roots, path.Join(module, filepath.ToSlash(rel)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{module + "/backends/memory", module + "/backends/redis"} {
		if !slices.Contains(roots, want) {
			t.Fatalf("packages under backends/ = %v: %s missing, the check would see nothing", roots, want)
		}
	}
	// via maps each package of this module reached to the package that
	// imported it first (a root to ""), to print the chain.
	via := map[string]string{}
	queue := []string{}
	for _, r := range roots {
		via[r] = ""
		queue = append(queue, r)
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		pkg, err := build.ImportDir(filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(p, module))), 0)
		if err != nil {
			t.Fatalf("%s: %v", chain(via, p), err)
		}
		for _, imp := range pkg.Imports {
			if imp == telemetry || strings.HasPrefix(imp, telemetry+"/") {
				t.Errorf("storage depends on telemetry: %s → %s", chain(via, p), imp)
				continue
			}
			if _, seen := via[imp]; seen || (imp != module && !strings.HasPrefix(imp, module+"/")) {
				continue // the standard library and other modules import nothing of this one
			}
			via[imp] = p
			queue = append(queue, imp)
		}
	}
	if len(via) <= len(roots) {
		t.Fatalf("reached %d packages from %d roots: the walk followed no import", len(via), len(roots))
	}
}

// chain is p and the packages through which a root of via imports it.
func chain(via map[string]string, p string) string {
	s := p
	for q := via[p]; q != ""; q = via[q] {
		s = q + " → " + s
	}
	return s
}
