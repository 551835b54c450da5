package lua

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/freqcap/freqcap/sdk/driver"
)

// What the redis backend and its scripts (package lua) share, declared
// once: the positions of take.lua's and the fast scripts' ARGV, the op
// and algorithm codes, the packed value's entry header, the reply's
// per-rule record and flags, the trail entry and its flags, and the
// idempotency record. The Go encoder and parsers (backends/redis) use
// these constants; the Lua sources name them with upper-case tokens
// (A_COST, R_LIMIT, FHEAD, OP_TAKE, HDR, REC, RULE_TOOHIGH,
// TRAIL_SHADOW, …) that subst replaces with their values when the
// scripts are built, so no offset, code, flag or format is written
// twice. A token the declaration lacks stops the build (init panics;
// TestTokens lists them), and TestNoBareFlags fails on a flag written
// as a number in the sources.

// take.lua's ARGV per attempt, from the attempt's offset a: ARGV[a+ArgX].
const (
	ArgOp          = iota + 1 // op code (OpTake, …)
	ArgCost                   // cost, >= 1
	ArgRules                  // n, the number of rules
	ArgKeys                   // nk, the number of keys of the attempt
	ArgTrail                  // index of the trail (list) among the attempt's keys, 0 = none
	ArgHolds                  // index of the reservations (hash), 0 = none
	ArgRecord                 // index of the idempotency record, 0 = none
	ArgTrailMax               // trail: max entries (0: none written; op i: 0 reads all)
	ArgTrailTTL               // trail: TTL, ms
	ArgPolicy                 // policy name (trail entries)
	ArgTrailValues            // trail: the attempt's values, "" = none
	ArgRecordTTL              // the idempotency record's TTL, ms
	ArgHoldID                 // op r: hold id
	ArgHoldLife               // op r: its lifetime, µs
	ArgHoldsTTL               // op r: the reservations key's TTL, ms
	ArgOverrides              // index of the overrides (hash), 0 = none
	ArgModes                  // "" or the rules' modes, keeps and the quiet spans (ModeSep, Mode*)
	ArgSeeds                  // "" or per rule its seed, comma-separated
	ArgWindows                // "" or per rule its window µs (GCRA under overrides)
	ArgNest                   // "" or per nested set one NestRec
	// HeaderArgs is the number of values per attempt before its rules'.
	HeaderArgs = iota
)

// take.lua's ARGV per rule, from the rule's offset b: ARGV[b+RuleX].
const (
	RuleCode  = iota + 1 // algorithm code
	RuleName             // rule name
	RuleLimit            // limit
	RuleP1               // first parameter
	RuleP2               // second parameter
	RuleTag              // packed entry tag
	RuleKey              // index of the rule's state key
	RuleOld              // index of its one-key-per-rule layout key, 0 = none
	// RuleArgs is the number of values per rule.
	RuleArgs = iota
)

// A fast script's head: one ARGV value per attempt (fast.lua.tmpl's
// header), struct FastHead (FHEAD in Lua): op code (OpTake or OpPeek),
// cost (>= 1), the trail's and the reservations' index among the
// attempt's keys (0 = none), the trail's max entries and TTL (ms), the
// number of quiet spans; then, FastHeadLen bytes in, the nested sets'
// ids (FastIDLen bytes each, in the order of their keys), the quiet
// spans (struct FastSpan each, FSPAN: start and end µs), and last the
// policy name and the trail values, after TrailSep (empty when there are
// none: what follows a trail entry as the script writes it), each its
// length then its bytes (struct FastTrail, FTRAIL: read only for a
// denial's trail). One binary
// value costs the script one string where separate values cost one each,
// and a struct.unpack reads it where tonumber parses text.
const (
	FastHead    = "<c1i8BBi8i8B"
	FastHeadLen = 1 + 8 + 1 + 1 + 8 + 8 + 1
	FastIDLen   = 8
	FastSpan    = "<i8i8"
	FastSpanLen = 16
	FastTrail   = "<i4c0i4c0"
)

// Op codes: ARGV[a+ArgOp].
const (
	OpTake    = "t"
	OpPeek    = "p"
	OpReserve = "r"
	OpInspect = "i"
)

// Algorithm codes: ARGV[b+RuleCode]. Packed codes keep their state as an
// entry of the dimension set's packed value, CodeZLog in the set's
// sorted set, the module codes in a key of the rule's own.
const (
	CodeFixed    = "f" // fixed window, epoch-aligned
	CodeCalendar = "c" // calendar window
	CodeSliding  = "s" // sliding window counters
	CodeGCRA     = "g" // GCRA
	CodeLog      = "l" // packed sliding log
	CodeZLog     = "z" // sliding log in a sorted set
	CodeTairHash = "t" // sliding window on TairHash fields
	CodeHFE      = "h" // sliding window on native hash-field expiry
	CodeCell     = "x" // GCRA on redis-cell
)

// The packed value's entry header: tag, payload length, expiry (Unix ms),
// little-endian, then the payload of PackedInt-byte numbers.
const (
	PackedTag    = 4
	PackedLen    = 3
	PackedExpiry = 6
	PackedHeader = PackedTag + PackedLen + PackedExpiry
	PackedInt    = 7
)

// The reply's record per rule: flags (1 byte), then used, reset-after µs
// and retry-after µs as ReplyInt-byte signed little-endian numbers.
const (
	ReplyInt      = 7
	ReplyPerRule  = 4
	ReplyRuleSize = 1 + 3*ReplyInt
)

// The reply's first element (take.lua's first element, a fast script's
// first byte, an idempotency record's, parseReply): bits. 0 is a denial
// decided now.
const (
	ReplyAllowed  = 1 // allowed (REPLY_ALLOWED in Lua)
	ReplyReplayed = 2 // a replay of the decision stored under the idempotency key (REPLY_REPLAYED)
	ReplyOverride = 4 // an override applied: its element follows the rules (REPLY_OVERRIDE)
	// ReplyQuiet: denied for quiet hours (driver.Request.Quiet): the end
	// of the quiet span, µs, follows the rules and the override element
	// (REPLY_QUIET).
	ReplyQuiet = 8
	// ReplyKeep, in an idempotency record and its replay only: the
	// attempt's rules kept headroom (driver.Rule.Keep), and the keeps
	// element follows the quiet end: per rule its Keep, comma-separated
	// (REPLY_KEEP; the highest bit), so that a replay reports the room the
	// original attempt had, whatever the retry's.
	ReplyKeep = 16
)

// take.lua's ARGV[a+ArgModes] (A_MODES): "" when no rule of the attempt
// is shadow, exempt or keeps headroom and it has no quiet hours (the
// common case: nothing parsed); else three parts joined by ModeSep: one
// character per rule (ModePlain, ModeShadow: driver.Rule.Shadow,
// ModeCounted and ModeUncounted: driver.Rule.Exempt), then "" or per
// rule its driver.Rule.Keep (comma-separated), then "" or the quiet spans
// (driver.Request.Quiet) as start and end µs, comma-separated (a span
// [start, end) holds the server's now iff start <= now < end, both
// rounded up to whole µs).
const (
	ModeSep       = ";"
	ModePlain     = '0'
	ModeShadow    = '1'
	ModeCounted   = '2'
	ModeUncounted = '3'
)

// A rule's flags, the first byte of its record in the reply: one of
// these (RULE_DENIED, RULE_ALLOWED, RULE_TOOHIGH in Lua, where the
// algorithm fragments' eval sections set them).
const (
	RuleFlagDenied  = 0
	RuleFlagAllowed = 1
	RuleFlagTooHigh = 2 // the cost could never fit: denied whatever the state
)

// TrailEntry is a denial-trail entry (the list at driver.Request.TrailKey,
// newest first), for Go's fmt and Lua's string.format alike (TRAILENT in
// Lua; prelude.lua's TRAIL): at µs, policy, rule, used, limit, cost,
// retry µs, flags (Trail*). An entry then has TrailSep and the request's
// values when it had driver.Request.TrailValues; entries written before
// values existed have TrailFields fields.
const (
	TrailEntry  = "%d|%s|%s|%d|%d|%d|%d|%d"
	TrailSep    = "|"
	TrailFields = 8
)

// The fields of TrailEntry a fast script may write in (trailFormat).
const (
	trailRule  = 2
	trailUsed  = 3
	trailLimit = 4
	trailFlags = 7
)

// trailFormat returns TrailEntry with the fields of fixed written in (a
// '%' doubled), then "%s" for what follows the entry: a fast script
// formats a rule's entries, its values ("" or TrailSep and the values)
// included, in one string.format of fewer arguments (QUIETENT, and
// fast.lua.tmpl's trailfmt per rule).
func trailFormat(fixed map[int]string) string {
	f := strings.Split(TrailEntry, TrailSep)
	for i, v := range fixed {
		f[i] = strings.ReplaceAll(v, "%", "%%")
	}
	return strings.Join(f, TrailSep) + "%s"
}

// A trail entry's flags (its last field), bits: the cost could never fit;
// a shadow rule would have denied; a block override denied, the rule
// field then the override's ID, used and limit 0 (TRAIL_TOOHIGH,
// TRAIL_SHADOW, TRAIL_OVERRIDE in Lua). Entries written before shadow
// rules and overrides have flags 0 or 1, and read the same.
const (
	TrailTooHigh  = 1
	TrailShadow   = 2
	TrailOverride = 4
	// TrailExempt: an exempt rule (driver.Rule.Exempt) would have denied
	// (TRAIL_EXEMPT); TrailQuiet: denied for quiet hours, the rule field
	// empty, used and limit 0, retry until the span ends (TRAIL_QUIET).
	TrailExempt = 8
	TrailQuiet  = 16
)

// The idempotency record (the value at driver.Request.IdempotencyKey), one
// format whoever writes it (take.lua; bare mode, backends/redis/storage.go):
// RecordMark (one byte, REC in Lua), then the header, struct RECHDR: the
// reply's first element (ReplyAllowed or 0, plus ReplyOverride when an
// override applied, ReplyQuiet when denied for quiet hours; one byte), now µs (ReplyInt bytes, signed) and the
// length of the rules' bytes (RecordLen bytes); then the rules' bytes as
// the reply has them (ReplyRuleSize per rule); then, when the first
// element has ReplyOverride, the override element, its length as RecordLen bytes (struct RECLEN)
// then its bytes; then, when it has ReplyQuiet, the quiet span's end µs
// (ReplyInt bytes, signed: struct RECQUIET); then, when it has ReplyKeep,
// the keeps element (RecordLen bytes of length, then its bytes); then the reservation id to the end ("" for a take or a
// denial). Little-endian. A value not starting with RecordMark is the
// legacy text "<reservation id>|<the reply's integers, comma-separated>",
// read only.
const (
	RecordMark   = 2
	RecordLen    = 2
	RecordHeader = 1 + 1 + ReplyInt + RecordLen
)

// The refusal of a redis-cell GCRA state key (alg/cell.lua; bare mode,
// backends/redis/barecell.go): "freqcap: rule <name>: " + CellKey + " " +
// CellWrongType or CellForeign + Untouched. CL.THROTTLE aborts the server
// on a key holding anything but its TAT, so such a key is never passed to
// it. Untouched ends every refusal of a state key (FOREIGN in prelude.lua,
// alg/zlog.lua's).
const (
	CellKey       = "the GCRA state key"
	CellWrongType = "is not a string key (WRONGTYPE)"
	CellForeign   = "holds a value CL.THROTTLE did not write (it would abort the server on it)"
	Untouched     = "; not evaluated, nothing written (delete the key or reset the subject)"
)

// NestRec is take.lua's ARGV[a+A_NEST] per nested set (prelude.lua),
// struct NESTREC, little-endian: the set's key index (2 bytes), its
// root's (2 bytes), its root's wide hash's (2 bytes; WideSuffix), flags
// (1 byte: NestUpgrade, NestHFE, NestWide), its id (backends/redis's sectionID, 8
// bytes).
const NestRec = 2 + 2 + 2 + 1 + 8

// NestRec's flags: Options.Upgrade (a set without its section yet is read
// from its own key, the layout before nesting); the server has native
// hash-field expiry (HPEXPIREAT), which a root that goes wide then uses
// for its fields; the set is declared wide (driver.Rule.Wide, sdk.WithWide):
// its root goes wide with its first section, whatever its length
// (NEST_UPGRADE, NEST_HFE, NEST_WIDE in Lua).
const (
	NestUpgrade = 1
	NestHFE     = 2
	NestWide    = 4
)

// Wide roots (prelude.lua, docs/DESIGN.md "Wide subjects"). A root whose
// packed value would pass WideAt bytes while holding sections goes wide:
// every section moves to a hash at the root's key plus WideSuffix (same
// hash tag), field = the section's 8-byte id, value = the section's bytes
// unchanged, then, once a write of this version has named it, a trailer:
// when the field was last written (ms, WideTrailStamp bytes,
// little-endian) and the value's name (the nested set's key past its
// root's key, e.g. "campaign:spring-sale"), which a listing of a person's
// values shows (a section moved in from a narrow root has none until its
// next write: the packed root stores ids, not names); the root keeps its own entries and a wide marker, the entry
// tagged WideTag (never a rule's tag, nor the hold marker's), whose
// payload is the mode (WideModeHFE: the fields expire by themselves,
// HPEXPIREAT; WideModeSweep: a bounded sweep removes dead fields) then the
// sweep's HSCAN cursor, and whose expiry is the latest of the hash's
// fields (the hash key's PEXPIREAT). A wide root's value starts with
// WideFormat instead of the packed format byte, so that a freqcap that
// knows nothing of wide roots refuses it (its unpackv: a value freqcap did
// not write, an error) rather than read a root without sections (every
// nested count afresh). take.lua and the fast scripts alike read a wide
// root's nested sets with wide.get (one HGET each) and write them with
// wide.root (fast.lua.tmpl's header). WideSweep is the sweep's HSCAN
// COUNT per write that adds a field. The hash key, its
// fields' own expiry (WideModeHFE) and the wide root's key outlive the
// latest expiry they hold by ExpirySlackMs.
const (
	WideAt         = 2048
	WideSuffix     = "%w"
	WideFormat     = 2
	WideTag        = "\x00\x00\x00\x01"
	WideModeHFE    = "h"
	WideModeSweep  = "s"
	WideSweep      = 8
	WideTrailStamp = 6
)

// CarryRec is a packed log's p2 (take.lua's ARGV[b+R_P2], code CodeLog)
// under Options.Upgrade for a sliding window evaluated as a log
// (driver.Rule.ExactLog), struct CARRYREC, little-endian: CodeSliding (one
// byte, which no key index starts with), then the cells the rule counted
// in before it was a log, as CodeSliding's p1 and p2 (K, the cells counted
// behind the current one, and the cell's µs: driver.CellSpan), PackedInt
// bytes each, and their entry's tag (PackedTag bytes). take.lua carries
// them into the log when it is not there yet (upgrade.lua's oldLogs).
const CarryRec = 1 + 2*PackedInt + PackedTag

// ExpirySlackMs is how long, in ms, a key or hash field whose expiry a
// script computes from its TIME outlives the last instant it counts
// (wide roots' hashes, fields and keys: prelude.lua's wide; sorted-set
// logs: alg/zlog.lua, take.lua's log seeding; EXPSLACK in Lua). Redis
// 7.0 deletes a key at once when PEXPIREAT (or HPEXPIREAT) names an
// instant its own clock has passed, and that clock goes on during a
// script while every decision of it reads one TIME (a batch of hundreds
// of attempts takes milliseconds): without the slack a key written early
// in such a script, whose window ends during it, is gone for the script's
// later attempts, which then count from nothing (TestExpiryInLongScript,
// TestWideSprays). Entries inside a value carry their own expiry; the
// key's only reclaims memory. SET with PXAT does not delete at once (the
// key expires when next read, by the script's TIME inside a script).
const ExpirySlackMs = 1000

// FieldSlackMs is how long, in ms, a TairHash field holding a sliding
// window's cell outlives the last ms the cell counts (SLACKMS in Lua;
// modsliding.lua, and bare mode, backends/redis/bare.go). Cells are
// counted by index against the decision's TIME, but TairHash expires a
// field by its own clock when it is read, later than that TIME by the
// time between them (a loaded server: milliseconds): without the slack a
// cell still counting could be read as gone, and admit units over the
// limit. Expiry only reclaims memory.
const FieldSlackMs = 1000

// hdrFormat is the packed entry header's struct format (HDR, without its
// '<').
var hdrFormat = fmt.Sprintf("c%dI%dI%d", PackedTag, PackedLen, PackedExpiry)

// tokens maps each Lua token to the text that replaces it.
var tokens = func() map[string]string {
	hdr := "<" + hdrFormat
	m := map[string]string{
		"HA": strconv.Itoa(HeaderArgs), "RA": strconv.Itoa(RuleArgs),
		"FHEAD": quote(FastHead), "FSPAN": quote(FastSpan), "FSPANLEN": strconv.Itoa(FastSpanLen),
		"FTRAIL": quote(FastTrail), "QEND": quote(fmt.Sprintf("<i%d", ReplyInt)),
		"C_FIXED": quote(CodeFixed), "C_CALENDAR": quote(CodeCalendar), "C_SLIDING": quote(CodeSliding),
		"C_GCRA": quote(CodeGCRA), "C_LOG": quote(CodeLog), "C_ZLOG": quote(CodeZLog),
		"C_TAIRHASH": quote(CodeTairHash), "C_HFE": quote(CodeHFE), "C_CELL": quote(CodeCell),
		"OP_TAKE": quote(OpTake), "OP_PEEK": quote(OpPeek), "OP_RESERVE": quote(OpReserve), "OP_INSPECT": quote(OpInspect),
		"HDR":    quote(hdr),
		"HDRLEN": strconv.Itoa(PackedHeader),
		// A nested set's section header (prelude.lua): the entry's, then
		// the id's last 4 bytes.
		"SECTHDR": quote(hdr + "c4"),
		"PINT":    quote(fmt.Sprintf("<I%d", PackedInt)),
		// Whole entries, header first, for struct.pack (alg/*.lua's
		// --@entry lines): one number (alg/fixed.lua, alg/gcra.lua); a
		// packed log (alg/log.lua: base, the records but the last as
		// stored, c0: a string, then the last record).
		"ENTINT":   quote(hdr + fmt.Sprintf("I%d", PackedInt)),
		"LOGENT":   quote(hdr + fmt.Sprintf("I%[1]dc0I%[1]dI%[1]d", PackedInt)),
		"RULEREC":  quote(fmt.Sprintf("<Bi%[1]di%[1]di%[1]d", ReplyInt)),
		"REPLYHDR": quote(fmt.Sprintf("<Bi%d", ReplyInt)),
		"REC":      quote(string(rune(RecordMark))),
		"RECHDR":   quote(fmt.Sprintf("<Bi%dI%d", ReplyInt, RecordLen)),
		"RECLEN":   quote(fmt.Sprintf("<I%d", RecordLen)),
		"SLACKMS":  strconv.Itoa(FieldSlackMs),
		// A counted exempt's saturation (driver.MaxUsed: the units a rule
		// counts at most; driver.MaxDebt: how far ahead of now, in µs, it
		// may move a GCRA rule's TAT).
		"MAXUSED":      strconv.FormatInt(driver.MaxUsed, 10),
		"MAXDEBT":      strconv.FormatInt(driver.MaxDebt.Microseconds(), 10),
		"NESTREC":      quote("<I2I2I2Bc8"),
		"NEST_UPGRADE": strconv.Itoa(NestUpgrade), "NEST_HFE": strconv.Itoa(NestHFE), "NEST_WIDE": strconv.Itoa(NestWide),
		"WIDEAT": strconv.Itoa(WideAt), "WIDESUFFIX": quote(WideSuffix), "WIDEFMT": quote(string(rune(WideFormat))),
		"WIDETAG": quote(WideTag), "WIDE_HFE": quote(WideModeHFE), "WIDE_SWEEP": quote(WideModeSweep),
		"WIDESWEEP": strconv.Itoa(WideSweep), "EXPSLACK": strconv.Itoa(ExpirySlackMs),
		"WIDETRAIL": quote(fmt.Sprintf("<I%d", WideTrailStamp)), "WIDETRAILLEN": strconv.Itoa(WideTrailStamp),
		"NESTLEN":  strconv.Itoa(NestRec),
		"CARRYREC": quote(fmt.Sprintf("<c1I%[1]dI%[1]dc%[2]d", PackedInt, PackedTag)),
		"CELL_KEY": quote(CellKey), "CELL_WRONGTYPE": quote(CellWrongType), "CELL_FOREIGN": quote(CellForeign),
		"UNTOUCHED":     quote(Untouched),
		"REPLY_ALLOWED": strconv.Itoa(ReplyAllowed), "REPLY_REPLAYED": strconv.Itoa(ReplyReplayed),
		"REPLY_OVERRIDE": strconv.Itoa(ReplyOverride),
		"RULE_DENIED":    strconv.Itoa(RuleFlagDenied), "RULE_ALLOWED": strconv.Itoa(RuleFlagAllowed),
		"RULE_TOOHIGH": strconv.Itoa(RuleFlagTooHigh),
		"TRAILENT":     quote(TrailEntry), "TRAILSEP": quote(TrailSep),
		"QUIETENT":      quote(trailFormat(map[int]string{trailRule: "", trailUsed: "0", trailLimit: "0", trailFlags: strconv.Itoa(TrailQuiet)})),
		"TRAIL_TOOHIGH": strconv.Itoa(TrailTooHigh), "TRAIL_SHADOW": strconv.Itoa(TrailShadow),
		"TRAIL_OVERRIDE": strconv.Itoa(TrailOverride), "TRAIL_EXEMPT": strconv.Itoa(TrailExempt),
		"TRAIL_QUIET": strconv.Itoa(TrailQuiet), "REPLY_QUIET": strconv.Itoa(ReplyQuiet), "REPLY_KEEP": strconv.Itoa(ReplyKeep),
		"RECQUIET": quote(fmt.Sprintf("<i%d", ReplyInt)), "MODESEP": quote(ModeSep),
		"MODE_SHADOW": strconv.Itoa(ModeShadow), "MODE_COUNTED": strconv.Itoa(ModeCounted),
		"MODE_UNCOUNTED": strconv.Itoa(ModeUncounted),
	}
	for i, n := range [...]string{ArgOp: "OP", ArgCost: "COST", ArgRules: "RULES", ArgKeys: "KEYS",
		ArgTrail: "TRAIL", ArgHolds: "HOLDS", ArgRecord: "RECORD", ArgTrailMax: "TRAIL_MAX",
		ArgTrailTTL: "TRAIL_TTL", ArgPolicy: "POLICY", ArgTrailValues: "TRAIL_VALUES",
		ArgRecordTTL: "RECORD_TTL", ArgHoldID: "HOLD_ID", ArgHoldLife: "HOLD_LIFE",
		ArgHoldsTTL: "HOLDS_TTL", ArgOverrides: "OVERRIDES", ArgModes: "MODES",
		ArgSeeds: "SEEDS", ArgWindows: "WINDOWS", ArgNest: "NEST"} {
		if i > 0 {
			m["A_"+n] = strconv.Itoa(i)
		}
	}
	for i, n := range [...]string{RuleCode: "CODE", RuleName: "NAME", RuleLimit: "LIMIT", RuleP1: "P1",
		RuleP2: "P2", RuleTag: "TAG", RuleKey: "KEY", RuleOld: "OLD"} {
		if i > 0 {
			m["R_"+n] = strconv.Itoa(i)
		}
	}
	return m
}()

// generic reports whether word has a token's generic shape: A_X, R_X,
// C_X (upper case, digits, '_') or OP_X (upper case). A word of that
// shape that tokens lacks panics in subst; tokens' other names are
// tokens by declaration only.
func generic(word string) bool {
	upper := func(s string, digits bool) bool {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !('A' <= c && c <= 'Z' || digits && ('0' <= c && c <= '9' || c == '_')) {
				return false
			}
		}
		return s != ""
	}
	if len(word) > 2 && word[1] == '_' && strings.IndexByte("ARC", word[0]) >= 0 {
		return upper(word[2:], true)
	}
	return strings.HasPrefix(word, "OP_") && upper(word[3:], false)
}

// wordByte reports whether c is a word byte (regexp's \w: ASCII letters,
// digits, '_').
func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

// replaceWords writes s to b with each of its words (maximal runs of
// word bytes) replaced by f's result where f says so.
func replaceWords(b *strings.Builder, s string, f func(word string, at int) (string, bool)) {
	from := 0
	for i := 0; i < len(s); {
		if !wordByte(s[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && wordByte(s[j]) {
			j++
		}
		if v, ok := f(s[i:j], i); ok {
			b.WriteString(s[from:i])
			b.WriteString(v)
			from = j
		}
		i = j
	}
	b.WriteString(s[from:])
}

// subst replaces the tokens of src's code (not of its comments or
// string literals: a rule's name or tag written into a fast script stays
// as it is) with their values; an unknown token panics.
func subst(src string) string {
	var b strings.Builder
	b.Grow(len(src))
	code := func(s string) {
		replaceWords(&b, s, func(w string, _ int) (string, bool) {
			v, ok := tokens[w]
			if !ok && generic(w) {
				panic(fmt.Sprintf("lua: token %s is not declared (internal/lua/tokens.go)", w))
			}
			return v, ok
		})
	}
	from := 0  // start of the code not yet written
	var q byte // the quote of the string literal we are in, or 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case q != 0:
			if c == '\\' {
				i++
			} else if c == q || c == '\n' {
				q = 0
				b.WriteString(src[from : i+1])
				from = i + 1
			}
		case c == '\'' || c == '"':
			code(src[from:i])
			from, q = i, c
		case c == '-' && i+1 < len(src) && src[i+1] == '-':
			code(src[from:i])
			end := strings.IndexByte(src[i:], '\n')
			if end < 0 {
				end = len(src) - i - 1
			}
			b.WriteString(src[i : i+end+1])
			i += end
			from = i + 1
		}
	}
	if q != 0 {
		b.WriteString(src[from:])
	} else if from < len(src) {
		code(src[from:])
	}
	return b.String()
}
