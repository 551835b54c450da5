package migrating_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// guide is the migration guide whose Go blocks are this package's examples.
const guide = "../../docs/MIGRATING.md"

// goBlocks returns the ```go blocks of md, each without its fences.
func goBlocks(t *testing.T, md string) []string {
	t.Helper()
	var blocks []string
	rest := md
	for {
		_, after, ok := strings.Cut(rest, "```go\n")
		if !ok {
			return blocks
		}
		block, tail, ok := strings.Cut(after, "```")
		if !ok {
			t.Fatalf("%s: a ```go block does not end", guide)
		}
		blocks = append(blocks, block)
		rest = tail
	}
}

// exampleSources returns the source text of every Example function in
// example_test.go, by name, and fails for one without an Output comment.
func exampleSources(t *testing.T) map[string]string {
	t.Helper()
	const file = "example_test.go"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fd.Name.Name, "Example") {
			continue
		}
		out[fd.Name.Name] = string(src[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset]) + "\n"
	}
	for _, ex := range doc.Examples(f) {
		if ex.Output == "" && !ex.EmptyOutput {
			t.Errorf("%s: Example%s has no // Output: comment, so go test does not check it", file, ex.Suffix)
		}
	}
	return out
}

// TestGuideBlocksAreExamples keeps docs/MIGRATING.md true: every Go block
// in it is, character for character, an Example function of this package
// (which go test runs and whose output it checks), and every example is
// shown in the guide.
func TestGuideBlocksAreExamples(t *testing.T) {
	md, err := os.ReadFile(guide)
	if err != nil {
		t.Fatal(err)
	}
	examples := exampleSources(t)
	if len(examples) == 0 {
		t.Fatal("example_test.go has no Example functions")
	}
	byText := map[string]string{}
	for name, src := range examples {
		byText[src] = name
	}
	shown := map[string]bool{}
	blocks := goBlocks(t, string(md))
	for i, block := range blocks {
		name, ok := byText[block]
		if !ok {
			first, _, _ := strings.Cut(block, "\n")
			t.Errorf("%s: Go block %d (%q) is not an Example function of examples/migrating/example_test.go; copy the function as it is:\n%s", guide, i+1, first, block)
			continue
		}
		shown[name] = true
	}
	var missing []string
	for name := range examples {
		if !shown[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s does not show %v (each example illustrates a difference the guide must explain)", guide, missing)
	}
}

// apiNames returns the exported names of the Go package in dir: top-level
// identifiers as "Name", methods as "Type.Method", struct fields as
// "Type.Field".
func apiNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil {
						names[d.Name.Name] = true
						continue
					}
					recv := d.Recv.List[0].Type
					if star, ok := recv.(*ast.StarExpr); ok {
						recv = star.X
					}
					if id, ok := recv.(*ast.Ident); ok {
						names[id.Name+"."+d.Name.Name] = true
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.ValueSpec:
							for _, n := range s.Names {
								names[n.Name] = true
							}
						case *ast.TypeSpec:
							names[s.Name.Name] = true
							st, ok := s.Type.(*ast.StructType)
							if !ok {
								continue
							}
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									names[s.Name.Name+"."+n.Name] = true
								}
							}
						}
					}
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("no exported names found in %s", dir)
	}
	return names
}

// TestGuideNamesExist checks every freqcap name the guide's tables use
// against the source: sdk.X, lim.Method( (a *sdk.Limiter), d.Field (a
// sdk.Decision), d.Rules[0].Field (a sdk.RuleDecision), rsv.Method( (a
// *sdk.Reservation), the fields of sdk.Attempt{…}, memory.X and redis.X
// (the backends).
func TestGuideNamesExist(t *testing.T) {
	md, err := os.ReadFile(guide)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..")
	sdkNames := apiNames(t, filepath.Join(root, "sdk"))
	pkgs := map[string]map[string]bool{
		"sdk":    sdkNames,
		"memory": apiNames(t, filepath.Join(root, "backends", "memory")),
		"redis":  apiNames(t, filepath.Join(root, "backends", "redis")),
	}
	checks := []struct {
		re     *regexp.Regexp
		names  map[string]bool
		prefix string // prepended to the match: the type it belongs to
	}{
		{regexp.MustCompile(`\bsdk\.([A-Z]\w*)`), pkgs["sdk"], ""},
		{regexp.MustCompile(`\bmemory\.([A-Z]\w*)`), pkgs["memory"], ""},
		{regexp.MustCompile(`\bredis\.([A-Z]\w*)`), pkgs["redis"], ""},
		{regexp.MustCompile(`\blim\.([A-Z]\w*)\(`), sdkNames, "Limiter."},
		{regexp.MustCompile(`\brsv\.([A-Z]\w*)\(`), sdkNames, "Reservation."},
		{regexp.MustCompile(`\bd\.([A-Z]\w*)`), sdkNames, "Decision."},
		{regexp.MustCompile(`\bd\.Rules\[0\]\.([A-Z]\w*)`), sdkNames, "RuleDecision."},
	}
	text := string(md)
	seen := 0
	for _, c := range checks {
		for _, m := range c.re.FindAllStringSubmatch(text, -1) {
			seen++
			if !c.names[c.prefix+m[1]] {
				t.Errorf("%s names %s, but %s%s does not exist", guide, m[0], c.prefix, m[1])
			}
		}
	}
	attempt := regexp.MustCompile(`sdk\.Attempt\{([^}]*)\}`)
	field := regexp.MustCompile(`\b([A-Z]\w*):`)
	for _, m := range attempt.FindAllStringSubmatch(text, -1) {
		for _, f := range field.FindAllStringSubmatch(m[1], -1) {
			seen++
			if !sdkNames["Attempt."+f[1]] {
				t.Errorf("%s: %s sets %s, which sdk.Attempt does not have", guide, m[0], f[1])
			}
		}
	}
	if seen < 20 {
		t.Errorf("%s: only %d freqcap names checked; the tables should map the peers' calls to freqcap's", guide, seen)
	}
}

// slug is GitHub's anchor for a Markdown heading: lower case, punctuation
// dropped, spaces as hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of the headings of the Markdown file at path.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	md, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(string(md), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if !inCode && strings.HasPrefix(line, "#") {
			out[slug(strings.TrimSpace(strings.TrimLeft(line, "#")))] = true
		}
	}
	return out
}

// TestGuideLinks checks that every link of the guide to a file of the
// repository, or to a heading, leads somewhere.
func TestGuideLinks(t *testing.T) {
	md, err := os.ReadFile(guide)
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)#]*)(?:#([^)]*))?\)`)
	n := 0
	for _, m := range link.FindAllStringSubmatch(string(md), -1) {
		target, anchor := m[1], m[2]
		if strings.Contains(target, "://") {
			continue
		}
		n++
		path := guide
		if target != "" {
			path = filepath.Join(filepath.Dir(guide), target)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s: %v", guide, target, err)
				continue
			}
		}
		if anchor != "" && !anchors(t, path)[anchor] {
			t.Errorf("%s links to %s#%s: no such heading in %s", guide, target, anchor, path)
		}
	}
	if n == 0 {
		t.Errorf("%s: no links found", guide)
	}
}

// TestGuideInReadme checks that README.md's Documentation list links the
// guide.
func TestGuideInReadme(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(readme), "\n## Documentation\n")
	if !ok {
		t.Fatal("README.md has no Documentation section")
	}
	list, _, _ = strings.Cut(list, "\n## ")
	if !strings.Contains(list, "\n- [docs/MIGRATING.md](docs/MIGRATING.md) — ") {
		t.Errorf("README.md's Documentation list does not link docs/MIGRATING.md:\n%s", list)
	}
}
