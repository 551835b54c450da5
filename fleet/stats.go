package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/driver/stats"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

// Stats is a policy's recorded traffic over a window, summed over every
// process whose Recorder flushes to the same storage (Reader.Stats).
type Stats struct {
	Policy string
	// From and To bound the window: the buckets starting at or after
	// From, up to the one holding To.
	From, To time.Time
	// Step is the bucket width: StatsStep for windows up to
	// StatsFineRetention, StatsCoarseStep beyond.
	Step time.Duration
	// Allowed and Denied count the policy's decisions.
	Allowed, Denied int64
	// Series holds the decisions per bucket, oldest first, one point per
	// bucket of the window (zeros included).
	Series []StatsPoint
	// Rules holds each rule's verdicts, in the order of the policy passed
	// to Stats, then rules only the stored statistics name (by name).
	Rules []RuleStats
	// TopDenied are the most denied subjects (their shard values) over the
	// window's coarse buckets, most denied first (at most StatsTopKeep).
	TopDenied []DeniedSubject
	// Overrides counts the decisions per-person overrides decided or
	// changed (sdk.Decision.Override), by kind.
	Overrides OverrideCounts
	// QuietDenied counts the decisions denied for quiet hours
	// (sdk.WithQuietHours: sdk.Decision.Quiet set, not allowed).
	QuietDenied int64
	// Classes counts, per message class (sdk.WithClass), the decisions
	// its exemptions decided, in the order of the policy passed to Stats,
	// then classes only the stored statistics name (by name); a class
	// none of whose decisions an exemption decided is left out.
	Classes []ClassStats
}

// ClassStats is what a message class's exemptions decided (sdk.Class):
// Exempted counts its decisions that some rule would have denied, had the
// class not been exempt from it (sdk.Decision.Exempted; allowed unless
// another rule or quiet hours denied them); QuietPassed its decisions
// made in quiet hours, which the class passes (allowed).
type ClassStats struct {
	Class                 string
	Exempted, QuietPassed int64
}

// OverrideCounts counts decisions by the kind of the override that
// decided them (Exempt: admitted, Block: denied) or changed one of their
// rules' limits (Limit).
type OverrideCounts struct {
	Exempt, Block, Limit int64
}

// RuleStats is one rule's verdicts: Allowed and Denied count the decisions
// this rule admitted and refused (a decision denied by another rule
// counts as allowed here; a rule's former self, enforced beside it after
// a change, denies as the rule; under an exempt override every rule
// admits); NearLimit counts the allowed decisions
// that left the rule at most Options.NearLimit of its limit. A shadow
// rule (sdk.Rule.Shadow) never denies: the decisions it would have denied
// count in ShadowDenied, not Denied, and ShadowAllowed counts those of
// them that were allowed. Exempted counts the decisions the rule would
// have denied but whose message class is exempt from it (sdk.WithClass;
// counted in Allowed: the rule did not deny them; a class never exempts
// a shadow rule); Headroom those of its denials (in Denied) due only to
// the units it keeps for higher priorities (sdk.Rule.WithHeadroom).
type RuleStats struct {
	Rule                        string
	Allowed, Denied, NearLimit  int64
	ShadowDenied, ShadowAllowed int64
	Exempted, Headroom          int64
	Series                      []StatsPoint
}

// StatsPoint is one bucket's counts.
type StatsPoint struct {
	At                         time.Time // the bucket's start
	Allowed, Denied, NearLimit int64
	// ShadowDenied counts what shadow rules would have denied: a policy's
	// point sums its rules'.
	ShadowDenied int64
}

// DeniedSubject is a subject's denials: its shard values (in the order of
// the policy's ShardBy), and how many of its decisions were denied
// (counted by each process's top-K: a lower bound, see
// Options.TopK).
type DeniedSubject struct {
	Shard []string
	Count int64
}

// Subject returns the subject the shard values name under p (nil when p's
// ShardBy has another length).
func (d DeniedSubject) Subject(p *sdk.Policy) sdk.Subject {
	dims := p.ShardBy()
	if len(dims) != len(d.Shard) {
		return nil
	}
	s := make(sdk.Subject, len(dims))
	for i, dim := range dims {
		s[dim] = d.Shard[i]
	}
	return s
}

// ErrMalformedStats: the backend holds statistics or announcements that
// no Recorder wrote (a value that is not a number, a field that is not an
// announcement). Reader.Announced returns the announcements it could read
// with a *MalformedError wrapping it; Reader.Stats returns only the error.
var ErrMalformedStats = errors.New("malformed statistics")

// Reader reads what the Recorders of one prefix flushed to one storage.
// It is safe for concurrent use.
type Reader struct {
	st      stats.Counters
	prefix  string
	now     func() time.Time
	timeout time.Duration
	keep    int // Options.SampleKeep
}

// NewReader returns a Reader of b, which must implement stats.Counters
// (else the error wraps errors.ErrUnsupported). Of opts (nil means
// defaults) it reads Prefix, Now, Timeout and SampleKeep (give the
// Recorders' own).
func NewReader(b driver.Backend, opts *Options) (*Reader, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	st, now, err := open(b, &o, "reader")
	if err != nil {
		return nil, err
	}
	keep := o.SampleKeep
	if keep <= 0 {
		keep = DefaultSampleKeep
	}
	return &Reader{st: st, prefix: keyname.Prefix(o.Prefix, keyname.DefaultPrefix), now: now, timeout: max(o.Timeout, 0), keep: keep}, nil
}

// withTimeout bounds ctx by the Reader's timeout, if any.
func (rd *Reader) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if rd.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, rd.timeout)
}

// Stats reads the statistics Recorders flushed for policy p (by name)
// over the window ending now (the Reader's clock): up to
// StatsFineRetention in StatsStep buckets, longer windows (at most
// StatsCoarseRetention) in StatsCoarseStep buckets.
//
// Keys read: "<prefix>:stats:{<policy>:10s:<unix>}" or
// "<prefix>:stats:{<policy>:1m:<unix>}" per bucket (hashes), and
// "<prefix>:stats:{<policy>:1m:<unix>}:top" per minute (sorted sets).
func (rd *Reader) Stats(ctx context.Context, p *sdk.Policy, window time.Duration) (Stats, error) {
	return rd.stats(ctx, "stats", p, window)
}

// stats is Stats, its errors naming op.
func (rd *Reader) stats(ctx context.Context, op string, p *sdk.Policy, window time.Duration) (Stats, error) {
	st := rd.st
	if p.Name() == "" {
		return Stats{}, fmt.Errorf("fleet: %s: %w: nil or empty policy (build it with NewPolicy)", op, sdk.ErrInvalidPolicy)
	}
	policy := p.Name()
	if window <= 0 || window > StatsCoarseRetention {
		return Stats{}, fmt.Errorf("fleet: %s: window must be in (0, %v], got %v", op, StatsCoarseRetention, window)
	}
	step, kind := StatsStep, "10s"
	if window > StatsFineRetention {
		step, kind = StatsCoarseStep, "1m"
	}
	now := rd.now()
	n := int((window + step - 1) / step)
	last := now.Truncate(step)
	first := last.Add(-time.Duration(n-1) * step)
	out := Stats{Policy: policy, From: first, To: now, Step: step, Series: make([]StatsPoint, n)}
	var q stats.Query
	for i := range n {
		at := first.Add(time.Duration(i) * step)
		out.Series[i].At = at
		q.Hashes = append(q.Hashes, statsKey(rd.prefix, policy, kind, at))
	}
	for at := first.Truncate(StatsCoarseStep); !at.After(last); at = at.Add(StatsCoarseStep) {
		q.Tops = append(q.Tops, statsKey(rd.prefix, policy, "1m", at)+":top")
	}
	q.TopN = StatsTopKeep
	ctx, cancel := rd.withTimeout(ctx)
	defer cancel()
	data, err := st.ReadStats(ctx, q)
	if err != nil {
		return Stats{}, fmt.Errorf("fleet: %s: %w", op, err)
	}
	if len(data.Hashes) != len(q.Hashes) || len(data.Tops) != len(q.Tops) {
		return Stats{}, fmt.Errorf("fleet: %s: backend answered %d hashes and %d sorted sets, want %d and %d", op, len(data.Hashes), len(data.Tops), len(q.Hashes), len(q.Tops))
	}
	if m := data.Malformed; len(m) > 0 {
		return Stats{}, fmt.Errorf("fleet: %s: %w: %d fields are not numbers, the first %q of %q", op, ErrMalformedStats, len(m), m[0].Field, m[0].Key)
	}
	rules := map[string]*RuleStats{}
	var order []string
	for _, r := range p.Rules() {
		order = append(order, r.Name)
	}
	rule := func(name string) *RuleStats {
		rs := rules[name]
		if rs == nil {
			rs = &RuleStats{Rule: name, Series: make([]StatsPoint, n)}
			for i := range rs.Series {
				rs.Series[i].At = out.Series[i].At
			}
			rules[name] = rs
		}
		return rs
	}
	for _, name := range order {
		rule(name)
	}
	classes := map[string]*ClassStats{}
	class := func(name string) *ClassStats {
		cs := classes[name]
		if cs == nil {
			cs = &ClassStats{Class: name}
			classes[name] = cs
		}
		return cs
	}
	var extra []string
	for i, fields := range data.Hashes {
		for _, f := range fields {
			kindOf, name, perRule := strings.Cut(f.Name, ":")
			if !perRule {
				switch kindOf {
				case fieldAllowed:
					out.Allowed += f.Value
					out.Series[i].Allowed += f.Value
				case fieldDenied:
					out.Denied += f.Value
					out.Series[i].Denied += f.Value
				case overrideFields[0]:
					out.Overrides.Exempt += f.Value
				case overrideFields[1]:
					out.Overrides.Block += f.Value
				case overrideFields[2]:
					out.Overrides.Limit += f.Value
				case fieldQuiet:
					out.QuietDenied += f.Value
				}
				continue
			}
			if kindOf == fieldClassExempted || kindOf == fieldClassQuiet {
				cs := class(name)
				if kindOf == fieldClassExempted {
					cs.Exempted += f.Value
				} else {
					cs.QuietPassed += f.Value
				}
				continue
			}
			if _, seen := rules[name]; !seen {
				extra = append(extra, name)
			}
			rs := rule(name)
			switch kindOf {
			case fieldAllowed:
				rs.Allowed += f.Value
				rs.Series[i].Allowed += f.Value
			case fieldDenied:
				rs.Denied += f.Value
				rs.Series[i].Denied += f.Value
			case fieldNear:
				rs.NearLimit += f.Value
				rs.Series[i].NearLimit += f.Value
				out.Series[i].NearLimit += f.Value
			case fieldShadow:
				rs.ShadowDenied += f.Value
				rs.Series[i].ShadowDenied += f.Value
				out.Series[i].ShadowDenied += f.Value
			case fieldShadowAllowed:
				rs.ShadowAllowed += f.Value
			case fieldExempted:
				rs.Exempted += f.Value
			case fieldHeadroom:
				rs.Headroom += f.Value
			}
		}
	}
	slices.Sort(extra)
	for _, name := range append(order, extra...) {
		out.Rules = append(out.Rules, *rules[name])
	}
	var classOrder []string
	for _, c := range p.Classes() {
		classOrder = append(classOrder, c.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(classes)) {
		if !slices.Contains(classOrder, name) {
			classOrder = append(classOrder, name)
		}
	}
	for _, name := range classOrder {
		if cs := classes[name]; cs != nil {
			out.Classes = append(out.Classes, *cs)
		}
	}
	top := map[string]int64{}
	for _, members := range data.Tops {
		for _, m := range members {
			top[m.Name] += m.Value
		}
	}
	for m, c := range top {
		out.TopDenied = append(out.TopDenied, DeniedSubject{Shard: shardValues(m), Count: c})
	}
	slices.SortFunc(out.TopDenied, func(a, b DeniedSubject) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return slices.Compare(a.Shard, b.Shard)
	})
	if len(out.TopDenied) > StatsTopKeep {
		out.TopDenied = out.TopDenied[:StatsTopKeep]
	}
	return out, nil
}

// shardValues splits a hash tag's escaped shard values and unescapes
// them (the inverse of sdk's escape of subject values).
func shardValues(tag string) []string {
	parts := strings.Split(tag, ":")
	for i, p := range parts {
		parts[i] = keyname.Unescape(p)
	}
	return parts
}

// Announcement is a policy as a process running it announced it (through
// its Recorder): what decides which keys it uses and how it counts.
type Announcement struct {
	Policy  string          `json:"policy"`
	ShardBy []string        `json:"shard_by"`
	Rules   []AnnouncedRule `json:"rules"`
	// Version is the policy-store version the announcing process runs
	// (Recorder.SetPolicyVersion); 0 when it runs no store's version (or
	// announced before versions were announced).
	Version int64 `json:"version,omitempty"`
	// Service names the announcing process (Options.Service); empty when
	// it gave none (processes running the same policies then share one
	// announcement).
	Service string `json:"service,omitempty"`
	// Person, QuietHours and Classes are the policy's messaging settings
	// (sdk.WithPerson, WithQuietHours, WithClass), which decide attempts
	// beside its rules, in the policy file's words (policyfile.QuietHours,
	// policyfile.Class); empty when it has none.
	Person     string   `json:"person,omitempty"`
	QuietHours string   `json:"quiet_hours,omitempty"`
	Classes    []string `json:"classes,omitempty"`
	// LastSeen is when a process last announced it (its Recorder's clock).
	LastSeen time.Time `json:"-"`
}

// AnnouncedRule is one rule of an Announcement. ID is the rule's identity
// id (the rule's own storage key holds it): a different ID means the rule
// counts in other state, from scratch.
type AnnouncedRule struct {
	Name      string `json:"name"`
	ID        string `json:"id"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Burst     int64  `json:"burst,omitempty"`
	Window    string `json:"window"`
	// Shadow: a shadow rule (sdk.Rule.Shadow), evaluated but never
	// denying.
	Shadow bool `json:"shadow,omitempty"`
	// Headroom is the rule's headroom tiers (sdk.Rule.WithHeadroom) in
	// the policy file's words (policyfile.Headroom); empty when none.
	Headroom string `json:"headroom,omitempty"`
}

// AnnouncementOf returns the announcement of p, as a Recorder makes it.
func AnnouncementOf(p *sdk.Policy) Announcement {
	a := Announcement{Policy: p.Name(), ShardBy: p.ShardBy()}
	if p == nil {
		return a
	}
	ids := p.RuleIDs()
	for i, r := range p.Rules() {
		ar := AnnouncedRule{Name: r.Name, ID: ids[i], Algorithm: r.Algorithm.String(),
			Limit: r.Limit, Burst: r.Burst, Window: r.Window.String(), Shadow: r.Shadow}
		if len(r.Headroom) > 0 {
			ar.Headroom = policyfile.Headroom(r.Headroom)
		}
		a.Rules = append(a.Rules, ar)
	}
	a.Person = p.Person()
	if loc, qs := p.QuietHours(); loc != nil {
		a.QuietHours = policyfile.QuietHours(loc, qs)
	}
	for _, c := range p.Classes() {
		a.Classes = append(a.Classes, policyfile.Class(c))
	}
	return a
}

// field is a as stored: a hash field (JSON; the fields added since the
// first format are omitted when zero, so a policy announced without them
// is stored as before).
func (a Announcement) field() string {
	b, _ := json.Marshal(a) // plain strings and numbers: never fails
	return string(b)
}

// Diff lists how a ("here") differs from b ("there"), one phrase per
// difference, rules compared by name; nil when both run the same rules
// on the same keys with the same limits and headroom, shadow or enforced
// alike, and the same messaging settings. Versions are not compared (see
// Version).
func (a Announcement) Diff(b Announcement) []string {
	var out []string
	if !slices.Equal(a.ShardBy, b.ShardBy) {
		out = append(out, fmt.Sprintf("sharded by %v here, by %v there", a.ShardBy, b.ShardBy))
	}
	if a.Person != b.Person {
		out = append(out, fmt.Sprintf("person %s here, %s there", orNone(a.Person), orNone(b.Person)))
	}
	if a.QuietHours != b.QuietHours {
		out = append(out, fmt.Sprintf("quiet hours %s here, %s there", orNone(a.QuietHours), orNone(b.QuietHours)))
	}
	if !slices.Equal(a.Classes, b.Classes) {
		out = append(out, fmt.Sprintf("classes [%s] here, [%s] there", strings.Join(a.Classes, ", "), strings.Join(b.Classes, ", ")))
	}
	theirs := map[string]AnnouncedRule{}
	for _, r := range b.Rules {
		theirs[r.Name] = r
	}
	mine := map[string]bool{}
	for _, r := range a.Rules {
		mine[r.Name] = true
		o, ok := theirs[r.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("rule %s is only here", r.Name))
		case r.ID != o.ID:
			out = append(out, fmt.Sprintf("rule %s has other keys: id %s (%s, %s) here, id %s (%s, %s) there", r.Name, r.ID, r.Algorithm, r.Window, o.ID, o.Algorithm, o.Window))
		case r.Limit != o.Limit || r.Burst != o.Burst:
			out = append(out, fmt.Sprintf("rule %s has limit %d (burst %d) here, %d (burst %d) there", r.Name, r.Limit, r.Burst, o.Limit, o.Burst))
		}
		if ok && r.Headroom != o.Headroom {
			out = append(out, fmt.Sprintf("rule %s has headroom %s here, %s there", r.Name, orNone(r.Headroom), orNone(o.Headroom)))
		}
		if ok && r.Shadow != o.Shadow {
			out = append(out, fmt.Sprintf("rule %s is %s here, %s there", r.Name, enforcement(r.Shadow), enforcement(o.Shadow)))
		}
	}
	for _, r := range b.Rules {
		if !mine[r.Name] {
			out = append(out, fmt.Sprintf("rule %s is only there", r.Name))
		}
	}
	return out
}

// Announced returns the policies announced by Recorders flushing to this
// Reader's storage (same prefix) within the last within (at most 24 h;
// announcements are renewed every minute, so a process gone for within is
// left out), by policy name, newest first for the same name. Every
// distinct version of a policy still run is listed. Keys read: "<prefix>:stats:{policies}:<unix
// day>", one hash per UTC day of announcements (JSON) to their last time
// (Unix ms), each kept 2 days.
//
// A field no Recorder wrote (its value not a time, its name not an
// announcement, or a policy or rule name NewPolicy refuses) is skipped:
// Announced then returns every other announcement together with a
// *MalformedError (wrapping ErrMalformedStats) that counts the fields
// skipped and names their keys (not their contents).
func (rd *Reader) Announced(ctx context.Context, within time.Duration) ([]Announcement, error) {
	st := rd.st
	ctx, cancel := rd.withTimeout(ctx)
	defer cancel()
	if within <= 0 || within > 24*time.Hour {
		return nil, fmt.Errorf("fleet: announced: within must be in (0, 24h], got %v", within)
	}
	now := rd.now()
	since := now.Add(-within)
	var q stats.Query
	for day := since.UTC().Truncate(24 * time.Hour); !day.After(now); day = day.Add(24 * time.Hour) {
		q.Hashes = append(q.Hashes, announceKey(rd.prefix, day))
	}
	data, err := st.ReadStats(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("fleet: announced: %w", err)
	}
	if len(data.Hashes) != len(q.Hashes) {
		return nil, fmt.Errorf("fleet: announced: backend answered %d hashes, want %d", len(data.Hashes), len(q.Hashes))
	}
	latest := map[string]time.Time{} // announcement -> last seen, over the days read
	keyOf := map[string]string{}     // announcement -> a key holding it
	badKeys := map[string]bool{}     // keys holding malformed fields
	bad := map[[2]string]bool{}      // the malformed fields, by key and name
	for i, fields := range data.Hashes {
		for _, f := range fields {
			if t := time.UnixMilli(f.Value); t.After(latest[f.Name]) {
				latest[f.Name] = t
				keyOf[f.Name] = q.Hashes[i]
			}
		}
	}
	for _, m := range data.Malformed {
		bad[[2]string{m.Key, m.Field}], badKeys[m.Key] = true, true
	}
	var out []Announcement
	for field, seen := range latest {
		a, ok := parseAnnouncement(field)
		if !ok {
			bad[[2]string{keyOf[field], field}], badKeys[keyOf[field]] = true, true
			continue
		}
		if seen.Before(since) {
			continue
		}
		a.LastSeen = seen
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Announcement) int {
		if c := strings.Compare(a.Policy, b.Policy); c != 0 {
			return c
		}
		return b.LastSeen.Compare(a.LastSeen)
	})
	if len(bad) > 0 {
		return out, &MalformedError{Op: "announced", Fields: len(bad), Keys: slices.Sorted(maps.Keys(badKeys))}
	}
	return out, nil
}

// MalformedError is the error Announced returns, with the announcements
// it could read, when it skipped fields no Recorder wrote. It wraps
// ErrMalformedStats. Keys name where the fields are; their contents,
// written by something else, are left out.
type MalformedError struct {
	Op     string   // the operation: "announced"
	Fields int      // how many fields were skipped
	Keys   []string // the keys holding them, sorted
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("fleet: %s: %v: %d fields skipped, in %s", e.Op, ErrMalformedStats, e.Fields, strings.Join(e.Keys, ", "))
}

// Unwrap returns ErrMalformedStats.
func (e *MalformedError) Unwrap() error { return ErrMalformedStats }

// parseAnnouncement decodes an announcement field as a Recorder writes it
// (announcement): JSON naming a valid policy and valid rules (as
// sdk.NewPolicy checks names).
func parseAnnouncement(field string) (Announcement, bool) {
	var a Announcement
	if json.Unmarshal([]byte(field), &a) != nil || !validName(a.Policy) || (a.Service != "" && !validService(a.Service)) {
		return Announcement{}, false
	}
	for _, d := range a.ShardBy {
		if !validName(d) {
			return Announcement{}, false
		}
	}
	for _, r := range a.Rules {
		if !validName(r.Name) || !validName(r.ID) || !validName(r.Algorithm) || !validName(r.Window) || !validText(r.Headroom) {
			return Announcement{}, false
		}
	}
	if (a.Person != "" && !validName(a.Person)) || !validText(a.QuietHours) {
		return Announcement{}, false
	}
	for _, c := range a.Classes {
		if c == "" || !validText(c) {
			return Announcement{}, false
		}
	}
	return a, true
}

// validText reports whether s may be an announcement's text in the
// policy file's words (quiet hours, a class, headroom): printable ASCII
// (spaces included), as names and zone names are.
func validText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// orNone is s, or "none" when empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// MaxServiceLen bounds Options.Service, in bytes.
const MaxServiceLen = 128

// validService reports whether s may name a service: 1 to MaxServiceLen
// printable ASCII bytes other than space.
func validService(s string) bool {
	if len(s) == 0 || len(s) > MaxServiceLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// validName reports whether s is a name sdk.NewPolicy accepts.
func validName(s string) bool { return keyname.Valid(s, keyname.MaxName) }

// enforcement names a rule's mode in Diff's phrases.
func enforcement(shadow bool) string {
	if shadow {
		return "shadow"
	}
	return "enforced"
}
