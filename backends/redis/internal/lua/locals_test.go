package lua

import (
	"context"
	"fmt"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
)

// TestMainLocals: mainLocals counts a main function's active locals as
// Lua 5.1 does, on snippets, and agrees with a real server on where the
// limit lies (MaxLocals: compiles, one more: refused), for plain locals,
// a for loop's hidden ones, and the fast scripts of the largest shapes
// (those past the limit are the ones FastWith refuses).
func TestMainLocals(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int
	}{
		{"local a, b = 1, 2\nlocal c", 3},
		{"local a\ndo local b, c end\nlocal d", 3},
		{"for i = 1, 2 do local x end", 5},
		{"for k, v in pairs(t) do local x end local y", 6},
		{"local function f(a, b, c) local x, y, z, w end", 1},
		{"local g = function(a) local x, y end", 1},
		{"if x then local a, b elseif y then local c else local d, e, f end local z", 3},
		{"repeat local a, b until a local c", 2},
		{"while x do local a, b end", 2},
		{"local s = 'local x, y' -- local z\nlocal t = [[local w]] --[==[ local u ]==] local v = \"local q\"", 3},
	} {
		if got := mainLocals(tc.src); got != tc.want {
			t.Errorf("mainLocals(%q) = %d, want %d", tc.src, got, tc.want)
		}
	}

	srv := redistest.NewServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	compiles := func(src string) bool {
		err := c.ScriptLoad(context.Background(), src).Err()
		if err != nil && !strings.Contains(err.Error(), "local variables") {
			t.Fatalf("SCRIPT LOAD: %v", err)
		}
		return err == nil
	}
	names := func(n int) string {
		v := make([]string, n)
		for i := range v {
			v[i] = fmt.Sprintf("v%d", i)
		}
		return strings.Join(v, ", ")
	}
	for _, n := range []int{MaxLocals - 1, MaxLocals, MaxLocals + 1} {
		for _, src := range []string{
			"local " + names(n) + "\nreturn 1",
			"for i = 1, 2 do local " + names(n-4) + " end\nreturn 1",
			"local a\ndo local " + names(n-1) + " end\nlocal b\nreturn 1",
		} {
			if got := mainLocals(src); got != n {
				t.Fatalf("mainLocals = %d, want %d:\n%s", got, n, src)
			}
			if want := n <= MaxLocals; compiles(src) != want {
				t.Errorf("%d locals at once: compiles %v, want %v", n, !want, want)
			}
		}
	}
	refused := 0
	for _, code := range []string{CodeFixed, CodeSliding, CodeGCRA, CodeLog} {
		for _, spread := range []string{"one set", "a set each", "nested in a root", "nested in a root of no rule"} {
			rules := make([]FastRule, FastMax)
			for i := range rules {
				rules[i] = FastRule{Code: code, Name: fmt.Sprintf("r%d", i), Limit: 10, P1: 1000000, P2: 100000, Tag: fmt.Sprintf("t%03d", i), Key: 1}
				switch spread {
				case "a set each":
					rules[i].Key = i + 1
				case "nested in a root":
					rules[i].Key = i + 1
					if i > 0 {
						rules[i].Root = 1
					}
				case "nested in a root of no rule":
					rules[i].Key, rules[i].Root = min(i+1, FastMax-1), FastMax
				}
			}
			for _, o := range []FastOptions{{}, {Overrides: true}} {
				src, err := fastSource(rules, o)
				if err != nil {
					t.Fatal(err)
				}
				n := mainLocals(src)
				if want := n <= MaxLocals; compiles(src) != want {
					t.Errorf("%s, %s, %+v: mainLocals %d, compiles %v, want %v", code, spread, o, n, !want, want)
				}
				if _, err := FastWith(rules, o); (err != nil) != (n > MaxLocals) {
					t.Errorf("%s, %s, %+v: FastWith error %v with %d locals", code, spread, o, err, n)
				}
				if n > MaxLocals {
					refused++
					t.Logf("refused: %s, %s, %+v: %d locals", code, spread, o, n)
				}
			}
		}
	}
	t.Logf("%d of the largest shapes refused (too many locals)", refused)
}
