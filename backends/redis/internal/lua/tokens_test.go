package lua

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestTokens: subst replaces the declared tokens in code, leaves
// comments and string literals alone, and every built script is free of
// tokens (a token the declaration lacked would have panicked at init).
func TestTokens(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"local b = ab + HA + (r - 1) * RA", "local b = ab + 20 + (r - 1) * 8"},
		{"x = ARGV[ab + A_COST] -- ARGV[a+A_COST]", "x = ARGV[ab + 2] -- ARGV[a+A_COST]"},
		{"if op == OP_TAKE then n = 'HA' .. \"R_NAME\" end", "if op == 't' then n = 'HA' .. \"R_NAME\" end"},
		{"struct.unpack(HDR, v, p + HDRLEN)", "struct.unpack('<c4I3I6', v, p + 13)"},
		{"local s = 'it''s' .. A_HOLD_ID", "local s = 'it''s' .. 13"},
		{"y = RULEREC .. REPLYHDR .. PINT .. A_TRAIL .. R_OLD", "y = '<Bi7i7i7' .. '<Bi7' .. '<I7' .. 5 .. 8"},
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
	if n := strings.Count(TrailEntry, TrailSep) + 1; n != TrailFields {
		t.Errorf("TrailEntry %q has %d fields, TrailFields says %d", TrailEntry, n, TrailFields)
	}
	for name, src := range map[string]string{"take": Take, "settle": Settle} {
		if m := token.FindString(strings.Join(codeLines(src), "\n")); m != "" {
			t.Errorf("%s: token %s left in the built script", name, m)
		}
	}
}

// token matches the tokens in Lua code as whole words, as a regular
// expression: a check of subst's scanner (generic, replaceWords) that
// shares none of its code.
var token = func() *regexp.Regexp {
	var names []string
	for n := range tokens {
		if !regexp.MustCompile(`^(?:[ARFC]_[A-Z0-9_]+|OP_[A-Z]+)$`).MatchString(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return regexp.MustCompile(`\b(?:[ARFC]_[A-Z0-9_]+|OP_[A-Z]+|` + strings.Join(names, "|") + `)\b`)
}()

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

// bareFlag matches, in Lua code without its comments, a flag or reply
// bit written as a number where a token (RULE_*, REPLY_*, TRAIL_*) is
// due: a rule's flags (flags, fl, fg, F<r>, res[o]) compared, assigned or
// computed with a digit, the reply's first element built or tested with
// one (allowed and 1, OVR and 4, al + 2, ints[1] + 2, out[1] + 4, al >=
// 4), a trail entry's flags (TRAIL's last value) or its separator.
var bareFlag = regexp.MustCompile(strings.Join([]string{
	`\b(?:flags|fl|fg|F\{\{\.N\}\}|F\d+|res\[o\])\s*(?:~=|==|=|/|\+|-|\*)\s*\d`,
	`\b(?:allowed|OVR)\s+and\s+\d`,
	`\b(?:al|ints\[1\]|out\[1\])\s*(?:\+|>=|==)\s*\d`,
	`\bsf\(TRAIL,[^\n]*,\s*\d+\)`,
	`'\|'\s*\.\.\s*tv`,
}, "|"))

// multiFlag matches an assignment of several names whose values hold a
// flag (flags or res[o] among the names): the value at its place must
// not be a number.
var multiFlag = regexp.MustCompile(`(?m)^\s*(?:local\s+)?((?:[\w\[\]+ ]+,\s*)+[\w\[\]+ ]+?)\s*=\s*([^\n=][^\n]*)$`)

// bareFlags returns src's lines that write a flag as a number.
func bareFlags(src string) []string {
	var bad []string
	for _, l := range codeLines(src) {
		if bareFlag.MatchString(l) {
			bad = append(bad, strings.TrimSpace(l))
			continue
		}
		m := multiFlag.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		names, vals := strings.Split(m[1], ","), splitTop(m[2])
		for i, n := range names {
			n = strings.TrimSpace(n)
			if (n == "flags" || n == "res[o]") && i < len(vals) && regexp.MustCompile(`^\d+$`).MatchString(strings.TrimSpace(vals[i])) {
				bad = append(bad, strings.TrimSpace(l))
			}
		}
	}
	return bad
}

// splitTop splits s at its commas outside parentheses and braces.
func splitTop(s string) []string {
	var out []string
	depth, from := 0, 0
	for i, c := range s {
		switch c {
		case '(', '{', '[':
			depth++
		case ')', '}', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[from:i])
				from = i + 1
			}
		}
	}
	return append(out, s[from:])
}

// TestNoBareFlags: the Lua sources write every rule flag, reply bit and
// trail flag with its token (RULE_*, REPLY_*, TRAIL_*, declared once in
// tokens.go), never as a number, so the scripts and the Go parsers
// (backends/redis's reply.go and storage.go) cannot disagree on one; the
// lines the check exists for, as they were written before the tokens,
// are caught.
func TestNoBareFlags(t *testing.T) {
	for _, old := range []string{
		"flags = 2", "flags, retry = 0, W", "flags, used, reset, retry = 1, 0, 0, 0",
		"used, reset, retry, flags = u, W, 0, 1", "if flags ~= 1 then allowed = false end",
		"local fg = fl / 2", "if sh then fg = fg + 2 end", "res[o] = 0",
		"res[o], res[o + 1], res[o + 3] = 0, L - rem, math.max(1, ttl)",
		"if fl ~= 1 and (sh or x) then", "res[1] = allowed and 1 or 0",
		"reply = {al + 2, at, bin}", "if al >= 4 then", "out[1], out[4] = out[1] + 4, ovs",
		"x = (allowed and 1 or 0) + (OVR and 4 or 0)", "if F{{.N}} ~= 1 then",
		"ent[#ent + 1] = sf(TRAIL, now, p, sf('%d', blk[1]), 0, 0, c, ra, 4) .. tv",
		"ent[#ent + 1] = sf(TRAIL, now, p, 'a', U1, 1, c, Y1, F1 / 2) .. tv",
		"if tv ~= '' then tv = '|' .. tv end",
	} {
		if len(bareFlags(old)) != 1 {
			t.Errorf("bareFlags(%q) = %q, want the line", old, bareFlags(old))
		}
	}
	names, err := fs.Glob(files, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	alg, _ := fs.Glob(files, "alg/*.lua")
	names = append(append(names, alg...), "fast.lua.tmpl")
	for _, name := range names {
		src, err := files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range bareFlags(string(src)) {
			t.Errorf("%s: %q writes a flag as a number: use its token (tokens.go)", name, l)
		}
	}
	if len(names) < 10 {
		t.Errorf("checked %v, want every source", names)
	}
}
