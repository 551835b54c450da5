package redis

import (
	"crypto/sha1"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The formats of what the backend keeps in Redis: state keys and their
// suffixes, nested sets, packed entries' tags and the packed value, trail
// entries, overrides, idempotency records and reservations. The Lua
// sources (package lua) read and write the same formats; the constants
// both sides use (headers, marks, flags, the trail entry's format) are
// declared once, in internal/lua/tokens.go.

// Key suffixes. A rule under a module strategy keeps its state at
// driver.Rule.Key plus its suffix, so that a change of strategy (a module
// loaded or removed, a configuration change, a rule whose GCRA parameters
// stop fitting CL.THROTTLE) moves the rule to other keys: a TairHash key
// read by HGETALL is WRONGTYPE, and CL.THROTTLE aborts the server when its
// key holds anything but its own TAT. The sliding logs of a dimension set
// share one sorted set, the set's key (driver.Rule.Group) plus suffixLog
// (logKey).
//
// The suffixes begin with '%' followed by a letter that is not a hex
// digit. The sdk escapes '%' in subject values as %XX (two hex digits), so
// no key the sdk builds ends in one of them: a suffixed key can never be
// another rule's or another subject's key. The hash tag is unchanged.
const (
	suffixTairHash = "%t"
	suffixHFE      = "%h"
	suffixCell     = "%x"
	suffixLog      = "%l"
)

// Nested sets (docs/DESIGN.md, "One key per subject"). The packed value
// of a dimension set whose key extends a root's, the key of the set of
// the shard dimensions alone (the sdk's group keys: "<base>=" for that
// set, "<base>=<dimensions>:<values>" for the others), is kept as a
// section of the root's value (lua/prelude.lua), whether or not
// the request has rules of the root's own: one key per subject and
// policy, one GET and one write per decision, and a policy that gains or
// loses rules over the shard dimensions alone moves no state. A section is identified by sectionID of the
// set's key; reservations name it by its vkey, the root's key, nestMark,
// then the rest of the set's key (the sdk escapes '%' as %XX: no key it
// builds holds nestMark).
const nestMark = "%n"

// nests reports whether the packed value of the set at key is kept in
// the value at root: root ends with '=' and key extends it, and neither
// holds nestMark.
func nests(key, root string) bool {
	return len(root) < len(key) && root[len(root)-1] == '=' && strings.HasPrefix(key, root) && !strings.Contains(key, nestMark)
}

// rootOf returns the root key whose value a set at key may nest in: key
// up to the first '=' after its hash tag (the sdk's group keys), key
// itself for a root; "" for a key of no such shape.
func rootOf(key string) string {
	i := strings.IndexByte(key, '}')
	if i < 0 || strings.Contains(key, nestMark) {
		return ""
	}
	j := strings.IndexByte(key[i:], '=')
	if j < 0 {
		return ""
	}
	return key[:i+j+1]
}

// wideKey returns the key of the hash that holds the sections of the
// root at root once it is wide (lua.WideAt; lua/prelude.lua's wide): the
// root's key plus lua.WideSuffix, in the root's hash slot.
func wideKey(root string) string { return root + lua.WideSuffix }

// wideHFE reports whether a root going wide on the server rep describes
// gives its hash's fields their expiry with HPEXPIREAT (native hash-field
// expiry, Redis >= 7.4 and Valkey >= 9), rather than a bounded sweep of
// dead fields on each write: detection's choice (capability.Wide, which
// Describe and freqcap detect print).
func wideHFE(rep *capability.Report) bool {
	return rep != nil && rep.Wide.Mode == lua.WideModeHFE
}

// sectionID returns the id of the section of the nested set at key: the
// first 8 bytes of its SHA-1, the first byte's high bit set (a section's
// tag then, never a rule's or the hold marker's; prelude.lua's sectid).
func sectionID(key string) string { return string(appendSectionID(make([]byte, 0, 8), key)) }

// appendSectionID appends sectionID(key) to b.
func appendSectionID(b []byte, key string) []byte {
	h := sha1.Sum([]byte(key))
	h[0] |= 0x80
	return append(b, h[:8]...)
}

// vkey splits a reservation entry's key into the root's key and the
// nested set's key; a key without nestMark is its own root (set "").
func vkey(k string) (root, set string) {
	i := strings.Index(k, nestMark)
	if i < 0 {
		return k, ""
	}
	return k[:i], k[:i] + k[i+len(nestMark):]
}

// keySuffix returns the state key suffix of a module algorithm code.
func keySuffix(code string) string {
	switch code {
	case codeTairHash:
		return suffixTairHash
	case codeHFE:
		return suffixHFE
	case codeCell:
		return suffixCell
	}
	return ""
}

// tagAlphabet is what packed-entry tags are written in: no byte below
// 0x21, so a tag can stand in a reservation's space-separated entries.
const tagAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// ruleTag returns the 4-byte tag of r's entry in a packed value: a hash
// of what gives the state its meaning (name, algorithm, window, cells,
// calendar unit and zone, and the epoch when it is > 0:
// driver.Rule.Epoch), not of the limit, burst or shadow flag, so a rule
// whose limit changes, or that turns shadow, keeps its counts and a rule
// changed otherwise starts afresh. A rule of epoch 0 has the tag it had
// before epochs existed. 24 bits: two rules of one dimension set collide
// with odds of about 1 in 16 million per pair.
func ruleTag(r *driver.Rule) string {
	h := fnv.New64a()
	zone := ""
	if r.Location != nil && r.Calendar != driver.NoCalendar {
		zone = r.Location.String()
	}
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00%d\x00%s", r.Name, r.Algorithm, int64(r.Window), r.SubWindows, r.Calendar, zone)
	if r.Epoch > 0 {
		fmt.Fprintf(h, "\x00e%d", r.Epoch)
	}
	s := h.Sum64()
	var b [4]byte
	for i := range b {
		b[i] = tagAlphabet[s&63]
		s >>= 6
	}
	return string(b[:])
}

// logTagOf returns the tag of r's packed sliding log (codeLog): ruleTag
// of r as a SlidingLog rule, so a SlidingWindow rule evaluated as a log
// never counts as a log the cells its tag (ruleTag) held in a version
// before driver.LogLine, or holds again above it. Under Options.Upgrade
// its log is built from those cells once (carryCells); otherwise its
// counts start afresh there, as a rule's of another algorithm.
func logTagOf(r *driver.Rule) string {
	q := *r
	q.Algorithm, q.SubWindows = driver.SlidingLog, 0
	return ruleTag(&q)
}

// carryCells returns the p2 of SlidingWindow rule r evaluated as a packed
// log under Options.Upgrade: lua.CarryRec, codeSliding then the cells r
// counted in before it was a log (the version before driver.LogLine: its
// CellSpan in µs, as codeSliding's p1 and p2, and its entry's tag,
// ruleTag). take.lua builds r's log from them once, where the log is not
// there yet: from that entry of the set's packed value, else from the
// one-key-per-rule layout's hash (the rule's own key), each cell still
// counting carried as a record that leaves the window when the cell
// would have stopped counting (lua/alg/log.lua's import).
func carryCells(r *driver.Rule) string {
	sp := r.Span(time.Microsecond)
	b := make([]byte, 0, lua.CarryRec)
	b = append(b, codeSliding...)
	b = appendLE(appendLE(b, sp.Back, packedInt), sp.Size, packedInt)
	return string(append(b, ruleTag(r)...))
}

// Trail entries (the list at driver.Request.TrailKey), newest first:
// lua.TrailEntry, "at µs|policy|rule|used|limit|cost|retry µs|flags",
// then "|values" when the request had TrailValues; flags are
// lua.TrailTooHigh, lua.TrailShadow, lua.TrailOverride, lua.TrailExempt
// and lua.TrailQuiet. The format
// and the flags are declared once, in internal/lua/tokens.go: take.lua
// and the fast scripts write entries with the same declaration (TRAILENT
// and the TRAIL_* tokens), bare mode with formatDenial.
const (
	trailTooHigh  = lua.TrailTooHigh
	trailShadow   = lua.TrailShadow
	trailOverride = lua.TrailOverride
	trailExempt   = lua.TrailExempt
	trailQuiet    = lua.TrailQuiet
)

// formatDenial writes one trail entry (bare mode; take.lua writes the
// same).
func formatDenial(at int64, policy, rule string, used, limit, cost, retry int64, tooHigh, shadow bool, values string) string {
	flags := 0
	if tooHigh {
		flags |= trailTooHigh
	}
	if shadow {
		flags |= trailShadow
	}
	e := fmt.Sprintf(lua.TrailEntry, at, policy, rule, used, limit, cost, retry, flags)
	if values != "" {
		e += lua.TrailSep + values
	}
	return e
}

// parseDenial decodes one trail entry.
func parseDenial(s string) (driver.Denial, error) {
	f := strings.Split(s, lua.TrailSep)
	if len(f) != lua.TrailFields && len(f) != lua.TrailFields+1 {
		return driver.Denial{}, fmt.Errorf("reply: trail entry: want %d or %d fields, got %d", lua.TrailFields, lua.TrailFields+1, len(f))
	}
	var ints [lua.TrailFields]int64
	for _, i := range []int{0, 3, 4, 5, 6, 7} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return driver.Denial{}, fmt.Errorf("reply: trail entry: field %d: %q is not an integer", i, f[i])
		}
		ints[i] = n
	}
	var values string
	if len(f) == lua.TrailFields+1 {
		values = f[lua.TrailFields]
	}
	flags := ints[7]
	if flags < 0 || flags > trailTooHigh|trailShadow|trailOverride|trailExempt|trailQuiet {
		return driver.Denial{}, fmt.Errorf("reply: trail entry: flags %d out of range", flags)
	}
	d := driver.Denial{
		Values:      values,
		At:          time.UnixMicro(ints[0]),
		Policy:      f[1],
		Rule:        f[2],
		Used:        ints[3],
		Limit:       ints[4],
		Cost:        ints[5],
		RetryAfter:  time.Duration(ints[6]) * time.Microsecond,
		CostTooHigh: flags&trailTooHigh != 0,
		Shadow:      flags&trailShadow != 0,
		Exempt:      flags&trailExempt != 0,
		Quiet:       flags&trailQuiet != 0,
	}
	if flags&trailOverride != 0 {
		id, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || id <= 0 {
			return driver.Denial{}, fmt.Errorf("reply: trail entry: override entry without an override ID")
		}
		d.Rule, d.Override = "", id
	}
	return d, nil
}

// Overrides (driver.Request.OverrideKey, a hash): field = the override's
// ID in decimal, value = "<kind>|<counted>|<until µs>|<created µs>|
// <limits>|<len(by)>|<by><reason>", where kind is e (exempt), b (block)
// or l (limit), counted 0 or 1, until 0 for none, and limits
// "<rule>=<limit>" comma-separated (rule names never hold ',', '=' or
// '|'). take.lua reads the first five fields; overrides.lua writes
// created. IDs come from INCR of overrideCounter(key).

// overrideKinds maps a kind to its code in the stored value.
var overrideKinds = map[driver.OverrideKind]string{driver.Exempt: "e", driver.Block: "b", driver.Limit: "l"}

// formatOverride writes o's stored value around its created time: the
// part before it and the part after (overrides.lua joins them with the
// server's clock).
func formatOverride(o driver.Override) (head, tail string) {
	counted := "0"
	if o.Counted {
		counted = "1"
	}
	var until int64
	if !o.Until.IsZero() {
		until = o.Until.UnixMicro()
	}
	names := make([]string, 0, len(o.Limits))
	for name := range o.Limits {
		names = append(names, name)
	}
	slices.Sort(names)
	lims := make([]string, len(names))
	for i, name := range names {
		lims[i] = name + "=" + strconv.FormatInt(o.Limits[name], 10)
	}
	head = overrideKinds[o.Kind] + "|" + counted + "|" + strconv.FormatInt(until, 10) + "|"
	tail = "|" + strings.Join(lims, ",") + "|" + strconv.Itoa(len(o.By)) + "|" + o.By + o.Reason
	return head, tail
}

// parseOverride decodes the stored value v of override id.
func parseOverride(id int64, v string) (driver.Override, error) {
	f := strings.SplitN(v, "|", 7)
	if len(f) != 7 {
		return driver.Override{}, fmt.Errorf("override %d: want 7 fields", id)
	}
	o := driver.Override{ID: id, Counted: f[1] == "1"}
	for k, code := range overrideKinds {
		if code == f[0] {
			o.Kind = k
		}
	}
	if o.Kind == 0 {
		return driver.Override{}, fmt.Errorf("override %d: unknown kind %q", id, f[0])
	}
	var nums [2]int64
	for i, s := range f[2:4] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return driver.Override{}, fmt.Errorf("override %d: field %d: %q is not an integer", id, i+2, s)
		}
		nums[i] = n
	}
	if nums[0] > 0 {
		o.Until = time.UnixMicro(nums[0])
	}
	o.Created = time.UnixMicro(nums[1])
	if f[4] != "" {
		o.Limits = map[string]int64{}
		for _, p := range strings.Split(f[4], ",") {
			name, lv, ok := strings.Cut(p, "=")
			n, err := strconv.ParseInt(lv, 10, 64)
			if !ok || err != nil {
				return driver.Override{}, fmt.Errorf("override %d: bad limit %q", id, p)
			}
			o.Limits[name] = n
		}
	}
	byLen, err := strconv.Atoi(f[5])
	if err != nil || byLen < 0 || byLen > len(f[6]) {
		return driver.Override{}, fmt.Errorf("override %d: bad length of By", id)
	}
	o.By, o.Reason = f[6][:byLen], f[6][byLen:]
	return o, nil
}

// parseOverrideElement decodes the override element of take.lua's reply
// (first element with lua.ReplyOverride): "<ID>|<every rule's reported limit,
// comma-separated>|<the override's stored value>". It returns the
// override and the limits, one per rule of n.
func parseOverrideElement(s string, n int) (driver.Override, []int64, error) {
	ids, rest, ok1 := strings.Cut(s, "|")
	ls, v, ok2 := strings.Cut(rest, "|")
	id, err := strconv.ParseInt(ids, 10, 64)
	if !ok1 || !ok2 || err != nil {
		return driver.Override{}, nil, fmt.Errorf("reply: override element: bad shape")
	}
	o, err := parseOverride(id, v)
	if err != nil {
		return driver.Override{}, nil, fmt.Errorf("reply: %w", err)
	}
	var lims []int64
	if n > 0 {
		parts := strings.Split(ls, ",")
		if len(parts) != n {
			return driver.Override{}, nil, fmt.Errorf("reply: override element: want %d limits, got %d", n, len(parts))
		}
		lims = make([]int64, n)
		for i, p := range parts {
			if lims[i], err = strconv.ParseInt(p, 10, 64); err != nil {
				return driver.Override{}, nil, fmt.Errorf("reply: override element: limit %q is not an integer", p)
			}
		}
	}
	return o, lims, nil
}

// overrideCounter returns the key whose INCR numbers the overrides set
// under key: key's part before its hash tag (the sdk's prefix) then
// ":!override-id", one counter per prefix ("!" sorts the key beside no
// subject's: the sdk escapes nothing into a bare "!").
func overrideCounter(key string) string {
	if i := strings.Index(key, ":{"); i >= 0 {
		return key[:i] + ":!override-id"
	}
	return key + ":!override-id"
}

// Idempotency records (driver.Request.IdempotencyKey): one format, declared
// in internal/lua/tokens.go (lua.RecordMark and the header after it), which
// take.lua and bare mode (record.encode) both write and both read. A
// record holds the reply as the decision returned it: recordMark, the
// first element (lua.ReplyAllowed or 0, plus lua.ReplyOverride when an override applied), now
// µs, the rules' bytes' length, the rules' bytes (perRuleBytes each),
// the override element when first has lua.ReplyOverride (its length, then its bytes),
// the quiet span's end µs when first has lua.ReplyQuiet (lua.ReplyInt bytes),
// the keeps element when first has lua.ReplyKeep (its length, then its bytes),
// then the reservation id (to the end; empty for a take or a denial). A
// replay returns it in parseTake's shape: {first plus lua.ReplyReplayed, now, the rules'
// bytes, [override element], [quiet end], [keeps], reservation id} (record.replay).
//
// Legacy, read only: the one-key-per-rule layout, and bare mode before it
// wrote this format, stored "<reservation id>|<the reply's integers,
// comma-separated>" (no override). Records live at most their
// IdempotencyTTL, so these go with the upgrade; take.lua and
// decodeLegacyRecord still read them, nothing writes them.
const (
	recordMark   = lua.RecordMark
	recordHeader = lua.RecordHeader
	recordLen    = lua.RecordLen
)

// record is an idempotency record's content.
type record struct {
	first    int64  // the reply's first element: lua.ReplyAllowed or 0, plus lua.ReplyOverride with an override
	now      int64  // µs
	rules    string // the rules' bytes, perRuleBytes each (appendRule)
	override string // the override element (first has lua.ReplyOverride)
	quiet    int64  // the quiet span's end µs (first has lua.ReplyQuiet)
	keeps    string // the keeps element (first has lua.ReplyKeep)
	hold     string // the reservation id; "" for a take or a denial
}

// encode writes r as take.lua does.
func (r record) encode() (string, error) {
	const maxLen = 1<<(8*recordLen) - 1
	if err := r.check(); err != nil {
		return "", err
	}
	if len(r.rules) > maxLen || len(r.override) > maxLen {
		return "", fmt.Errorf("idempotency record: %d bytes of rules or %d of override element, want <= %d", len(r.rules), len(r.override), maxLen)
	}
	b := make([]byte, 0, recordHeader+len(r.rules)+recordLen+len(r.override)+lua.ReplyInt+len(r.hold))
	b = append(b, recordMark, byte(r.first))
	b = appendLE(b, r.now, lua.ReplyInt)
	b = appendLE(b, int64(len(r.rules)), recordLen)
	b = append(b, r.rules...)
	if r.overridden() {
		b = appendLE(b, int64(len(r.override)), recordLen)
		b = append(b, r.override...)
	}
	if r.first&lua.ReplyQuiet != 0 {
		b = appendLE(b, r.quiet, lua.ReplyInt)
	}
	if r.first&lua.ReplyKeep != 0 {
		b = appendLE(b, int64(len(r.keeps)), recordLen)
		b = append(b, r.keeps...)
	}
	return string(append(b, r.hold...)), nil
}

// check reports a first element a decision does not return (lua.ReplyAllowed or 0,
// plus lua.ReplyOverride with an override) or an override element without it.
func (r record) check() error {
	if !decided(r.first) || r.overridden() != (r.override != "") {
		return fmt.Errorf("idempotency record: first element %d with %d bytes of override element", r.first, len(r.override))
	}
	return nil
}

// overridden reports whether an override applied (lua.ReplyOverride).
func (r record) overridden() bool { return r.first&lua.ReplyOverride != 0 }

// decided reports whether first is a decision's first element (not a
// replay's): lua.ReplyAllowed or 0, plus lua.ReplyOverride with an
// override, or lua.ReplyQuiet for a denial in quiet hours.
func decided(first int64) bool {
	if first&lua.ReplyQuiet != 0 && first&lua.ReplyAllowed != 0 {
		return false
	}
	return first >= 0 && first&^(lua.ReplyAllowed|lua.ReplyOverride|lua.ReplyQuiet|lua.ReplyKeep) == 0
}

// decodeRecord reads an idempotency record, either format.
func decodeRecord(s string) (record, error) {
	if len(s) == 0 || s[0] != recordMark {
		return decodeLegacyRecord(s)
	}
	if len(s) < recordHeader {
		return record{}, fmt.Errorf("idempotency record: %d bytes, want at least %d", len(s), recordHeader)
	}
	r := record{first: int64(s[1]), now: le7(s[2:])}
	if !decided(r.first) {
		return record{}, fmt.Errorf("idempotency record: first element %d", r.first)
	}
	p := recordHeader
	n := int(leUint(s[p-recordLen : p]))
	if p+n > len(s) {
		return record{}, fmt.Errorf("idempotency record: %d bytes of rules past its end", n)
	}
	r.rules, p = s[p:p+n], p+n
	if r.overridden() {
		if p+recordLen > len(s) {
			return record{}, fmt.Errorf("idempotency record: no override element's length")
		}
		n, p = int(leUint(s[p:p+recordLen])), p+recordLen
		if p+n > len(s) {
			return record{}, fmt.Errorf("idempotency record: %d bytes of override element past its end", n)
		}
		r.override, p = s[p:p+n], p+n
	}
	if r.first&lua.ReplyQuiet != 0 {
		if p+lua.ReplyInt > len(s) {
			return record{}, fmt.Errorf("idempotency record: no quiet span's end")
		}
		r.quiet, p = le7(s[p:]), p+lua.ReplyInt
	}
	if r.first&lua.ReplyKeep != 0 {
		if p+recordLen > len(s) {
			return record{}, fmt.Errorf("idempotency record: no keeps element's length")
		}
		n, p = int(leUint(s[p:p+recordLen])), p+recordLen
		if p+n > len(s) {
			return record{}, fmt.Errorf("idempotency record: %d bytes of keeps element past its end", n)
		}
		r.keeps, p = s[p:p+n], p+n
	}
	r.hold = s[p:]
	return r, nil
}

// decodeLegacyRecord reads a record in the legacy text format (read only:
// see above): "<reservation id>|<first>,<now>,<4 integers per rule>".
func decodeLegacyRecord(s string) (record, error) {
	hid, body, ok := strings.Cut(s, "|")
	if !ok {
		return record{}, fmt.Errorf("idempotency record: neither format")
	}
	f := strings.Split(body, ",")
	if len(f) < 2 || (len(f)-2)%perRuleReply != 0 {
		return record{}, fmt.Errorf("idempotency record: %d integers, want 2 then %d per rule", len(f), perRuleReply)
	}
	ints := make([]int64, len(f))
	for k, x := range f {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return record{}, fmt.Errorf("idempotency record: %q is not an integer", x)
		}
		ints[k] = n
	}
	b := make([]byte, 0, (len(f)-2)/perRuleReply*perRuleBytes)
	for k := 2; k < len(ints); k += perRuleReply {
		b = appendRule(b, [perRuleReply]int64(ints[k:k+perRuleReply]))
	}
	r := record{first: ints[0], now: ints[1], rules: string(b), hold: hid}
	if err := r.check(); err != nil {
		return record{}, err
	}
	return r, nil
}

// replay returns r as take.lua replays it, parseTake's shape: {first plus lua.ReplyReplayed,
// now, the rules' bytes, [override element], reservation id}.
func (r record) replay() []any {
	v := []any{r.first | lua.ReplyReplayed, r.now, r.rules}
	if r.overridden() {
		v = append(v, r.override)
	}
	if r.first&lua.ReplyQuiet != 0 {
		v = append(v, r.quiet)
	}
	if r.first&lua.ReplyKeep != 0 {
		v = append(v, r.keeps)
	}
	return append(v, r.hold)
}

// Reservations (driver.Request.ReservationKey, a hash): field = id, value
// = "<lapse µs>" then one "\n<entry>" per rule, "<code> <key> …"
// (lua/holds.lua lists the entries).

// reservationKeys returns the distinct keys a reservation's entries name
// (a nested set's vkey, then its root's key too).
func reservationKeys(plan string) []string {
	var keys []string
	lines := strings.Split(plan, "\n")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		if !slices.Contains(keys, f[1]) {
			keys = append(keys, f[1])
		}
		if root, set := vkey(f[1]); set != "" && !slices.Contains(keys, root) {
			keys = append(keys, root, wideKey(root)) // a nested set's vkey: its root is written (its wide hash if wide)
		}
	}
	return keys
}

// The packed value (lua/prelude.lua): packedFormat, then entries of a
// 13-byte header (a 4-byte tag, the payload's length as 3 bytes and the
// entry's expiry in Unix ms as 6, little-endian) and a payload of 7-byte
// little-endian numbers; or, for a tag whose first byte is >= 0x80, a
// nested set's section (nests): the last 4 bytes of its id, then its
// value's entries.
const (
	packedFormat = 1
	packedHeader = lua.PackedHeader
	packedInt    = lua.PackedInt
	// markTag is the tag of the hold marker entry.
	markTag = "\x00\x00\x00\x00"
)

// packedEntry is one entry of a packed value: its tag, expiry (Unix ms)
// and payload numbers. Fixed window: {count}; GCRA: {TAT µs}; sliding
// window: {newest stored cell's index, the stored cells' sum, then their
// counts, oldest first}; hold marker: none. A section's Tag is the
// nested set's id (sectionID), its Section the set's entries.
type packedEntry struct {
	Tag     string
	Expiry  int64
	Ints    []int64
	Section []packedEntry
}

// decodePacked decodes a packed value, entries in stored order. Tests and
// tools read state with it; the scripts have their own codec.
func decodePacked(v string) ([]packedEntry, error) {
	if len(v) == 0 || v[0] != packedFormat {
		return nil, fmt.Errorf("packed value: want format byte %d", packedFormat)
	}
	var out []packedEntry
	for p := 1; p < len(v); {
		if p+packedHeader > len(v) {
			return nil, fmt.Errorf("packed value: truncated header at %d", p)
		}
		const lenAt, expAt = lua.PackedTag, lua.PackedTag + lua.PackedLen
		e := packedEntry{Tag: v[p : p+lenAt], Expiry: leUint(v[p+expAt : p+packedHeader])}
		n := int(leUint(v[p+lenAt : p+expAt]))
		p += packedHeader
		if e.Tag[0] >= 0x80 && p+n <= len(v) && n >= 4 {
			sec, err := decodePacked(string(rune(packedFormat)) + v[p+4:p+n])
			if err != nil {
				return nil, fmt.Errorf("packed value: section at %d: %w", p, err)
			}
			e.Tag, e.Section = e.Tag+v[p:p+4], sec
			out = append(out, e)
			p += n
			continue
		}
		if p+n > len(v) || n%packedInt != 0 {
			return nil, fmt.Errorf("packed value: bad payload of %d bytes at %d", n, p)
		}
		for q := p; q < p+n; q += packedInt {
			e.Ints = append(e.Ints, leUint(v[q:q+packedInt]))
		}
		out = append(out, e)
		p += n
	}
	return out, nil
}

// leUint reads an unsigned little-endian integer of len(b) <= 8 bytes
// (struct's 'I<n>').
func leUint(b string) int64 {
	var n int64
	for i := len(b) - 1; i >= 0; i-- {
		n = n<<8 | int64(b[i])
	}
	return n
}

// appendLE appends v's low size bytes, little-endian (struct's 'I<size>',
// or 'i<size>' for a v that fits).
func appendLE(b []byte, v int64, size int) []byte {
	for i := range size {
		b = append(b, byte(v>>(8*i)))
	}
	return b
}
