package middleware_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docsFile is the middleware's manual. Each example in it is a marker
// line naming an Example function of middleware/<package>/example_test.go,
// a ```go block with the function's body and a ```text block with its
// output; go test runs the function and checks that output.
const docsFile = "../docs/MIDDLEWARE.md"

var marker = regexp.MustCompile(`^<!-- example: ([a-z]+) (Example\w*) -->$`)

type docExample struct {
	line         int
	pkg, fn      string
	code, output string
}

func readDocExamples(t *testing.T) []docExample {
	t.Helper()
	md, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	var out []docExample
	var cur *docExample
	var block *strings.Builder
	kind := ""
	sc := bufio.NewScanner(strings.NewReader(string(md)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch m := marker.FindStringSubmatch(line); {
		case m != nil:
			out = append(out, docExample{line: n, pkg: m[1], fn: m[2]})
			cur = &out[len(out)-1]
		case kind == "" && cur != nil && (line == "```go" || line == "```text"):
			kind = line[3:]
			block = &strings.Builder{}
		case kind != "" && line == "```":
			if kind == "go" {
				cur.code = block.String()
			} else {
				cur.output = block.String()
				cur = nil
			}
			kind = ""
		case kind != "":
			block.WriteString(line + "\n")
		}
	}
	return out
}

// example returns the body of function fn in file (one tab of indent
// removed) and its output comment.
func example(t *testing.T, file, fn string) (code, output string, ok bool) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fd, isFn := d.(*ast.FuncDecl)
		if !isFn || fd.Name.Name != fn {
			continue
		}
		body := string(src[fset.Position(fd.Body.Lbrace).Offset+1 : fset.Position(fd.Body.Rbrace).Offset])
		lines := strings.Split(strings.Trim(body, "\n"), "\n")
		var c, o strings.Builder
		inOutput := false
		for _, l := range lines {
			l = strings.TrimPrefix(l, "\t")
			switch {
			case l == "// Output:":
				inOutput = true
			case inOutput:
				o.WriteString(strings.TrimPrefix(strings.TrimPrefix(l, "//"), " ") + "\n")
			default:
				c.WriteString(l + "\n")
			}
		}
		return c.String(), o.String(), true
	}
	return "", "", false
}

// TestDocsExamples keeps docs/MIDDLEWARE.md's examples the Example
// functions go test runs, and every such function in the manual.
func TestDocsExamples(t *testing.T) {
	exs := readDocExamples(t)
	if len(exs) == 0 {
		t.Fatalf("%s has no example", docsFile)
	}
	inDoc := map[string]bool{}
	for _, ex := range exs {
		file := filepath.Join(ex.pkg, "example_test.go")
		inDoc[file+" "+ex.fn] = true
		code, output, ok := example(t, file, ex.fn)
		switch {
		case !ok:
			t.Errorf("%s:%d: %s has no function %s", docsFile, ex.line, file, ex.fn)
		case ex.code != code:
			t.Errorf("%s:%d: the go block differs from %s's %s:\n--- doc\n%s--- %s\n%s", docsFile, ex.line, file, ex.fn, ex.code, ex.fn, code)
		case output == "" || ex.output != output:
			t.Errorf("%s:%d: the text block differs from %s's %s output:\n--- doc\n%s--- %s\n%s", docsFile, ex.line, file, ex.fn, ex.output, ex.fn, output)
		}
	}
	files, err := filepath.Glob("*/example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && strings.HasPrefix(fd.Name.Name, "Example") && !inDoc[file+" "+fd.Name.Name] {
				t.Errorf("%s's %s is not in %s", file, fd.Name.Name, docsFile)
			}
		}
	}
	if want := []string{"connectlimit", "echolimit", "ginlimit", "grpclimit", "httplimit"}; !slices.Equal(pkgs(files), want) {
		t.Errorf("example files in %v, want %v", pkgs(files), want)
	}
}

func pkgs(files []string) []string {
	var out []string
	for _, f := range files {
		out = append(out, filepath.Dir(f))
	}
	return out
}
