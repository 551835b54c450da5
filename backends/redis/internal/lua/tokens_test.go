package lua

import (
	"strings"
	"testing"
)

// TestWireTokens: subst replaces the declared tokens in code, leaves
// comments and string literals alone, and every built script is free of
// tokens (a token the declaration lacked would have panicked at init).
func TestWireTokens(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"local b = ab + HA + (r - 1) * RA", "local b = ab + 20 + (r - 1) * 8"},
		{"x = ARGV[ab + A_COST] -- ARGV[a+A_COST]", "x = ARGV[ab + 2] -- ARGV[a+A_COST]"},
		{"if op == OP_TAKE then n = 'HA' .. \"R_NAME\" end", "if op == 't' then n = 'HA' .. \"R_NAME\" end"},
		{"struct.unpack(HDR, v, p + HDRLEN)", "struct.unpack('<c4I3I6', v, p + 13)"},
		{"local s = 'it''s' .. A_HOLD_ID", "local s = 'it''s' .. 13"},
		{"y = RULEREC .. REPLYHDR .. PINT .. F_TRAIL_MAX .. R_OLD", "y = '<Bi7i7i7' .. '<Bi7' .. '<I7' .. 5 .. 8"},
		{"if sub(v, 1, 1) == REC then x = unpack(RECHDR, v, 2) .. pack(RECLEN, n) .. A_RECORD end -- REC",
			"if sub(v, 1, 1) == '\\002' then x = unpack('<Bi7I2', v, 2) .. pack('<I2', n) .. 7 end -- REC"},
	} {
		if got := subst(tc.in); got != tc.want {
			t.Errorf("subst(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "A_NOPE") {
				t.Errorf("subst of an undeclared token: recover() = %v, want a panic naming it", r)
			}
		}()
		subst("x = A_NOPE")
	}()
	for name, src := range map[string]string{"take": Take, "settle": Settle} {
		if m := token.FindString(strings.Join(codeLines(src), "\n")); m != "" {
			t.Errorf("%s: token %s left in the built script", name, m)
		}
	}
}

// codeLines returns src's lines without their comments.
func codeLines(src string) []string {
	var out []string
	for _, l := range strings.Split(src, "\n") {
		if i := strings.Index(l, "--"); i >= 0 {
			l = l[:i]
		}
		out = append(out, l)
	}
	return out
}
