package lua

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
)

// FastRule is one rule of a script Fast builds: what take.lua reads of
// it from ARGV (code, name, limit, p1, p2, tag) and Key, the index
// (1-based) of its dimension set's key among the attempt's keys.
type FastRule struct {
	Code   string // CodeFixed, CodeCalendar, CodeSliding, CodeGCRA or CodeLog
	Name   string
	Limit  int64
	P1, P2 int64
	Tag    string
	Key    int
	// Root is the key index of the root whose value holds the rule's
	// dimension set as a section (prelude.lua's nested sets), 0 for none:
	// the same for every rule of a set, a set of no nesting itself, or the
	// index after the rules' sets (a root no rule has; the attempt's key
	// after its sets, before its overrides).
	Root int
	// Window is the rule's window in µs: a GCRA rule's rate under a
	// limit override (FastOverrides) needs it.
	Window int64
	// Wide: the rule's set is declared wide (driver.Rule.Wide): its root
	// goes wide with its first section (take.lua's NEST_WIDE).
	Wide bool
	// Keep is the rule's headroom (driver.Rule.Keep; never on GCRA): its
	// eval decides against Limit-Keep (baked in; with overrides, the
	// override's limit less Keep), its reported limit stays Limit.
	Keep int64
}

// FastMax bounds the rules of a script Fast builds: Lua allows 200 locals
// in a function, and 7 sliding-window rules exceed it (the largest script
// of each algorithm is loaded on a server by backends/redis's
// TestFastScriptsLoad).
const FastMax = 6

// FastCode reports whether Fast runs rules of algorithm code (take.lua's
// codes): fixed and calendar windows, sliding window counters, GCRA and
// sliding logs, all packed (the sorted-set logs, 'z', are take.lua's
// alone). A calendar rule's boundaries (take.lua's p1, around the
// client's clock) are one more ARGV value per attempt (fast.lua.tmpl's
// header): its P1 is not written in.
func FastCode(code string) bool {
	return code == CodeFixed || code == CodeCalendar || code == CodeSliding || code == CodeGCRA || code == CodeLog
}

// FastOptions are a fast script's settings beside its rules.
type FastOptions struct {
	// Overrides: the script reads the subject's overrides
	// (driver.Request.OverrideKey; the attempt's key after its dimension
	// sets and wide hashes): take.lua's overrides, block over exempt over
	// limits, in the same script (fast.lua.tmpl's header).
	Overrides bool
	// HFE: the server has native hash-field expiry (HPEXPIREAT), which a
	// root the script makes wide uses for its fields (prelude.lua's wide,
	// take.lua's NEST_HFE); else a bounded sweep removes dead fields.
	HFE bool
	// Quiet: the script takes quiet hours (driver.Request.Quiet), one
	// more ARGV value (fast.lua.tmpl's header), and denies in them as
	// take.lua does.
	Quiet bool
}

// Fast returns the fast script of rules: fast.lua.tmpl (a text/template
// of the script's Lua) executed with the rules' values and their
// fragments' sections, prelude.lua and holds.lua first (the functions of
// theirs a decision rarely needs are built on their first call in a run,
// inside the script's L()): take.lua's take and peek on exactly these
// rules, with their ARGV written in as constants and the rule loops
// unrolled, in shorter encodings of take.lua's ARGV and reply
// (fast.lua.tmpl's header). rules must hold 1 to FastMax rules whose Code
// FastCode accepts, with distinct 4-byte tags (not the hold marker's),
// Keys numbered from 1 in order of first use and Roots as FastRule says;
// otherwise Fast returns an error, and so it does when the script would
// need more local variables at once than Lua allows (MaxLocals: rules
// with many locals, such as sliding windows and logs, spread over many
// nested sets). A script with nested sets takes their
// ids as one more ARGV value, and each root's wide hash (prelude.lua's
// wide) as a key after the dimension sets (fast.lua.tmpl's header). Fast
// executes the template on each call: a caller on a decision's path
// caches its scripts (backends/redis does, per set of rules).
func Fast(rules []FastRule) (string, error) { return FastWith(rules, FastOptions{}) }

// FastOverrides is Fast for requests that read the subject's overrides
// (FastOptions.Overrides).
func FastOverrides(rules []FastRule) (string, error) {
	return FastWith(rules, FastOptions{Overrides: true})
}

// FastWith is Fast with options: it executes fast.lua.tmpl for rules,
// then builds the helpers of prelude.lua and holds.lua the script calls
// (lazy) and writes in the tokens (subst).
func FastWith(rules []FastRule, o FastOptions) (string, error) {
	src, err := fastSource(rules, o)
	if err != nil {
		return "", err
	}
	if n := mainLocals(src); n > MaxLocals {
		return "", errLocals(n)
	}
	return src, nil
}

// fastSource is FastWith without the check of the script's locals.
func fastSource(rules []FastRule, o FastOptions) (string, error) {
	d, err := fastFill(rules, o)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := fastTemplate.Execute(&b, d); err != nil {
		return "", fmt.Errorf("lua: Fast: %w", err)
	}
	// The helpers come substituted (read); the template's own code not.
	helpers, src := lazy(b.String())
	return helpers + "\n" + subst(src), nil
}

// fastData is what fast.lua.tmpl is executed with: the script's rules,
// its dimension sets, and the values the template does not compute (the
// Lua around them is the template's).
type fastData struct {
	Ov bool // the script reads overrides
	// G, the dimension sets; GO, the keys before the trail: the sets,
	// each root's wide hash (fastSet.WK), the overrides (Ov).
	G, GO int
	Rules []*fastRule
	Sets  []fastSet
	// Reads and Writes are the sets in the order their values are read
	// and written: a root before its nested sets, after them.
	Reads, Writes []*fastSet
	// Nested: some set nests in a root (the script takes their ids).
	Nested bool
	// Quiet: the script takes quiet spans (FastOptions.Quiet). Per is
	// the ARGV values per attempt (its head, then one per calendar rule:
	// fast.lua.tmpl's header); QAt where the quiet spans start in the
	// head (after its fixed part and the nested sets' ids).
	Quiet    bool
	Per, QAt int
	// Cals are the calendar rules, whose boundaries (CB<N>) follow the
	// head, one value each, in rule order.
	Cals   []*fastRule
	Format string // the reply's struct format: REPLYHDR, then RULEREC per rule
}

// fastRule is one rule of a fast script: its specification, its number
// (N, 1-based: the suffix of its locals) and its fragment's eval and
// commit sections with its ARGV written in (constants), what eval saves
// for commit carried in locals suffixed with N (Saved declares them).
type fastRule struct {
	FastRule
	N            int
	Ov           bool // the script reads overrides (fastData.Ov)
	GCRA, Log    bool // its Code is CodeGCRA, CodeLog
	Eval, Commit string
	// EvalHead and CommitHead declare the rule's constants its eval and
	// commit sections read, as take.lua's rule variables (r, code, L,
	// tag, ki, key): only those (a local costs its assignment on every
	// decision; key a lookup in KEYS).
	EvalHead, CommitHead string
	Saved                string // "a_N, b_N", or "" when eval saves nothing
	// A rule whose commit ends with an --@entry line (lua.go's
	// entryLine: fixed windows, GCRA, packed logs) leaves the values its
	// entry is packed from in locals (Kept declares those eval did not
	// save) and its set's write packs them: EntryFormat is the entry's
	// struct format, EntryArgs its values (the tag written in, the expiry
	// X<N>).
	Kept, EntryFormat, EntryArgs string
	// CalAt, for a calendar rule: its boundaries' ARGV index after the
	// attempt's head (ARGV[ab + CalAt]).
	CalAt int
	// Pos is where the rule's entry starts in its set's value when the
	// entries keep their places: 2 for the first, else after the one
	// before it; Len, the Lua expression of its new entry's payload
	// length (its --@entry's second value, the header's length; else
	// from E<N>).
	Pos, Len string
}

// fastSet is one dimension set of a fast script: G, its key's index
// (1-based), and its rules in order.
type fastSet struct {
	G     int
	Rules []*fastRule
	// Root is the key index of the root holding the set's section (0:
	// none), IDAt where its id starts in the attempt's head (FastIDLen
	// bytes after FastHeadLen, in the order of the sets' keys); Kids are the key
	// indexes of the sets nested in this one, KidSets those sets.
	Root, IDAt int
	Kids       []int
	KidSets    []*fastSet
	// WideBelow, for a root: the length of its value above which the
	// decision could make it pass WideAt (grows), and prelude.lua's
	// wide.root writes it (take.lua's write, which moves its sections to
	// its wide hash when it does pass). WK is the key index of a root's
	// wide hash (the keys after the dimension sets, one per root in the
	// order of the roots' keys), HFE its wide.root's hfe ("true" when the
	// server has HPEXPIREAT, FastOptions.HFE; else "false").
	WideBelow, WK int
	HFE           string
	// Decl, for a root: a set nested in it is declared wide (FastRule.Wide):
	// its write is always wide.root's, which makes it wide with its first
	// section ("true"; else "false").
	Decl string
	// Fmt and Args are the struct format (without '<') and the values of
	// the set's entries, as Body packs them; BodyLen the Lua expression of
	// their length. SectFormat is a nested set's section's format (header,
	// the id's last 4 bytes, the entries); NestFormat a root's whole value's
	// (FMT, its entries, each nested set's section, the other sections).
	Fmt, Args, BodyLen     string
	SectFormat, NestFormat string
	// NestArgs are a root's NestFormat values; Name names the set in
	// errors (its first rule, or a rule of a set nested in it when it has
	// none: a root the request has no rule of); Top is the Lua expression
	// of its first rule's expiry (0 without rules) and First that rule's
	// number.
	NestArgs, Name, Top string
	First               int
	// Body and Value are the Lua expressions of the set's new entries,
	// in order, and of its value (FMT, then them): one struct.pack when
	// a rule packs its entry from values (EntryArgs; the others' entry
	// strings go in as c0), else one concatenation of the entry strings.
	Body, Value string
}

// fastTemplate is fast.lua.tmpl, parsed once: its functions are quote
// (a Lua string literal), trailfmt (a rule's trail entry's format, its
// name and limit written in: trailFormat), reverse (rules newest last),
// indent (a block n columns right, each line after a newline) and
// include (a block of the template as a string, for indent).
var fastTemplate = func() *template.Template {
	t := template.New("fast.lua.tmpl")
	t.Funcs(template.FuncMap{
		"quote": quote,
		"trailfmt": func(name string, limit int64) string {
			return quote(trailFormat(map[int]string{trailRule: name, trailLimit: strconv.FormatInt(limit, 10)}))
		},
		"reverse": func(rs []*fastRule) []*fastRule {
			out := slices.Clone(rs)
			slices.Reverse(out)
			return out
		},
		"indent": func(n int, s string) string {
			s = strings.TrimRight(strings.TrimPrefix(s, "\n"), "\n")
			return "\n" + indent(s, strings.Repeat(" ", n))
		},
		"include": func(name string, data any) (string, error) {
			var b strings.Builder
			err := t.ExecuteTemplate(&b, name, data)
			return b.String(), err
		},
	})
	return template.Must(t.ParseFS(files, "fast.lua.tmpl"))
}()

// fastFill checks the rules, groups them by key and fills in their
// fragments' sections: the data fast.lua.tmpl is executed with.
func fastFill(rules []FastRule, o FastOptions) (*fastData, error) {
	ov := o.Overrides
	if len(rules) == 0 || len(rules) > FastMax {
		return nil, fmt.Errorf("lua: Fast: %d rules, want 1 to %d", len(rules), FastMax)
	}
	d := &fastData{Ov: ov, Format: fmt.Sprintf("<Bi%d", ReplyInt) + strings.Repeat(fmt.Sprintf("Bi%[1]di%[1]di%[1]d", ReplyInt), len(rules))}
	tags, secs := map[string]bool{}, map[string]map[string]string{}
	for i, r := range rules {
		if !FastCode(r.Code) {
			return nil, fmt.Errorf("lua: Fast: rule %q: algorithm code %q is not packed", r.Name, r.Code)
		}
		if r.Key < 1 || r.Key > len(d.Sets)+1 {
			return nil, fmt.Errorf("lua: Fast: rule %q: key index %d out of order", r.Name, r.Key)
		}
		if len(r.Tag) != PackedTag || tags[r.Tag] || r.Tag == "\x00\x00\x00\x00" {
			return nil, fmt.Errorf("lua: Fast: rule %q: tag %q is not %d bytes, or repeated, or the hold marker's", r.Name, r.Tag, PackedTag)
		}
		tags[r.Tag] = true
		frag := fragment(r.Code)
		if secs[frag] == nil {
			secs[frag] = sections(frag)
		}
		if r.Key > len(d.Sets) {
			d.Sets = append(d.Sets, fastSet{G: r.Key, Root: r.Root})
		}
		if d.Sets[r.Key-1].Root != r.Root || r.Root == r.Key {
			return nil, fmt.Errorf("lua: Fast: rule %q: root %d differs from its set's, or is the set", r.Name, r.Root)
		}
		fr := newFastRule(r, i+1, ov, secs[frag])
		set := &d.Sets[r.Key-1]
		fr.Pos = "2"
		if k := len(set.Rules); k > 0 {
			fr.Pos = fmt.Sprintf("P%d + HDRLEN + %s", set.Rules[k-1].N, set.Rules[k-1].Len)
		}
		set.Rules = append(set.Rules, fr)
		d.Rules = append(d.Rules, fr)
	}
	if err := d.nest(); err != nil {
		return nil, err
	}
	d.G, d.GO = len(d.Sets), len(d.Sets)
	for i := range d.Sets {
		if s := &d.Sets[i]; len(s.Kids) > 0 {
			d.GO++
			s.WK, s.HFE = d.GO, strconv.FormatBool(o.HFE)
			decl := false
			for _, k := range s.KidSets {
				for _, r := range k.Rules {
					decl = decl || r.Wide
				}
			}
			s.Decl = strconv.FormatBool(decl)
		}
	}
	if ov {
		d.GO++
	}
	d.argv(o.Quiet) // the ids and the spans
	return d, nil
}

// argv sets where the attempt's values lie (fast.lua.tmpl's header):
// the quiet spans in its head, after the nested sets' ids; each calendar
// rule's boundaries after the head.
func (d *fastData) argv(quiet bool) {
	d.Quiet, d.Per, d.QAt = quiet, 1, FastHeadLen+1
	for _, s := range d.Sets {
		if s.Root != 0 {
			d.QAt += FastIDLen
		}
	}
	for _, r := range d.Rules {
		if r.Code == CodeCalendar {
			r.CalAt = d.Per
			d.Per++
			d.Cals = append(d.Cals, r)
		}
	}
}

// nest lists each root's nested sets (Kids) and the order the sets'
// values are read and written in (Reads: roots first; Writes: roots
// last).
func (d *fastData) nest() error {
	nested := 0
	for i := range d.Sets {
		if r := d.Sets[i].Root; r == len(d.Sets)+1 {
			d.Sets = append(d.Sets, fastSet{G: r}) // a root of no rule
		}
	}
	for i := range d.Sets {
		d.Sets[i].pack()
	}
	for i := range d.Sets {
		s := &d.Sets[i]
		if s.Root == 0 {
			continue
		}
		if s.Root > len(d.Sets) || d.Sets[s.Root-1].Root != 0 {
			return fmt.Errorf("lua: Fast: set %d: root %d is not a set of the rules, or is nested itself", s.G, s.Root)
		}
		d.Sets[s.Root-1].Kids = append(d.Sets[s.Root-1].Kids, s.G)
		d.Sets[s.Root-1].KidSets = append(d.Sets[s.Root-1].KidSets, s)
		s.IDAt = FastHeadLen + FastIDLen*nested + 1
		nested++
		d.Nested = true
	}
	for i := range d.Sets {
		if s := &d.Sets[i]; len(s.Kids) > 0 {
			f, args := "<c0"+s.Fmt, []string{"FMT"}
			if s.Args != "" {
				args = append(args, s.Args)
			}
			for _, k := range s.KidSets {
				f += hdrFormat + "c4" + k.Fmt
				args = append(args, fmt.Sprintf("IT%[1]d, 4 + %[2]s, ST%[1]d, IX%[1]d, %[3]s", k.G, k.BodyLen, k.Args))
			}
			s.NestFormat, s.NestArgs = quote(f+"c0"), strings.Join(append(args, "rest"), ", ")
			if s.Name == "" {
				s.Name = s.KidSets[0].Name
			}
		}
	}
	for i := range d.Sets {
		if s := &d.Sets[i]; len(s.Kids) > 0 {
			s.WideBelow = WideAt - s.grows()
			d.Reads = append(d.Reads, s)
		}
	}
	for i := range d.Sets {
		if s := &d.Sets[i]; len(s.Kids) == 0 {
			d.Reads = append(d.Reads, s)
			d.Writes = append(d.Writes, s)
		}
	}
	for i := range d.Sets {
		if s := &d.Sets[i]; len(s.Kids) > 0 {
			d.Writes = append(d.Writes, s)
		}
	}
	return nil
}

// grows returns how many bytes a decision of the script can add to the
// value of root s at most: a new entry per rule (a packed log's grows by
// one record), a new section per nested set.
func (s *fastSet) grows() int {
	n := 0
	for _, r := range s.Rules {
		n += r.grows()
	}
	for _, k := range s.KidSets {
		n += PackedHeader + 4
		for _, r := range k.Rules {
			n += r.grows()
		}
	}
	return n
}

// grows returns how many bytes a decision can add to r's entry at most:
// the whole entry when there is none (a sliding window's holds its K+1
// counted cells, its top and its sum), a record when a log has one.
func (r *fastRule) grows() int {
	switch r.Code {
	case CodeSliding:
		return PackedHeader + PackedInt*(int(r.P1)+3)
	case CodeLog:
		return PackedHeader + 3*PackedInt
	}
	return PackedHeader + PackedInt
}

// pack sets the set's Body, Value, Fmt, Args, BodyLen, Name, Top and
// First.
func (s *fastSet) pack() {
	s.Top = "0"
	if len(s.Rules) > 0 {
		s.Name, s.First = s.Rules[0].Name, s.Rules[0].N
		s.Top = fmt.Sprintf("X%d", s.First)
	}
	format, args, ents, lens, packed := "", []string{}, []string{}, []string{}, false
	for _, r := range s.Rules {
		ents = append(ents, fmt.Sprintf("E%d", r.N))
		lens = append(lens, "HDRLEN + "+r.Len)
		if r.EntryArgs == "" {
			format, args = format+"c0", append(args, ents[len(ents)-1])
			continue
		}
		packed = true
		format, args = format+r.EntryFormat[1:], append(args, r.EntryArgs)
	}
	s.Fmt, s.Args, s.BodyLen = format, strings.Join(args, ", "), "("+strings.Join(lens, " + ")+")"
	s.SectFormat = quote("<" + hdrFormat + "c4" + format)
	if len(ents) == 0 { // a root of no rule: no entries of its own
		s.Body, s.Value = "''", "FMT"
		return
	}
	if !packed {
		s.Body = strings.Join(ents, " .. ")
		s.Value = "FMT .. " + s.Body
		return
	}
	all := strings.Join(args, ", ")
	s.Body = fmt.Sprintf("struct.pack(%s, %s)", quote("<"+format), all)
	s.Value = fmt.Sprintf("struct.pack(%s, FMT, %s)", quote("<c0"+format), all)
}

// newFastRule returns rule n (1-based) of a fast script: r's fragment's
// eval and commit sections (sec) with r's ARGV written in and what eval
// saves for commit kept in locals suffixed with n. With overrides (ov), a
// GCRA rule reads its rate and tolerance from GT and GTOL, which a limit
// override changes.
func newFastRule(r FastRule, n int, ov bool, sec map[string]string) *fastRule {
	fr := &fastRule{FastRule: r, N: n, Ov: ov, GCRA: r.Code == CodeGCRA, Log: r.Code == CodeLog}
	var vars map[string]string
	if ov && fr.GCRA {
		vars = map[string]string{strconv.Itoa(RuleP1): "GT", strconv.Itoa(RuleP2): "GTOL"}
	}
	if r.Code == CodeCalendar { // its boundaries: the attempt's
		vars = map[string]string{strconv.Itoa(RuleP1): fmt.Sprintf("CB%d", n)}
	}
	var saved []string
	fill := func(section string) string {
		return carry(constants(sec[section], r, vars), func(names []string) string {
			saved = names
			return suffixed(names, n) + " = " + strings.Join(names, ", ")
		}, func(names []string) string {
			return "local " + strings.Join(names, ", ") + " = " + suffixed(names, n)
		})
	}
	fr.Eval, fr.Commit = fill("eval"), noPlan(fill("commit"))
	if e := entryLine.FindStringSubmatch(fr.Commit); e != nil {
		keep := fr.entry(e[2], e[3], saved)
		fr.Commit = strings.Replace(fr.Commit, e[0], e[1]+keep, 1)
	}
	if fr.Len == "" {
		fr.Len = fmt.Sprintf("(#E%d - HDRLEN)", n)
	}
	fr.EvalHead, fr.CommitHead = fr.head(fr.Eval), fr.head(fr.Commit)
	if len(saved) > 0 {
		fr.Saved = suffixed(saved, n)
	}
	return fr
}

// entry sets the rule's EntryFormat (the value of token format, a
// struct format) and EntryArgs (args with the rule's tag and expiry
// written in, every other name suffixed with N: locals of the script)
// and Kept (those locals, but the ones eval saved: declared already),
// and returns the commit's line that fills them.
func (fr *fastRule) entry(format, args string, saved []string) string {
	f, ok := tokens[format]
	if !ok || len(f) < 3 || f[0] != '\'' || f[1] != '<' {
		panic(fmt.Sprintf("lua: --@entry: %s is not a struct format token", format))
	}
	fr.EntryFormat = f[1 : len(f)-1]
	vals := strings.Split(args, ", ")
	if len(vals) < 3 || vals[0] != "tag" || vals[2] != "exp" {
		panic(fmt.Sprintf("lua: --@entry: %s: the values begin with the header's (tag, payload length, exp)", args))
	}
	var kept []string
	for i, v := range vals {
		vals[i] = luaName.ReplaceAllStringFunc(v, func(id string) string {
			switch id {
			case "tag":
				return quote(fr.Tag)
			case "exp":
				return fmt.Sprintf("X%d", fr.N)
			case "and", "or", "not", "nil", "true", "false":
				panic(fmt.Sprintf("lua: --@entry: %q in %s", id, args))
			}
			if !slices.Contains(saved, id) && !slices.Contains(kept, id) {
				kept = append(kept, id)
			}
			return fmt.Sprintf("%s_%d", id, fr.N)
		})
	}
	fr.EntryArgs, fr.Len = strings.Join(vals, ", "), "("+vals[1]+")"
	if len(kept) == 0 {
		return ""
	}
	fr.Kept = suffixed(kept, fr.N)
	return fr.Kept + " = " + strings.Join(kept, ", ")
}

// noPlan returns a commit section without its "if plan then … end"
// statement: a reservation's bookkeeping, and fast scripts reserve
// nothing (take.lua's commit sections see plan = nil when not
// reserving). The statement is one line, or ends with a line "end" at
// its indentation.
func noPlan(body string) string {
	lines := strings.Split(body, "\n")
	out := lines[:0]
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		ind := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if !strings.HasPrefix(l[len(ind):], "if plan then") {
			out = append(out, l)
			continue
		}
		for !strings.HasSuffix(lines[i], " end") && lines[i] != ind+"end" {
			i++
		}
	}
	return strings.Join(out, "\n")
}

// luaName matches a Lua name (a local of an --@entry line's values).
var luaName = regexp.MustCompile(`\b[a-zA-Z_][a-zA-Z0-9_]*\b`)

// head returns the declarations of take.lua's rule variables that body
// (a section, its ARGV written in) reads outside its comments, with
// rule r's values; with overrides, L always (the template's override
// code sets and reads it).
func (fr *fastRule) head(body string) string {
	code := comment.ReplaceAllString(body, "")
	var names, vals []string
	for _, v := range [...]struct{ name, val string }{
		{"r", strconv.Itoa(fr.N)}, {"code", fmt.Sprintf("%q", fr.Code)}, {"L", fmt.Sprint(fr.limit())},
		{"tag", quote(fr.Tag)}, {"ki", strconv.Itoa(fr.Key)},
	} {
		if (v.name == "L" && fr.Ov) || ruleVar[v.name].MatchString(code) {
			names, vals = append(names, v.name), append(vals, v.val)
		}
	}
	var lines []string
	if len(names) > 0 {
		lines = append(lines, "local "+strings.Join(names, ", ")+" = "+strings.Join(vals, ", "))
	}
	if keyVar.MatchString(code) {
		lines = append(lines, fmt.Sprintf("local key = KEYS[kb + %d]", fr.Key))
	}
	return strings.Join(lines, "\n")
}

// limit returns the L the rule's sections see from their head: Limit,
// less Keep (headroom) but with overrides, where the template takes Keep
// off the override's limit after applying it.
func (fr *fastRule) limit() int64 {
	if fr.Ov {
		return fr.Limit
	}
	return fr.Limit - fr.Keep
}

// comment matches a Lua comment to the end of its line; ruleVar and
// keyVar a read of a rule variable.
var (
	comment = regexp.MustCompile(`--[^\n]*`)
	ruleVar = func() map[string]*regexp.Regexp {
		m := map[string]*regexp.Regexp{}
		for _, n := range []string{"r", "code", "L", "tag", "ki"} {
			m[n] = regexp.MustCompile(`\b` + n + `\b`)
		}
		return m
	}()
	keyVar = regexp.MustCompile(`\bkey\b`)
)

// argv matches a section's reads of its rule's ARGV (b: the rule's
// offset).
var argv = regexp.MustCompile(`tonumber\(ARGV\[b \+ (\d)\]\)|ARGV\[b \+ (\d)\]`)

// constants replaces a section's reads of r's ARGV (take.lua's offsets
// b+2 to b+6) with r's values, or with the variables vars names by
// offset.
func constants(body string, r FastRule, vars map[string]string) string {
	return argv.ReplaceAllStringFunc(body, func(s string) string {
		m := argv.FindStringSubmatch(s)
		if v, ok := vars[m[1]+m[2]]; ok {
			return v
		}
		var val string
		switch m[1] + m[2] {
		case "2":
			return quote(r.Name)
		case "3":
			val = fmt.Sprint(r.Limit)
		case "4":
			val = fmt.Sprint(r.P1)
		case "5":
			val = fmt.Sprint(r.P2)
		case "6":
			return quote(r.Tag)
		default:
			panic(fmt.Sprintf("lua: Fast: %s reads ARGV[b + %s%s]", r.Code, m[1], m[2]))
		}
		if m[1] == "" {
			return quote(val) // read as a string
		}
		return val
	})
}

// suffixed returns names, each with _n appended, comma-separated.
func suffixed(names []string, n int) string {
	out := make([]string, len(names))
	for i, s := range names {
		out[i] = fmt.Sprintf("%s_%d", s, n)
	}
	return strings.Join(out, ", ")
}

// fragment names the alg/ fragment of a packed code.
func fragment(code string) string {
	switch code {
	case CodeSliding:
		return "sliding"
	case CodeGCRA:
		return "gcra"
	case CodeLog:
		return "log"
	}
	return "fixed"
}

// quote writes s as a Lua string literal, every byte outside printable
// ASCII (and the quote and backslash) as a decimal escape.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '\'' || c == '\\' {
			fmt.Fprintf(&b, "\\%03d", c)
		} else {
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func indent(body, pre string) string {
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pre + l
		}
	}
	return strings.Join(lines, "\n")
}

// helperDef is one top-level function of prelude.lua or holds.lua: its
// name and its text (the comment above it, then the definition).
type helperDef struct{ name, text string }

var helperStart = regexp.MustCompile(`(?m)^local function ([A-Za-z_][A-Za-z_0-9]*)\(`)

// splitHelpers splits src (prelude.lua's or holds.lua's source) into the
// text before its first top-level function and its top-level functions,
// each with the comment lines right above it. Anything else after the
// first function (a top-level statement) panics: lazy would drop it.
func splitHelpers(src string) (string, []helperDef) {
	locs := helperStart.FindAllStringSubmatchIndex(src, -1)
	if len(locs) == 0 {
		return src, nil
	}
	start := func(at int) int { // back over the comment lines right above at
		for at > 0 {
			prev := strings.LastIndexByte(src[:at-1], '\n') + 1
			if !strings.HasPrefix(src[prev:at], "--") {
				break
			}
			at = prev
		}
		return at
	}
	head := src[:start(locs[0][0])]
	var defs []helperDef
	at := len(head)
	for _, l := range locs {
		s := start(l[0])
		if strings.TrimSpace(src[at:s]) != "" {
			panic(fmt.Sprintf("lua: a top-level statement between helpers: %q", src[at:s]))
		}
		end := strings.Index(src[l[1]:], "\nend\n")
		if end < 0 {
			panic("lua: helper " + src[l[2]:l[3]] + " has no end at column 0")
		}
		end += l[1] + len("\nend\n")
		defs = append(defs, helperDef{name: src[l[2]:l[3]], text: src[s:end]})
		at = end
	}
	if strings.TrimSpace(src[at:]) != "" {
		panic(fmt.Sprintf("lua: a top-level statement after the helpers: %q", src[at:]))
	}
	return head, defs
}

// eagerHelpers are the helpers a fast script defines at its top when its
// own code calls them (the algorithms' common paths: sliding windows'
// cells; the overrides' parse, in a script that reads them); they capture
// no local of the script, so each costs one closure.
var eagerHelpers = map[string]bool{"ints": true, "pints": true, "overrides": true, "sectid": true}

// helperHead, helperText and helperDefs are prelude.lua and holds.lua
// split once for lazy: prelude.lua's text before its functions (its
// constants), holds.lua's, and their top-level functions in order;
// helperNames the set of those functions' names.
var (
	helperHead, helperText, helperDefs = func() (string, string, []helperDef) {
		head, defs := splitHelpers(expand(read("prelude.lua")))
		text, hdefs := splitHelpers(expand(read("holds.lua")))
		return head, text, append(defs, hdefs...)
	}()
	helperNames = func() map[string]bool {
		m := make(map[string]bool, len(helperDefs))
		for _, d := range helperDefs {
			m[d.name] = true
		}
		return m
	}()
)

// helperCalls calls f for each call of a helper in body: a helper's name
// as a whole word, not after a '.' (a field), right before '('. It
// returns what replaceWords wrote, with f's replacements.
func helperCalls(body string, f func(name string) (string, bool)) string {
	var b strings.Builder
	b.Grow(len(body) + len(body)/16)
	replaceWords(&b, body, func(w string, at int) (string, bool) {
		if end := at + len(w); end >= len(body) || body[end] != '(' || (at > 0 && body[at-1] == '.') || !helperNames[w] {
			return "", false
		}
		return f(w)
	})
	return b.String()
}

// lazy returns prelude.lua and holds.lua for a fast script whose own code
// is body, and body with its calls of their functions rewritten: Lua
// creates every function a script defines on each run, with an upvalue
// per local it captures, so the helpers a decision rarely needs (foreign
// entries, lapsed reservations, the trail, module TATs) are defined
// inside L(), built on a run's first call of one of them; body calls
// L().name(...) instead of name(...). The eager helpers body calls stay
// plain locals.
func lazy(body string) (string, string) {
	eager := map[string]bool{}
	helperCalls(body, func(name string) (string, bool) {
		eager[name] = eagerHelpers[name]
		return "", false
	})
	var top, lib strings.Builder
	var fields []string
	for _, d := range helperDefs {
		if eager[d.name] {
			top.WriteString(d.text + "\n")
			continue
		}
		lib.WriteString(indent(d.text, "  ") + "\n\n")
		fields = append(fields, d.name+" = "+d.name)
	}
	body = helperCalls(body, func(name string) (string, bool) {
		return "L()." + name, !eager[name]
	})
	return helperHead + helperText + top.String() +
		"-- The helpers built on first use (lua.Fast, lazy): L() returns them.\nlocal lib\nlocal function L()\n  if lib then return lib end\n" +
		lib.String() + "  lib = {" + strings.Join(fields, ", ") + "}\n  return lib\nend\n", body
}
