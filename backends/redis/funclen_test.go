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

// notDecisionPath are files ("dir/file.go") or functions
// ("dir/file.go:Name", "Type.Method" for a method) that never run while a
// request is decided, and why.
var notDecisionPath = map[string]string{
	"../memory/stats.go": "statistics (FlushStats, ReadStats): not the decision path",
	"stats.go":           "statistics (FlushStats, ReadStats): not the decision path",
	// serve: setup, once per process (server.go's guard, run per
	// request, and the rest of the file are checked).
	"../../serve/server.go:New": "setup: reads Config, builds the callers, handlers and interceptors once",
	// serve: administration, not decisions.
	"../../serve/store.go":     "policy administration (PlanPolicies, ApplyPolicies, PolicyHistory, RollbackPolicies, …)",
	"../../serve/overrides.go": "override administration (SetOverride, ListOverrides, DeleteOverride)",
	"../../serve/people.go":    "identity links' administration (LinkIdentity, UnlinkIdentity, GetPerson, SetPersonZone)",
}

// decisionPath are the package directories of the decision path: the
// Redis backend's Go code, the scripts' builder (internal/lua), the
// memory backend, internal/alg, package sdk, and the network's way in:
// serve (its decision handlers: service.go's Take, Peek, Reserve, Commit,
// Cancel, the batches, Inspect and Reset, envoy.go's ShouldRateLimit, and
// what each call runs through: authfirst.go, auth.go, metrics.go's
// interceptor, policies.go; its setup and administration files are
// listed in notDecisionPath) and internal/protoconv, which converts every
// request and decision between proto and sdk. Every non-test file of
// package sdk is checked, none is left out: the request's way through
// (check.go, attempt.go, batch.go, decision.go, keys.go's resolve,
// hotdeny.go, override.go, trail.go, wait.go, resume.go, limiter.go's
// send) and what it reads there, the Policy that rule.go and policy.go
// build (newPolicy, Rule.normalize, Policy.addChanges). sdk/driver,
// sdk/policyfile, sdk/policystore and sdk/prom are packages of their own and not
// included.
var decisionPath = []string{".", "internal/lua", "../memory", "../../internal/alg", "../../sdk", "../../serve", "../../internal/protoconv"}

// TestDecisionPathFunctionLength: no function of the decision path
// (decisionPath) is longer than maxDecisionFunc lines.
func TestDecisionPathFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	for _, dir := range decisionPath {
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
				if n > maxDecisionFunc && notDecisionPath[f+":"+name] == "" {
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
