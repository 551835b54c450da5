package lua

import (
	"fmt"
	"strings"
)

// MaxLocals is how many local variables a Lua 5.1 function may have
// active at once (LUAI_MAXVARS): a script whose main function needs more
// does not compile ("main function has more than 200 local variables").
const MaxLocals = 200

// mainLocals returns the most local variables active at once in the
// main function of the Lua 5.1 source src, as Lua's parser counts them
// against MaxLocals: the names of each local statement and local
// function, a for loop's names and its 3 hidden control variables, per
// block (a block's go when it ends), nested functions' own not counted.
// It reads src as tokens (comments, strings and long brackets skipped)
// and follows the blocks by their keywords; src must be a chunk that
// compiles but for its count.
func mainLocals(src string) int {
	var sc scopes
	sc.push(false)
	toks := luaTokens(src)
	loop := -1 // the locals of the for or while whose do comes next (-1: none)
	for i := 0; i < len(toks); i++ {
		switch toks[i] {
		case "local":
			if i+1 < len(toks) && toks[i+1] == "function" {
				sc.add(1) // its name, active before its body
			} else {
				sc.add(namesAt(toks, i+1))
			}
		case "for":
			loop = 3 + namesAt(toks, i+1) // the hidden control variables, then its names
		case "while":
			loop = 0
		case "do":
			sc.push(false)
			if loop > 0 {
				sc.add(loop)
			}
			loop = -1
		case "then", "repeat":
			sc.push(false)
		case "elseif":
			sc.pop() // its then opens the next block
		case "else":
			sc.pop()
			sc.push(false)
		case "end", "until":
			sc.pop()
		case "function":
			sc.push(true)
		}
	}
	return sc.most
}

// namesAt returns how many names a name list starting at toks[i] has
// (Name {',' Name}).
func namesAt(toks []string, i int) int {
	n := 0
	for j := i; j < len(toks) && isName(toks[j]); j += 2 {
		n++
		if j+1 >= len(toks) || toks[j+1] != "," {
			break
		}
	}
	return n
}

// scopes are the blocks open at a point of a chunk, for mainLocals: the
// main function's locals active there, and the most seen.
type scopes struct {
	stack        []scope
	inFn         int // nested functions' bodies open
	active, most int // the main function's
}

// scope is one open block: a nested function's body (fn), or a block
// and the main function's locals it declared (n).
type scope struct {
	fn bool
	n  int
}

func (s *scopes) push(fn bool) {
	s.stack = append(s.stack, scope{fn: fn})
	if fn {
		s.inFn++
	}
}

func (s *scopes) pop() {
	b := s.stack[len(s.stack)-1]
	s.stack = s.stack[:len(s.stack)-1]
	if b.fn {
		s.inFn--
	} else {
		s.active -= b.n
	}
}

// add declares n locals in the innermost block (the main function's
// only: none inside a nested function's body).
func (s *scopes) add(n int) {
	if s.inFn > 0 {
		return
	}
	s.stack[len(s.stack)-1].n += n
	s.active += n
	s.most = max(s.most, s.active)
}

// isName reports whether tok is a Lua name (not a keyword).
func isName(tok string) bool {
	if tok == "" || luaKeywords[tok] {
		return false
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

var luaKeywords = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range strings.Fields("and break do else elseif end false for function if in local nil not or repeat return then true until while") {
		m[k] = true
	}
	return m
}()

// luaTokens splits src into names, keywords and punctuation (one byte
// each, but ',' and '=' are all mainLocals reads of it), without
// comments, strings, numbers and long brackets.
func luaTokens(src string) []string {
	var out []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '-' && strings.HasPrefix(src[i:], "--"):
			if n := longBracket(src[i+2:]); n > 0 {
				i += 2 + n
				continue
			}
			if j := strings.IndexByte(src[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(src)
			}
		case c == '[' && longBracket(src[i:]) > 0:
			i += longBracket(src[i:])
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(src) && (src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			out = append(out, src[i:j])
			i = j
		case c >= '0' && c <= '9':
			j := i + 1
			for j < len(src) && (src[j] == '.' || src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			i = j
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		default:
			out = append(out, src[i:i+1])
			i++
		}
	}
	return out
}

// longBracket returns the length of the long bracket ([[...]], [==[...]==])
// s starts with, 0 when it starts with none.
func longBracket(s string) int {
	if len(s) < 2 || s[0] != '[' {
		return 0
	}
	lvl := 1
	for lvl < len(s) && s[lvl] == '=' {
		lvl++
	}
	if lvl >= len(s) || s[lvl] != '[' {
		return 0
	}
	closing := "]" + strings.Repeat("=", lvl-1) + "]"
	j := strings.Index(s[lvl+1:], closing)
	if j < 0 {
		return len(s)
	}
	return lvl + 1 + j + len(closing)
}

// errLocals is the error of a fast script whose main function would
// need more than MaxLocals locals at once.
func errLocals(n int) error {
	return fmt.Errorf("lua: Fast: the script needs %d local variables at once, Lua allows %d", n, MaxLocals)
}
