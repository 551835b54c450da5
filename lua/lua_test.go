package lua

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// TestDocNamesEverySource: the package doc, where an operator reads what
// runs in their Redis, names every source file FS holds (an algorithm
// fragment by its name without alg/ and .lua), and FS holds every .lua
// file of the directory.
func TestDocNamesEverySource(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "lua.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	var n int
	err = fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		name := p
		if rest, ok := strings.CutPrefix(p, "alg/"); ok {
			name = strings.TrimSuffix(rest, ".lua")
		}
		if !strings.Contains(doc, name) {
			t.Errorf("the package doc does not name %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, glob := range []string{"*.lua", "alg/*.lua", "*.tmpl"} {
		on, _ := fs.Glob(FS, glob)
		disk, _ := fs.Glob(os.DirFS("."), glob)
		if len(on) != len(disk) || len(disk) == 0 {
			t.Errorf("%s: FS holds %v, the directory %v", glob, on, disk)
		}
	}
	if n < 10 {
		t.Errorf("FS holds %d files, want every source", n)
	}
}
