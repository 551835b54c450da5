package lua

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// FastRule is one rule of a script Fast builds: what take.lua reads of
// it from ARGV (code, name, limit, p1, p2, tag) and Key, the index
// (1-based) of its dimension set's key among the attempt's keys.
type FastRule struct {
	Code   string // CodeFixed, CodeSliding, CodeGCRA or CodeLog
	Name   string
	Limit  int64
	P1, P2 int64
	Tag    string
	Key    int
	// Window is the rule's window in µs: a GCRA rule's rate under a
	// limit override (FastOverrides) needs it.
	Window int64
}

// FastMax bounds the rules of a script Fast builds: Lua allows 200 locals
// in a function, and 7 sliding-window rules exceed it (the largest script
// of each algorithm is loaded on a server by backends/redis's
// TestFastScriptsLoad).
const FastMax = 6

// FastCode reports whether Fast runs rules of algorithm code (take.lua's
// codes): fixed windows, sliding window counters, GCRA and sliding logs,
// all packed (the sorted-set logs, 'z', are take.lua's alone).
func FastCode(code string) bool {
	return code == CodeFixed || code == CodeSliding || code == CodeGCRA || code == CodeLog
}

// Fast returns fast.lua filled in for rules, prelude.lua and holds.lua
// first (the functions of theirs a decision rarely needs are built on
// their first call in a run, inside the script's L()): take.lua's
// take and peek on exactly these rules, with their ARGV written in as
// constants and the rule loops unrolled (see fast.lua), in shorter
// encodings of take.lua's ARGV and reply (fast.lua's header). rules
// must hold 1 to FastMax rules whose Code FastCode accepts, with distinct
// 4-byte tags (not the hold marker's), and Keys numbered from 1 in order
// of first use; otherwise Fast returns an error.
func Fast(rules []FastRule) (string, error) { return fast(rules, false) }

// FastOverrides is Fast for requests that read the subject's overrides
// (driver.Request.OverrideKey; the attempt's key after its dimension
// sets): take.lua's overrides, block over exempt over limits, in the
// same script (fast.lua's header).
func FastOverrides(rules []FastRule) (string, error) { return fast(rules, true) }

func fast(rules []FastRule, ov bool) (string, error) {
	f := &fastBuilder{rules: rules, ov: ov, secs: map[string]map[string]string{}}
	if err := f.group(); err != nil {
		return "", err
	}
	f.readsAndLapse()
	for i := range rules {
		f.rule(i)
	}
	f.writesAll()
	f.trailAll()
	f.overridesAndReply()
	fill := map[string]string{
		"consts": fmt.Sprintf("local G, GO = %d, %d -- dimension sets (keys) per attempt, and the keys before the trail",
			len(f.groups), f.keysBefore()),
		"overrides": f.overrides, "decide": f.decide,
		"reads": f.readsSrc, "lapse": f.lapseSrc, "decls": f.decls.String(), "each.eval": f.eval.String(),
		"each.commit": f.commit.String(), "writes": f.writes.String(), "trail": f.trail.String(), "reply": f.reply,
	}
	src := fastLine.ReplaceAllStringFunc(read("fast.lua"), func(line string) string {
		m := fastLine.FindStringSubmatch(line)
		body, ok := fill[m[2]]
		if !ok {
			panic("lua: fast.lua: unknown line " + line)
		}
		return indent(body, m[1])
	})
	helpers, src := lazy(src)
	return subst(helpers + "\n" + src), nil
}

// fastBuilder fills in fast.lua's lines for one set of rules; each
// method writes one concern (the Lua it writes names the wire's tokens,
// internal/lua/wire.go, which subst writes in).
type fastBuilder struct {
	rules  []FastRule
	ov     bool                         // the script reads overrides
	secs   map[string]map[string]string // fragment -> its sections
	groups [][]int                      // per key index, its rules (0-based)

	reads, decls, eval, commit, writes, trail    strings.Builder
	readsSrc, lapseSrc, overrides, decide, reply string
}

// keysBefore is the number of an attempt's keys before its trail: its
// dimension sets, and its overrides when the script reads them.
func (f *fastBuilder) keysBefore() int {
	if f.ov {
		return len(f.groups) + 1
	}
	return len(f.groups)
}

// group checks the rules and groups them by key, loading their
// fragments' sections.
func (f *fastBuilder) group() error {
	if len(f.rules) == 0 || len(f.rules) > FastMax {
		return fmt.Errorf("lua: Fast: %d rules, want 1 to %d", len(f.rules), FastMax)
	}
	tags := map[string]bool{}
	for i, r := range f.rules {
		if !FastCode(r.Code) {
			return fmt.Errorf("lua: Fast: rule %q: algorithm code %q is not packed", r.Name, r.Code)
		}
		if r.Key < 1 || r.Key > len(f.groups)+1 {
			return fmt.Errorf("lua: Fast: rule %q: key index %d out of order", r.Name, r.Key)
		}
		if len(r.Tag) != PackedTag || tags[r.Tag] || r.Tag == "\x00\x00\x00\x00" {
			return fmt.Errorf("lua: Fast: rule %q: tag %q is not %d bytes, or repeated, or the hold marker's", r.Name, r.Tag, PackedTag)
		}
		tags[r.Tag] = true
		if r.Key > len(f.groups) {
			f.groups = append(f.groups, nil)
		}
		f.groups[r.Key-1] = append(f.groups[r.Key-1], i)
		if fr := fragment(r.Code); f.secs[fr] == nil {
			f.secs[fr] = sections(fr)
		}
	}
	return nil
}

// readGroup writes the read of dimension set g's value (V<g>, one GET)
// and the finding of its rules' entries (P<r>, N<r>, T<r>; O<g>: other
// entries are stored there; lapsed: a hold marker says a reservation may
// have lapsed).
func (f *fastBuilder) readGroup(g int, rs []int) {
	r := &f.reads
	fmt.Fprintf(r, "V%d = redis.pcall('GET', KEYS[kb + %d])\nO%d = false\n", g, g, g)
	fmt.Fprintf(r, "if V%[1]d and not fail then\n  local n = type(V%[1]d) == 'string' and #V%[1]d or 0\n"+
		"  local q = 2\n  if n == 0 or string.byte(V%[1]d, 1) ~= 1 then q = nil end\n"+
		"  while q and q <= n do\n    if q + HDRLEN - 1 > n then q = nil break end\n"+
		"    local tag, len, exp, d = struct.unpack(HDR, V%[1]d, q)\n    if d + len - 1 > n then q = nil break end\n    ", g)
	for j, i := range rs {
		if j > 0 {
			r.WriteString("else")
		}
		fmt.Fprintf(r, "if tag == %s then P%[2]d, N%[2]d, T%[2]d = q, len, exp\n    ", quote(f.rules[i].Tag), i+1)
	}
	fmt.Fprintf(r, "else\n      O%d = true\n      if tag == MARK and look and exp * 1000 <= now then lapsed = true end\n    end\n"+
		"    q = d + len\n  end\n  if not q then\n"+
		"    fail = redis.error_reply('freqcap: rule ' .. %s .. FOREIGN)\n"+
		"  end\nend\n", g, quote(f.rules[rs[0]].Name))
}

// readsAndLapse writes the reads ("--@reads") and the give-back of
// lapsed reservations followed by the same reads ("--@lapse").
func (f *fastBuilder) readsAndLapse() {
	for g, rs := range f.groups {
		f.readGroup(g+1, rs)
	}
	var lapse strings.Builder
	lapse.WriteString("local named, vals, logs = {}, {}, {}\n")
	for g := range f.groups {
		fmt.Fprintf(&lapse, "named[KEYS[kb + %[1]d]], vals[%[1]d] = %[1]d, unpackv(V%[1]d)\n", g+1)
	}
	lapse.WriteString("holds(now).lapse(KEYS[kb + hk], named, function(k) return KEYS[kb + k] end, vals, logs)\n")
	lapse.WriteString("look = false -- read once more, markers aside\n")
	// P<r> are declared before the reads fill them.
	var ps, vs []string // each rule's entry: its start, payload length, expiry; each set's value
	for i := range f.rules {
		ps = append(ps, fmt.Sprintf("P%[1]d, N%[1]d, T%[1]d", i+1))
	}
	for g := range f.groups {
		vs = append(vs, fmt.Sprintf("V%d, O%d", g+1, g+1))
	}
	f.readsSrc = "local " + strings.Join(ps, ", ") + "\nlocal " + strings.Join(vs, ", ") + "\n" + f.reads.String()
	f.lapseSrc = lapse.String() + strings.Join(ps, ", ") + " = nil\n" + f.reads.String()
}

// heads returns the head of rule i's eval and commit blocks (its
// constants; with overrides, a limit override applied) and the ARGV
// reads that are variables there.
func (f *fastBuilder) heads(i int) (evHead, cmHead string, vars map[string]string) {
	r, n := f.rules[i], i+1
	head := fmt.Sprintf("local r, code, L, tag, ki = %d, %q, %d, %s, %d\nlocal key = KEYS[kb + ki]\n",
		n, r.Code, r.Limit, quote(r.Tag), r.Key)
	if !f.ov {
		return head, head, nil
	}
	// A limit override replaces L (GCRA: T and the tolerance, GT and
	// GTOL, as prelude.lua's gcraRate; L() is not callable in a rule's
	// block, where L is the limit).
	evHead, apply := head, "L = lo[2]\n"
	if r.Code == CodeGCRA {
		evHead += fmt.Sprintf("local GT, GTOL = %d, %d\n", r.P1, r.P2)
		vars = map[string]string{strconv.Itoa(RuleP1): "GT", strconv.Itoa(RuleP2): "GTOL"}
		apply = fmt.Sprintf("GT = %d / lo[2]\nGT = GT - GT %% 1\nif GT < 1 then GT = 1 end\nGTOL = GT * L\n"+
			"if GTOL > 4503599627370496 then GTOL = 4503599627370496 end\n", r.Window)
	}
	evHead += fmt.Sprintf("if OVS and OVS.lims then\n  local lo = OVS.lims[%s]\n  if lo then\n%s"+
		"    OVS.lim = OVS.lim or {}\n    OVS.lim[%d] = L\n"+
		"    if not OVS.ovl or lo[1] > OVS.ovl[1] then OVS.ovl = {lo[1], lo[3]} end\n  end\nend\n",
		quote(r.Name), indent(apply, "    ")+"\n", n)
	cmHead = head + fmt.Sprintf("if OVS and OVS.lim and OVS.lim[%[1]d] then L = OVS.lim[%[1]d] end\n", n)
	return evHead, cmHead, vars
}

// rule writes rule i's declarations, eval block and commit block: its
// fragment's sections with its constants written in and what eval saves
// for commit kept in locals suffixed with its number.
func (f *fastBuilder) rule(i int) {
	r, n := f.rules[i], i+1
	sec := f.secs[fragment(r.Code)]
	evHead, cmHead, vars := f.heads(i)
	var saved []string
	fill := func(section string) string {
		return carry(constants(sec[section], r, vars), func(names []string) string {
			saved = names
			return suffixed(names, n) + " = " + strings.Join(names, ", ")
		}, func(names []string) string {
			return "local " + strings.Join(names, ", ") + " = " + suffixed(names, n)
		})
	}
	ev, cm := fill("eval"), fill("commit")
	fmt.Fprintf(&f.decls, "local F%[1]d, U%[1]d, Z%[1]d, Y%[1]d, E%[1]d, X%[1]d\n", n)
	if len(saved) > 0 {
		fmt.Fprintf(&f.decls, "local %s\n", suffixed(saved, n))
	}
	// A rule sees its value and entry (v, p, pl, pe, pq); a log rule's
	// commit its entry too.
	state := fmt.Sprintf("local v, p, pl, pe, pq = V%[1]d, P%[2]d, N%[2]d, T%[2]d, P%[2]d and P%[2]d + HDRLEN\n", r.Key, n)
	own, ownv := "v", fmt.Sprintf("V%d", r.Key)
	if r.Code == CodeLog {
		own, ownv = "v, p, pl, pq", fmt.Sprintf("V%[1]d, P%[2]d, N%[2]d, P%[2]d and P%[2]d + HDRLEN", r.Key, n)
	}
	fmt.Fprintf(&f.eval, "if not fail then repeat\n%slocal flags, used, reset, retry = 1, 0, 0, 0\n%s%s\n"+
		"if flags ~= 1 then allowed = false end\nF%[4]d, U%[4]d, Z%[4]d, Y%[4]d = flags, used, reset, retry\nuntil true end\n",
		evHead, state, ev, n)
	fmt.Fprintf(&f.commit, "do\n%slocal %s, used, reset = %s, U%d, Z%d\nlocal ent, exp\n%s\nU%[4]d, Z%[4]d, E%[4]d, X%[4]d = used, reset, ent, exp\nend\n",
		cmHead, own, ownv, n, n, cm)
}

// writesAll writes each dimension set's packed value: SETRANGE in place
// when its entries keep their places, lengths and expiries (as
// take.lua), else SET … PXAT, other entries kept (packv).
func (f *fastBuilder) writesAll() {
	w := &f.writes
	for g, rs := range f.groups {
		g++
		var body, inplace []string
		pos := "2"
		fmt.Fprintf(w, "do\n  local top = X%d\n", rs[0]+1)
		for _, i := range rs {
			n := i + 1
			body = append(body, fmt.Sprintf("E%d", n))
			if i != rs[0] {
				fmt.Fprintf(w, "  if X%[1]d > top then top = X%[1]d end\n", n)
			}
			inplace = append(inplace, fmt.Sprintf("P%[1]d == %[2]s and N%[1]d == #E%[1]d - HDRLEN and T%[1]d == X%[1]d", n, pos))
			pos = fmt.Sprintf("P%d + #E%d", n, n)
		}
		fmt.Fprintf(w, "  local body = %s\n", strings.Join(body, " .. "))
		fmt.Fprintf(w, "  if V%[1]d and not O%[1]d and #V%[1]d == 1 + #body and %[2]s then\n"+
			"    redis.call('SETRANGE', KEYS[kb + %[1]d], 1, body)\n"+
			"  elseif not O%[1]d then\n"+
			"    redis.call('SET', KEYS[kb + %[1]d], FMT .. body, 'PXAT', sf('%%d', top))\n"+
			"  else\n"+
			"    local v, vtop = packv(V%[1]d, unpackv(V%[1]d), {%[3]s}, top, nowms)\n"+
			"    redis.call('SET', KEYS[kb + %[1]d], v, 'PXAT', sf('%%d', vtop))\n"+
			"  end\nend\n", g, strings.Join(inplace, "\n      and "), strings.Join(body, ", "))
	}
}

// limit returns the Lua expression of rule i's reported limit.
func (f *fastBuilder) limit(i int) string {
	if f.ov {
		return fmt.Sprintf("(OVS and OVS.lim and OVS.lim[%d]) or %d", i+1, f.rules[i].Limit)
	}
	return fmt.Sprint(f.rules[i].Limit)
}

// trailAll writes the denial trail's entries (take.lua's TRAIL), newest
// last: an override block's, or each denying rule's.
func (f *fastBuilder) trailAll() {
	t := &f.trail
	if f.ov {
		t.WriteString("if OVS and OVS.blk then\n  local ra = 0\n  if OVS.blk[3] > 0 then ra = OVS.blk[3] - now end\n" +
			"  ent[#ent + 1] = sf(TRAIL, now, ARGV[tb + F_POLICY], sf('%d', OVS.blk[1]), 0, 0, c, ra, 4) .. tv\nelse\n")
	}
	for i := len(f.rules) - 1; i >= 0; i-- {
		fmt.Fprintf(t, "if F%[1]d ~= 1 then\n  ent[#ent + 1] = sf(TRAIL, now, ARGV[tb + F_POLICY], %[2]s, U%[1]d, %[3]s, c, Y%[1]d, F%[1]d / 2) .. tv\nend\n",
			i+1, quote(f.rules[i].Name), f.limit(i))
	}
	if f.ov {
		t.WriteString("end\n")
	}
}

// overridesAndReply writes the overrides' read and decision (with
// overrides) and the reply: REPLYHDR then RULEREC per rule, and with an
// override applied take.lua's override element.
func (f *fastBuilder) overridesAndReply() {
	var results []string
	for i := range f.rules {
		results = append(results, fmt.Sprintf("F%[1]d, U%[1]d, Z%[1]d, Y%[1]d", i+1))
	}
	format := fmt.Sprintf("<Bi%d", ReplyInt) + strings.Repeat(fmt.Sprintf("Bi%[1]di%[1]di%[1]d", ReplyInt), len(f.rules))
	first, reported := "allowed and 1 or 0", ""
	if f.ov {
		first = "(allowed and 1 or 0) + (OVR and 4 or 0)"
		// As take.lua: the overrides key read once (HGETALL), parsed by
		// prelude.lua's overrides only when it holds any.
		f.overrides = fmt.Sprintf("local OVS\ndo\n  local h = redis.pcall('HGETALL', KEYS[kb + %d])\n  if h.err then\n"+
			"    reply = redis.error_reply('freqcap: the overrides key is not a hash (WRONGTYPE); not evaluated, nothing written')\n    break\n  end\n"+
			"  if #h > 0 then\n    OVS = {}\n    OVS.blk, OVS.ex, OVS.lims = overrides(h, now)\n  end\nend", len(f.groups)+1)
		f.decide = "if OVS then\n  if OVS.blk then\n    allowed = false\n  elseif OVS.ex then\n    allowed = true\n" +
			"    if not OVS.ex[3] then op = OP_PEEK end -- an uncounted exempt consumes nothing: a peek from here\n  end\nend"
		ls := make([]string, len(f.rules))
		for i := range f.rules {
			ls[i] = fmt.Sprintf("sf('%%d', %s)", f.limit(i))
		}
		reported = "\nif OVR then\n  reply = {reply, sf('%d', OVR[1]) .. '|' .. " + strings.Join(ls, " .. ',' .. ") + " .. '|' .. OVR[2]}\nend"
	}
	f.reply = fmt.Sprintf("reply = struct.pack(%s, %s, now,\n  %s)%s", quote(format), first, strings.Join(results, ",\n  "), reported)
	if f.ov {
		f.reply = "local OVR = OVS and (OVS.blk or OVS.ex or OVS.ovl)\n" + f.reply
	}
}

var (
	fastLine = regexp.MustCompile(`(?m)^([ \t]*)--@(consts|reads|lapse|overrides|decls|each\.eval|decide|each\.commit|writes|trail|reply)[ \t]*$`)
	argv     = regexp.MustCompile(`tonumber\(ARGV\[b \+ (\d)\]\)|ARGV\[b \+ (\d)\]`)
)

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
var eagerHelpers = map[string]bool{"ints": true, "pints": true, "overrides": true}

// helperHead, helperText and helperDefs are prelude.lua and holds.lua
// split once for lazy: prelude.lua's text before its functions (its
// constants), holds.lua's, and their top-level functions in order;
// helperCall matches a call of one of those functions.
var (
	helperHead, helperText, helperDefs = func() (string, string, []helperDef) {
		head, defs := splitHelpers(expand(read("prelude.lua")))
		text, hdefs := splitHelpers(expand(read("holds.lua")))
		return head, text, append(defs, hdefs...)
	}()
	helperCall = func() *regexp.Regexp {
		names := make([]string, len(helperDefs))
		for i, d := range helperDefs {
			names[i] = d.name
		}
		return regexp.MustCompile(`(^|[^.\w])(` + strings.Join(names, "|") + `)\(`)
	}()
)

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
	for _, m := range helperCall.FindAllStringSubmatch(body, -1) {
		eager[m[2]] = eagerHelpers[m[2]]
	}
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
	body = helperCall.ReplaceAllStringFunc(body, func(call string) string {
		m := helperCall.FindStringSubmatch(call)
		if eager[m[2]] {
			return call
		}
		return m[1] + "L()." + m[2] + "("
	})
	return helperHead + helperText + top.String() +
		"-- The helpers built on first use (lua.Fast, lazy): L() returns them.\nlocal lib\nlocal function L()\n  if lib then return lib end\n" +
		lib.String() + "  lib = {" + strings.Join(fields, ", ") + "}\n  return lib\nend\n", body
}
