package redis

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxDecisionFunc is the longest function (declaration to closing brace)
// allowed on the decision path.
const maxDecisionFunc = 60

// notDecisionPath are files whose functions never run while a request is
// decided, by package directory and file name.
var notDecisionPath = map[string]string{
	"../memory/stats.go": "statistics (FlushStats, ReadStats): not the decision path",
	"stats.go":           "statistics (FlushStats, ReadStats): not the decision path",
}

// ownedElsewhere are files of the Redis backend that other work owns
// while issue 23 is open (the fast scripts from templates, the module
// storage strategies): their long functions are listed, not failed (today
// Backend.fastAttempt, 89 lines). Each entry goes when that work lands.
var ownedElsewhere = map[string]string{
	"fast.go":     "owned by the fast-script templates work (issue 23)",
	"strategy.go": "owned by the module storage work (issue 23)",
}

// TestDecisionPathFunctionLength: no function of the decision path —
// the memory backend, the Redis backend's Go code and internal/alg — is
// longer than maxDecisionFunc lines.
func TestDecisionPathFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	for _, dir := range []string{".", "../memory", "../../internal/alg"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("Glob(%s) = %v, %v", dir, files, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || notDecisionPath[f] != "" {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range af.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				name := funcName(fd)
				if why := ownedElsewhere[filepath.Base(f)]; why != "" && dir == "." {
					if n > maxDecisionFunc {
						t.Logf("%s: %s is %d lines, allowed for now: %s", f, name, n, why)
					}
					continue
				}
				if n > maxDecisionFunc {
					t.Errorf("%s: %s is %d lines, want at most %d (split it)", f, name, n, maxDecisionFunc)
				}
			}
		}
	}
}

// funcName is fd's name, "Type.Method" for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	x := fd.Recv.List[0].Type
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
			continue
		case *ast.IndexExpr:
			x = e.X
			continue
		case *ast.Ident:
			return e.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}
