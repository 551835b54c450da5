// Package lua builds the Redis scripts of the redis backend from the
// sources of the top-level package lua (which says what each file does;
// the benchmark's own scripts are in internal/bench/scripts), and
// declares the values Go and Lua share (tokens.go).
//
// The sources are split by concern and joined here into complete scripts
// ready for EVAL/EVALSHA (Take, Settle and Reset once, at init; a fast script
// each time Fast is called, which the backend caches per set of rules),
// so that a decision stays one EVALSHA of one script. fast.lua.tmpl, the
// fast scripts' text with holes (text/template, parsed once), is executed
// with what only Go computes (each rule's number, code, limit, tag and
// dimension set, its fragment's sections with its values written in, the
// entries' positions, the reply's format); the shape of the script (the
// reads, the unrolled rule blocks, the writes, the trail and the reply)
// is the template's text.
//
// A line "--@<fragment>.<section>" in take.lua, holds.lua or upgrade.lua
// is replaced by that section's code, inline (a fast script writes in its
// rules' sections itself): Lua creates every function a script
// defines on each run of it, so the algorithms are pasted into the
// frame's branches rather than defined as functions. Within a section,
// "--@save a, b" (eval) and "--@load a, b" (commit) carry values from
// eval to commit: through a table per rule in take.lua, through locals in
// a fast script. A commit section's last line "--@entry FORMAT, tag, len,
// exp, …" names its entry's values (FORMAT a token: ENTINT, LOGENT):
// take.lua packs them into the entry, a fast script packs its set's whole
// value from every rule's in one struct.pack. A fast script leaves out a
// commit section's reservation bookkeeping ("if plan then … end"): it
// reserves nothing. Every source's tokens (tokens.go) are written in by
// subst, the fast scripts' after the template ran. Scripts are never read
// from disk at run time.
package lua

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"sync"

	sources "github.com/freqcap/freqcap/lua"
)

// files are the Lua sources (package lua at the top of the module).
var files = sources.FS

// Take decides one or more requests, each over all its rules (take, peek,
// reserve, inspect): see take.lua.
var Take = build("take.lua")

// Settle commits or cancels one reservation ("hold" in the Lua sources):
// see settle.lua.
var Settle = build("settle.lua")

var (
	include  = regexp.MustCompile(`(?m)^([ \t]*)--@([a-z]+)\.([a-z]+)[ \t]*$`)
	section  = regexp.MustCompile(`(?m)^--@([a-z]+)[ \t]*$`)
	saveLoad = regexp.MustCompile(`(?m)^([ \t]*)--@(save|load) ([a-zA-Z_][a-zA-Z_0-9]*(?:, [a-zA-Z_][a-zA-Z_0-9]*)*)[ \t]*$`)
	// entryLine is a commit section's "--@entry FORMAT, a, b + #c, …"
	// line: its entry is struct.pack(FORMAT, a, b + #c, …), FORMAT a
	// token (take.lua: ent = that; a fast script packs the set's
	// value in one call from the values named: fast.go's entry).
	entryLine = regexp.MustCompile(`(?m)^([ \t]*)--@entry ([A-Z]+), (.+?)[ \t]*$`)
)

// build returns prelude.lua, holds.lua, upgrade.lua and the frame, with every include
// line replaced by its section, indented as the line is.
func build(frame string) string {
	var b strings.Builder
	for _, f := range []string{"prelude.lua", "holds.lua", "upgrade.lua", frame} {
		b.WriteString(expand(read(f)))
		b.WriteString("\n")
	}
	return b.String()
}

// read returns a source file with its tokens replaced (subst).
func read(name string) string {
	src, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return subst(string(src))
}

// sections returns the sections of fragment alg/<name>.lua by name,
// read once (fragmentSections): callers must not change the map.
func sections(name string) map[string]string {
	if m, ok := fragmentSections.Load(name); ok {
		return m.(map[string]string)
	}
	m, _ := fragmentSections.LoadOrStore(name, readSections(name))
	return m.(map[string]string)
}

// fragmentSections maps a fragment's name to its sections (sections).
var fragmentSections sync.Map

// readSections returns the sections of fragment alg/<name>.lua by name.
func readSections(name string) map[string]string {
	src := read(path.Join("alg", name+".lua"))
	out := map[string]string{}
	locs := section.FindAllStringSubmatchIndex(src, -1)
	for i, l := range locs {
		end := len(src)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		out[src[l[2]:l[3]]] = strings.TrimSpace(src[l[1]:end])
	}
	return out
}

// carry replaces a section's "--@save a, b" line (eval: the values
// commit needs) with save(names) and its "--@load a, b" line (commit:
// the same names as locals) with load(names).
func carry(body string, save, load func(names []string) string) string {
	return saveLoad.ReplaceAllStringFunc(body, func(line string) string {
		m := saveLoad.FindStringSubmatch(line)
		names := strings.Split(m[3], ", ")
		if m[2] == "save" {
			return m[1] + save(names)
		}
		return m[1] + load(names)
	})
}

func expand(src string) string {
	return include.ReplaceAllStringFunc(src, func(line string) string {
		m := include.FindStringSubmatch(line)
		body, ok := sections(m[2])[m[3]]
		if !ok {
			panic(fmt.Sprintf("lua: %s: no section %q in alg/%s.lua", strings.TrimSpace(line), m[3], m[2]))
		}
		// What eval saves for commit goes through st[r] (the rule loops
		// are separate loops).
		body = carry(body, func(names []string) string {
			return "st[r] = {" + strings.Join(names, ", ") + "}"
		}, func(names []string) string {
			xs := make([]string, len(names))
			for i := range names {
				xs[i] = fmt.Sprintf("x[%d]", i+1)
			}
			return "local " + strings.Join(names, ", ") + " = " + strings.Join(xs, ", ")
		})
		body = entryLine.ReplaceAllStringFunc(body, func(line string) string {
			e := entryLine.FindStringSubmatch(line)
			return e[1] + subst("ent = struct.pack("+e[2]+", "+e[3]+")")
		})
		return m[1] + "do\n" + indent(body, m[1]+"  ") + "\n" + m[1] + "end"
	})
}

// Reset forgets the state of dimension sets that nest (a root's own
// entries, nested sets' sections): see reset.lua.
var Reset = build("reset.lua")

// Overrides sets, deletes and lists a subject's per-person overrides: see
// overrides.lua (a script of its own: not on the decision path).
var Overrides = read("overrides.lua")
