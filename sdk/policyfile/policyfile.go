// Package policyfile is the YAML format of freqcap policies, the format
// of freqcap's --policies file: Load and LoadFile read a file into
// *sdk.Policy values, checked, with errors that give the line and key at
// fault. Parse reads a file keeping what builds each policy again with
// other epochs and identity changes (Policy.Rebuild), as the versioned
// policy store (sdk/policystore) does with every version it keeps.
package policyfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/freqcap/freqcap/internal/duration"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Load reads policies from YAML:
//
//	policies:
//	  - name: push
//	    failure: open          # open | closed (default closed)
//	    trail: {max: 100, ttl: 24h}
//	    rules:
//	      - {name: recv-1m, algorithm: sliding_window, limit: 15, window: 1m, by: [user]}
//	      - {name: content-59s, algorithm: sliding_window, limit: 2, window: 59s, by: [user, content]}
//	  - name: api
//	    rules:
//	      - {name: burst, algorithm: gcra, limit: 30, window: 60s, burst: 14, by: [user]}
//	      - {name: daily, algorithm: fixed_window, calendar: day, timezone: Asia/Shanghai, limit: 3, by: [user, campaign]}
//	      - {name: daily-40, algorithm: fixed_window, calendar: day, timezone: Asia/Shanghai, limit: 2, by: [user, campaign], shadow: true}
//	  - name: newsletter
//	    rules:
//	      - {name: weekly, algorithm: fixed_window, calendar: week, timezone: UTC, limit: 10, by: [user]}
//	      - {name: monthly, algorithm: fixed_window, calendar: month, timezone: UTC, limit: 30, by: [user]}
//	  - name: vip
//	    overrides: true        # read per-person overrides (sdk.WithOverrides)
//	    rules:
//	      - {name: hourly, algorithm: sliding_log, limit: 20, window: 1h, by: [user]}
//	  - name: messages
//	    person: user           # attempts' identities count for their person (sdk.WithPerson)
//	    quiet_hours: {zone: Europe/Berlin, periods: [{from: "21:00", to: "08:00", days: [mon, tue, wed, thu, fri]}]}
//	    classes:
//	      - {name: otp, exempt: all, counted: true, quiet_hours: true}
//	      - {name: security, exempt: all}
//	      - {name: alert, quiet_hours: true}
//	      - {name: receipt, exempt: [recv-24h]}
//	    rules:
//	      - {name: recv-24h, algorithm: sliding_window, limit: 50, window: 24h, by: [user], headroom: [{priority: 1, keep: 10}]}
//
// Algorithms are fixed_window, sliding_window, sliding_log and gcra.
// Durations are Go durations (90s, 1h30m) plus a leading day count (1d,
// 2d12h). Rule keys: name, algorithm, limit, window, by, sub_windows
// (sliding_window cells), burst (gcra), calendar (day | hour | week |
// month, with timezone, an IANA zone name: the rule's own zone, which an
// attempt's zone replaces, sdk.Attempt.Zone; week is the ISO week from
// Monday 00:00, month from the 1st 00:00; window may be left out, or be
// the unit's nominal length: 24h, 1h, 7d, 31d), shadow (true: a trial rule, evaluated and
// recorded but never denying; see sdk.Rule.Shadow), headroom (tiers
// {priority, keep} from the lowest priority up: attempts below priority
// may not use the rule's last keep units, sdk.Rule.WithHeadroom). Policy
// keys: name, failure, trail, hot_deny_cache, overrides (true: the
// policy's decisions read per-person overrides, sdk.WithOverrides), wide
// (a list of dimensions whose sets a person has many values of,
// sdk.WithWide), person (the person dimension, a shard dimension,
// sdk.WithPerson), quiet_hours (zone, an IANA zone name, the default of
// attempts that carry none; periods, each from and to, "HH:MM" local
// times, to before from running past midnight, and days, the weekdays
// (mon … sun) a period starts on, every day when left out;
// sdk.WithQuietHours), classes (each a name, exempt: all or a list of
// rule names, counted: true to count the exempt attempts, quiet_hours:
// true to pass quiet hours; sdk.WithClass), rules. Numbers (limit, burst,
// sub_windows, headroom priority and keep, hot_deny_cache, trail max) are
// integers: 1.5 or 2.0 are errors, as are limits and bursts beyond
// [driver.MaxLimit] and priorities beyond [sdk.MaxPriority]. Settings
// (person, quiet_hours, classes, headroom included) are no part of a
// rule's identity: changing them keeps every count. Unknown keys are errors. Every
// error wraps [sdk.ErrInvalidPolicy] or [sdk.ErrInvalidRule] and gives the
// line.
func Load(r io.Reader) ([]*sdk.Policy, error) {
	return load(r, "policies")
}

// LoadFile reads policies from the YAML file at path (see [Load]).
func LoadFile(path string) ([]*sdk.Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policyfile: load: %w", err)
	}
	defer f.Close()
	return load(f, path)
}

type filePolicies struct {
	Policies []filePolicy `yaml:"policies"`
}

type filePolicy struct {
	Name    string     `yaml:"name"`
	Failure string     `yaml:"failure"`
	Trail   *fileTrail `yaml:"trail"`
	// HotDeny is the size of the per-process hot-deny cache (0: none).
	HotDeny int `yaml:"hot_deny_cache"`
	// Overrides is sdk.WithOverrides.
	Overrides bool `yaml:"overrides"`
	// Wide lists the dimensions whose sets are declared wide (sdk.WithWide).
	Wide []string `yaml:"wide"`
	// Person is sdk.WithPerson; QuietHours sdk.WithQuietHours; Classes
	// sdk.WithClass.
	Person     string      `yaml:"person"`
	QuietHours *fileQuiet  `yaml:"quiet_hours"`
	Classes    []fileClass `yaml:"classes"`
	Rules      []fileRule  `yaml:"rules"`
	line       int
	personLine int
}

// fileQuiet is a policy's quiet_hours (sdk.WithQuietHours).
type fileQuiet struct {
	Zone    string            `yaml:"zone"`
	Periods []fileQuietPeriod `yaml:"periods"`
	line    int
}

// fileQuietPeriod is one quiet period (sdk.QuietPeriod).
type fileQuietPeriod struct {
	From fileClock     `yaml:"from"`
	To   fileClock     `yaml:"to"`
	Days []fileWeekday `yaml:"days"`
}

// fileClass is one of a policy's classes (sdk.Class).
type fileClass struct {
	Name       string     `yaml:"name"`
	Exempt     fileExempt `yaml:"exempt"`
	Counted    bool       `yaml:"counted"`
	QuietHours bool       `yaml:"quiet_hours"`
	line       int
}

// fileHeadroom is one of a rule's headroom tiers (sdk.Headroom).
type fileHeadroom struct {
	Priority int   `yaml:"priority"`
	Keep     int64 `yaml:"keep"`
}

type fileTrail struct {
	Max *int          `yaml:"max"`
	TTL *fileDuration `yaml:"ttl"`
}

type fileRule struct {
	Name       string         `yaml:"name"`
	Algorithm  string         `yaml:"algorithm"`
	Limit      int64          `yaml:"limit"`
	Window     fileDuration   `yaml:"window"`
	By         []string       `yaml:"by"`
	SubWindows int            `yaml:"sub_windows"`
	Burst      int64          `yaml:"burst"`
	Calendar   string         `yaml:"calendar"`
	Timezone   string         `yaml:"timezone"`
	Shadow     bool           `yaml:"shadow"`
	Headroom   []fileHeadroom `yaml:"headroom"`
	line       int
}

// fileDuration is a Go duration with an optional leading day count.
type fileDuration time.Duration

func (d *fileDuration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: %w: want a duration such as 90s or 1d", n.Line, sdk.ErrInvalidPolicy)
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w: %v", n.Line, sdk.ErrInvalidPolicy, err)
	}
	*d = fileDuration(v)
	return nil
}

// parseDuration parses a Go duration with an optional leading "<n>d".
func parseDuration(s string) (time.Duration, error) { return duration.Parse(s) }

var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

var unknownFieldRE = regexp.MustCompile(`^line (\d+): field (.+) not found in type \S+$`)

func load(r io.Reader, source string) ([]*sdk.Policy, error) {
	if r == nil {
		return nil, fmt.Errorf("policyfile: %s: %w: nil reader", source, sdk.ErrInvalidPolicy)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("policyfile: %s: %w", source, err)
	}
	ps, err := Parse(data, source)
	if err != nil {
		return nil, err
	}
	out := make([]*sdk.Policy, len(ps))
	for i, p := range ps {
		out[i] = p.Policy
	}
	return out, nil
}

// A Policy is one policy of a policy file, as Parse reads it: the
// *sdk.Policy Load returns, and what builds it again with other epochs
// and identity changes (Rebuild).
type Policy struct {
	*sdk.Policy
	// opts are the policy's options as the file gives them; overrides
	// is its overrides key.
	opts      []sdk.PolicyOption
	overrides bool
}

// Rebuild returns the policy with rules in place of its own (its rules
// with other epochs, say) and opts after the file's (sdk.WithChange).
func (p Policy) Rebuild(rules []sdk.Rule, opts ...sdk.PolicyOption) (*sdk.Policy, error) {
	all := append(slices.Clone(p.opts), opts...)
	np, err := sdk.NewPolicy(p.Name(), rules, all...)
	if err != nil {
		return nil, fmt.Errorf("policyfile: build policy %q: %w", p.Name(), err)
	}
	return np, nil
}

// SettingChanges lists, in the file's words, the policy settings that
// differ from from to p ("failure closed → open", "hot_deny_cache 0 →
// 100", "person none → user", "quiet_hours none → {zone: …}", "class otp
// added: {…}"); none when they are the same. A rule's headroom is the
// rule's (Headroom writes it).
func (p Policy) SettingChanges(from Policy) []string {
	var out []string
	if of, nf := from.FailOpen(), p.FailOpen(); of != nf {
		out = append(out, fmt.Sprintf("failure %s → %s", failure(of), failure(nf)))
	}
	om, ot := from.Trail()
	nm, nt := p.Trail()
	if om != nm || ot != nt {
		out = append(out, fmt.Sprintf("trail {max: %d, ttl: %v} → {max: %d, ttl: %v}", om, ot, nm, nt))
	}
	if oh, nh := from.HotDenyCache(), p.HotDenyCache(); oh != nh {
		out = append(out, fmt.Sprintf("hot_deny_cache %d → %d", oh, nh))
	}
	if from.overrides != p.overrides {
		out = append(out, fmt.Sprintf("overrides %v → %v", from.overrides, p.overrides))
	}
	if ow, nw := from.Wide(), p.Wide(); !slices.Equal(ow, nw) {
		out = append(out, fmt.Sprintf("wide %v → %v", ow, nw))
	}
	return append(out, p.messagingChanges(from)...)
}

func failure(open bool) string {
	if open {
		return "open"
	}
	return "closed"
}

// Parse checks the policy file data as Load does (errors name it source
// and give the line and key at fault) and returns its policies in file
// order.
func Parse(data []byte, source string) ([]Policy, error) {
	fail := func(line int, err error) ([]Policy, error) {
		if line > 0 {
			return nil, fmt.Errorf("policyfile: %s: line %d: %w", source, line, err)
		}
		return nil, fmt.Errorf("policyfile: %s: %w", source, err)
	}
	// The node tree first: decoding would load limit: 1.5 as 1, and
	// report an overflowing number without its key.
	var root yaml.Node
	treeOK := yaml.Unmarshal(data, &root) == nil
	if treeOK {
		if line, err := checkIntegers(&root); err != nil {
			return fail(line, err)
		}
	}
	var doc filePolicies
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return fail(0, fmt.Errorf("%w: no policies", sdk.ErrInvalidPolicy))
		}
		var te *yaml.TypeError
		if errors.As(err, &te) {
			msgs := make([]string, len(te.Errors))
			for i, m := range te.Errors {
				if sm := unknownFieldRE.FindStringSubmatch(m); sm != nil {
					m = fmt.Sprintf("line %s: unknown key %q", sm[1], sm[2])
				}
				msgs[i] = m
			}
			if len(msgs) == 1 {
				if sm := lineRE.FindStringSubmatch(msgs[0]); sm != nil {
					line, _ := strconv.Atoi(sm[1])
					return fail(line, fmt.Errorf("%w: %s", sdk.ErrInvalidPolicy, sm[2]))
				}
			}
			return fail(0, fmt.Errorf("%w: %s", sdk.ErrInvalidPolicy, strings.Join(msgs, "; ")))
		}
		if errors.Is(err, sdk.ErrInvalidPolicy) {
			return fail(0, err)
		}
		return fail(0, fmt.Errorf("%w: %v", sdk.ErrInvalidPolicy, err))
	}
	// The line of each policy and rule, from the node tree.
	if treeOK {
		setLines(&root, &doc)
	}
	if len(doc.Policies) == 0 {
		return fail(0, fmt.Errorf("%w: no policies", sdk.ErrInvalidPolicy))
	}
	out := make([]Policy, 0, len(doc.Policies))
	seen := make(map[string]bool, len(doc.Policies))
	for _, fp := range doc.Policies {
		p, opts, line, err := fp.build()
		if err != nil {
			return fail(line, err)
		}
		if seen[p.Name()] {
			return fail(fp.line, fmt.Errorf("policy %q: %w: duplicate policy name", p.Name(), sdk.ErrInvalidPolicy))
		}
		seen[p.Name()] = true
		out = append(out, Policy{Policy: p, opts: opts, overrides: fp.Overrides})
	}
	return out, nil
}

// build turns fp into a Policy and the options it was built with; on
// error it returns the line at fault.
func (fp filePolicy) build() (*sdk.Policy, []sdk.PolicyOption, int, error) {
	var opts []sdk.PolicyOption
	switch fp.Failure {
	case "", "closed":
	case "open":
		opts = append(opts, sdk.WithFailOpen())
	default:
		return nil, nil, fp.line, fmt.Errorf("policy %q: %w: failure must be open or closed, got %q", fp.Name, sdk.ErrInvalidPolicy, fp.Failure)
	}
	if fp.Trail != nil {
		tmax, ttl := sdk.DefaultTrailMax, sdk.DefaultTrailTTL
		if fp.Trail.Max != nil {
			tmax = *fp.Trail.Max
		}
		if fp.Trail.TTL != nil {
			ttl = time.Duration(*fp.Trail.TTL)
		}
		opts = append(opts, sdk.WithTrail(tmax, ttl))
	}
	if fp.HotDeny != 0 {
		opts = append(opts, sdk.WithHotDenyCache(fp.HotDeny))
	}
	if fp.Overrides {
		opts = append(opts, sdk.WithOverrides())
	}
	if len(fp.Wide) > 0 {
		opts = append(opts, sdk.WithWide(fp.Wide...))
	}
	quiet, late, line, err := fp.messagingOpts()
	if err != nil {
		return nil, nil, line, err
	}
	if quiet != nil {
		opts = append(opts, quiet)
	}
	rules := make([]sdk.Rule, len(fp.Rules))
	for i, fr := range fp.Rules {
		r, err := fr.rule()
		if err != nil {
			return nil, nil, fr.line, fmt.Errorf("policy %q: %w", fp.Name, err)
		}
		rules[i] = r
	}
	all := slices.Clone(opts)
	for _, lo := range late {
		all = append(all, lo.opt)
	}
	p, err := sdk.NewPolicy(fp.Name, rules, all...)
	if err != nil {
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // without NewPolicy's "sdk: ": the line goes before it
		}
		return nil, nil, faultLine(fp, rules, opts, late), err
	}
	return p, all, 0, nil
}

// faultLine is the line of what made NewPolicy refuse fp: a rule that
// fails on its own or repeats an earlier rule's name, else the key of the
// first of the late options (person, classes: they name the rules'
// dimensions and names) that fails, else the policy.
func faultLine(fp filePolicy, rules []sdk.Rule, opts []sdk.PolicyOption, late []lineOpt) int {
	if _, err := sdk.NewPolicy(fp.Name, rules, opts...); err == nil {
		for i, lo := range late {
			all := slices.Clone(opts)
			for _, l := range late[:i+1] {
				all = append(all, l.opt)
			}
			if _, err := sdk.NewPolicy(fp.Name, rules, all...); err != nil {
				return lo.line
			}
		}
		return fp.line
	}
	if _, err := sdk.NewPolicy(fp.Name, []sdk.Rule{sdk.FixedWindow("x", 1, time.Second).By("x")}, opts...); err != nil {
		return fp.line // the name or an option
	}
	seen := make(map[string]bool, len(rules))
	for i, r := range rules {
		if _, err := sdk.NewPolicy(fp.Name, []sdk.Rule{r}, opts...); err != nil || seen[r.Name] {
			return fp.Rules[i].line
		}
		seen[r.Name] = true
	}
	return fp.line
}

// rule converts the text fields of fr; NewPolicy checks the rest.
func (fr fileRule) rule() (sdk.Rule, error) {
	bad := func(format string, args ...any) (sdk.Rule, error) {
		return sdk.Rule{}, fmt.Errorf("rule %q: %w: "+format, append([]any{fr.Name, sdk.ErrInvalidRule}, args...)...)
	}
	r := sdk.Rule{
		Name:       fr.Name,
		Limit:      fr.Limit,
		Window:     time.Duration(fr.Window),
		Dimensions: fr.By,
		SubWindows: fr.SubWindows,
		Burst:      fr.Burst,
		Shadow:     fr.Shadow,
	}
	switch fr.Algorithm {
	case "fixed_window":
		r.Algorithm = driver.FixedWindow
	case "sliding_window":
		r.Algorithm = driver.SlidingWindow
	case "sliding_log":
		r.Algorithm = driver.SlidingLog
	case "gcra":
		r.Algorithm = driver.GCRA
	case "":
		return bad("algorithm missing (fixed_window, sliding_window, sliding_log or gcra)")
	default:
		return bad("unknown algorithm %q (want fixed_window, sliding_window, sliding_log or gcra)", fr.Algorithm)
	}
	if fr.Calendar != "" {
		u, ok := driver.ParseCalendarUnit(fr.Calendar)
		if !ok {
			return bad("calendar must be day, hour, week or month, got %q", fr.Calendar)
		}
		r.Calendar = u
	}
	if fr.Timezone != "" {
		if r.Calendar == driver.NoCalendar {
			return bad("timezone is only for calendar rules")
		}
		loc, err := time.LoadLocation(fr.Timezone)
		if err != nil {
			return bad("timezone %q: %v", fr.Timezone, err)
		}
		r.Location = loc
	}
	return fr.headroom(r), nil // a calendar rule without timezone fails its check (Rule.check)
}

// An intKey is a key of the policy file whose value is an integer, at
// most max (maxName names max in errors, "" for the int range).
type intKey struct {
	name    string
	max     int64
	maxName string
}

var (
	ruleInts     = []intKey{{"limit", driver.MaxLimit, "MaxLimit"}, {"burst", driver.MaxLimit - 1, "MaxLimit-1"}, {"sub_windows", math.MaxInt, ""}}
	headroomInts = []intKey{{"priority", sdk.MaxPriority, "MaxPriority"}, {"keep", driver.MaxLimit - 1, "MaxLimit-1"}}
	policyInts   = []intKey{{"hot_deny_cache", math.MaxInt, ""}}
	trailInts    = []intKey{{"max", math.MaxInt, ""}}
)

// checkIntegers checks the integer keys of every policy, trail and rule
// in the node tree root: a number written as an integer, at most its
// key's max. It returns the line at fault. Values that are not numbers
// are left to the decoder.
func checkIntegers(root *yaml.Node) (int, error) {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	pols := mapValue(n, "policies")
	if pols == nil || pols.Kind != yaml.SequenceNode {
		return 0, nil
	}
	for _, pn := range pols.Content {
		pname := scalarValue(mapValue(pn, "name"))
		bad := func(line int, format string, args ...any) (int, error) {
			return line, fmt.Errorf("policy %q: %w: "+format, append([]any{pname, sdk.ErrInvalidPolicy}, args...)...)
		}
		if line, msg := checkInts(pn, policyInts); msg != "" {
			return bad(line, "%s", msg)
		}
		if line, msg := checkInts(mapValue(pn, "trail"), trailInts); msg != "" {
			return bad(line, "trail %s", msg)
		}
		rules := mapValue(pn, "rules")
		if rules == nil || rules.Kind != yaml.SequenceNode {
			continue
		}
		for _, rn := range rules.Content {
			if line, msg := checkInts(rn, ruleInts); msg != "" {
				return line, fmt.Errorf("policy %q: rule %q: %w: %s", pname, scalarValue(mapValue(rn, "name")), sdk.ErrInvalidRule, msg)
			}
			if hs := mapValue(rn, "headroom"); hs != nil && hs.Kind == yaml.SequenceNode {
				for _, hn := range hs.Content {
					if line, msg := checkInts(hn, headroomInts); msg != "" {
						return line, fmt.Errorf("policy %q: rule %q: %w: headroom %s", pname, scalarValue(mapValue(rn, "name")), sdk.ErrInvalidRule, msg)
					}
				}
			}
		}
	}
	return 0, nil
}

// checkInts checks keys in mapping node n; it returns the line and the
// fault of the first bad value.
func checkInts(n *yaml.Node, keys []intKey) (int, string) {
	for _, k := range keys {
		v := mapValue(n, k.name)
		if v == nil {
			continue
		}
		line := v.Line // an alias's own line, not its anchor's
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if v == nil || v.Kind != yaml.ScalarNode {
			continue
		}
		if msg := checkInt(v, k); msg != "" {
			return line, msg
		}
	}
	return 0, ""
}

var digitsRE = regexp.MustCompile(`^[-+]?[0-9][0-9_]*$`)

// checkInt returns what is wrong with the number v of key k, or "".
func checkInt(v *yaml.Node, k intKey) string {
	tooBig := func() string {
		if strings.HasPrefix(v.Value, "-") {
			return fmt.Sprintf("%s is out of range, got %s", k.name, v.Value)
		}
		if k.maxName == "" {
			return fmt.Sprintf("%s must be <= %d, got %s", k.name, k.max, v.Value)
		}
		return fmt.Sprintf("%s must be <= %d (%s), got %s", k.name, k.max, k.maxName, v.Value)
	}
	switch v.ShortTag() {
	case "!!int":
		var i int64
		if err := v.Decode(&i); err != nil || i > k.max {
			return tooBig() // err: beyond the int64 range (an uint64)
		}
	case "!!float":
		var f float64
		if err := v.Decode(&f); err != nil {
			return fmt.Sprintf("%s must be an integer, got %s", k.name, v.Value)
		}
		switch {
		case digitsRE.MatchString(v.Value) || math.Abs(f) > float64(k.max):
			return tooBig() // digits too many for an int64 resolve as a float
		case f != math.Trunc(f):
			return fmt.Sprintf("%s must be an integer, got %s", k.name, v.Value)
		default:
			return fmt.Sprintf("%s must be written as an integer, got %s", k.name, v.Value)
		}
	}
	return ""
}

// scalarValue is n's value if n is a scalar, else "".
func scalarValue(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// setLines records the line of every policy and rule of doc from the node
// tree of the same document.
func setLines(root *yaml.Node, doc *filePolicies) {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	pols := mapValue(n, "policies")
	if pols == nil || pols.Kind != yaml.SequenceNode {
		return
	}
	for i, pn := range pols.Content {
		if i >= len(doc.Policies) {
			return
		}
		doc.Policies[i].line = pn.Line
		if v := mapValue(pn, "person"); v != nil {
			doc.Policies[i].personLine = v.Line
		}
		if q := mapValue(pn, "quiet_hours"); q != nil && doc.Policies[i].QuietHours != nil {
			doc.Policies[i].QuietHours.line = q.Line
		}
		if cs := mapValue(pn, "classes"); cs != nil && cs.Kind == yaml.SequenceNode {
			for j, cn := range cs.Content {
				if j < len(doc.Policies[i].Classes) {
					doc.Policies[i].Classes[j].line = cn.Line
				}
			}
		}
		rules := mapValue(pn, "rules")
		if rules == nil || rules.Kind != yaml.SequenceNode {
			continue
		}
		for j, rn := range rules.Content {
			if j < len(doc.Policies[i].Rules) {
				doc.Policies[i].Rules[j].line = rn.Line
			}
		}
	}
}

// mapValue returns the value of key in mapping node n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
