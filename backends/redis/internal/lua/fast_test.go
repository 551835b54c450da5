package lua

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFastLazyHelpers: a fast script defines at its top only L() and the
// eager helpers its own code calls; every other helper of prelude.lua
// and holds.lua is built inside L(), and the script calls it through L().
func TestFastLazyHelpers(t *testing.T) {
	top := regexp.MustCompile(`(?m)^local function ([A-Za-z_0-9]+)\(`)
	for _, tc := range []struct {
		code string
		want []string // top-level functions
	}{
		{"f", []string{"L"}},
		{"g", []string{"L"}},
		{"l", []string{"L"}},
		{"s", []string{"ints", "pints", "L"}},
	} {
		src, err := Fast([]FastRule{{Code: tc.code, Name: "r", Limit: 5, P1: 60_000_000, P2: 6_000_000, Tag: "abcd", Key: 1}})
		if err != nil {
			t.Fatalf("%s: %v", tc.code, err)
		}
		var got []string
		for _, m := range top.FindAllStringSubmatch(src, -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: top-level functions %q, want %q", tc.code, got, tc.want)
		}
		lib := src[strings.Index(src, "local function L()"):]
		for _, name := range []string{"unpackv", "packv", "holds", "pushTrail"} {
			if !strings.Contains(lib, "  local function "+name+"(") {
				t.Errorf("%s: %s is not built inside L()", tc.code, name)
			}
		}
		for _, call := range []string{"L().holds(now).lapse(", "L().pushTrail(", "L().unpackv("} {
			if !strings.Contains(src, call) {
				t.Errorf("%s: the script does not call %s", tc.code, call)
			}
		}
		if strings.Contains(src, " holds(now).lapse(") {
			t.Errorf("%s: the script calls holds without L()", tc.code)
		}
	}
}

// TestSplitHelpers: a top-level statement among the helpers is refused,
// not dropped.
func TestSplitHelpers(t *testing.T) {
	head, defs := splitHelpers("local A = 1\n\n-- f doc\nlocal function f(x)\n  return x\nend\n\nlocal function g()\nend\n")
	if head != "local A = 1\n\n" || len(defs) != 2 || defs[0].name != "f" || defs[0].text != "-- f doc\nlocal function f(x)\n  return x\nend\n" || defs[1].name != "g" {
		t.Fatalf("splitHelpers = %q, %+v", head, defs)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("a statement between helpers did not panic")
		}
	}()
	splitHelpers("local function f()\nend\nlocal B = 2\nlocal function g()\nend\n")
}
