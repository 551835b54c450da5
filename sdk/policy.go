package sdk

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/freqcap/freqcap/internal/alg"
	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Trail defaults: the number of denials kept per subject and policy, and
// how long the trail lives after the last denial.
const (
	DefaultTrailMax = 100
	DefaultTrailTTL = 24 * time.Hour
)

// Policy is a named set of rules checked together: a request is allowed
// only if every enforced rule admits it (shadow rules never deny; a
// per-person override may decide instead, WithOverrides), and a denied
// request consumes nothing.
//
// Build one with NewPolicy or load them with package sdk/policyfile. A Policy is
// validated and immutable, and safe for concurrent use; the zero Policy
// has no rules and is rejected by the Limiter. Most callers create their
// policies once at start-up and pass them to Limiter.Allow.
type Policy struct {
	name   string
	rules  []Rule
	ids    []string   // rule identity ids, per rule
	groups []string   // per rule: "=" and its non-shard dimensions, sorted (driver.Rule.Group)
	sorted [][]string // per rule: its non-shard dimensions, sorted
	// firstOfGroup is, per rule, the index of the first rule with the
	// same dimensions.
	firstOfGroup []int
	others       [][]string    // per rule: its dimensions not in shardBy, in rule order
	keyCap       *atomic.Int64 // resolve's buffer size: the most bytes a request's keys have taken (nil in the zero Policy, which valid refuses first)
	failOpen     bool
	trailMax     int
	trailTTL     time.Duration
	dims         []string
	shardBy      []string
	hotDeny      int           // hot-deny cache size; 0: none
	idemTTL      time.Duration // how long idempotency records live: the longest window
	// changes holds, per rule, its recorded identity changes, newest
	// first (nil: none; WithChange); hasChanges reports whether any rule
	// has one, so that a policy without changes pays nothing per decision.
	changes    [][]change
	hasChanges bool
	overrides  bool // WithOverrides
	// wide is WithWide's dimensions, sorted; wideRule, per rule, whether
	// its dimension set is declared wide (driver.Rule.Wide).
	wide     []string
	wideRule []bool
	// Messaging caps: the quiet hours (WithQuietHours), the classes
	// (WithClass), and each rule's headroom tiers by rule name
	// (Rule.WithHeadroom; nil when no rule has any).
	quietSrc  []QuietPeriod
	quiet     []alg.Quiet
	quietLoc  *time.Location
	quietMemo *quietMemo // the last minute's quiet spans per zone (nil: no quiet hours, or the zero Policy)
	classes   []Class
	headrooms map[string][]Headroom
	person    string // WithPerson
}

// change is a Change checked and resolved for key building.
type change struct {
	Change
	id     string        // ruleID(From)
	others []string      // From's dimensions not in shardBy, in From's order
	end    time.Time     // At + From's reach: From is enforced before end
	reach  time.Duration // From's reach (driver.Rule.Reach)
}

// PolicyOption configures a Policy in NewPolicy.
type PolicyOption func(*policyOptions) error

type policyOptions struct {
	failOpen bool
	trailMax int
	trailTTL time.Duration
	hotDeny  int
	// changes are the recorded identity changes per rule name, newest
	// first (WithChange); overrides is WithOverrides.
	changes   map[string][]Change
	overrides bool
	wide      []string // WithWide
	// WithQuietHours: the periods, as given and for the arithmetic, and
	// their zone; WithClass: the classes.
	quietSrc []QuietPeriod
	quiet    []alg.Quiet
	quietLoc *time.Location
	classes  []Class
	person   string // WithPerson
}

// WithFailOpen makes the Limiter answer "allowed" (Decision.Degraded set)
// when the backend fails, instead of returning the error. Use it where a
// missed cap is cheaper than a missed request.
func WithFailOpen() PolicyOption {
	return func(o *policyOptions) error {
		o.failOpen = true
		return nil
	}
}

// WithTrail sets how many denials are kept per subject (newest first) and
// for how long after the last one. max 0 disables the trail. The default
// is DefaultTrailMax entries for DefaultTrailTTL.
func WithTrail(max int, ttl time.Duration) PolicyOption {
	return func(o *policyOptions) error {
		if max < 0 {
			return fmt.Errorf("%w: trail max must be >= 0, got %d", ErrInvalidPolicy, max)
		}
		if max > 0 && ttl < time.Millisecond {
			return fmt.Errorf("%w: trail ttl must be >= 1ms, got %v", ErrInvalidPolicy, ttl)
		}
		o.trailMax, o.trailTTL = max, ttl
		return nil
	}
}

// WithHotDenyCache makes every Limiter keep, per process, up to size recent
// denials of this policy and answer a repeated request for a denied
// subject locally, without a backend call, until the denial's RetryAfter
// has passed (Decision.Cached). A cached denial answers requests of at
// least the cost denied. It can over-deny when units are given back
// elsewhere (a Reset or Cancel in another process, a lapsed reservation)
// before RetryAfter; a Cancel through the same Limiter, or a Reset or an
// override through its Admin, evicts it. size must be > 0.
func WithHotDenyCache(size int) PolicyOption {
	return func(o *policyOptions) error {
		if size <= 0 {
			return fmt.Errorf("%w: hot-deny cache size must be > 0, got %d", ErrInvalidPolicy, size)
		}
		o.hotDeny = size
		return nil
	}
}

// Change says that a rule's identity (algorithm, window, sub-windows,
// calendar, zone), or the meaning of its state (a GCRA rate, a sliding
// window's or sliding log's limit across LogLine: SameState), changed at At, in policy-store version Version: From is
// the rule as it was (its own Epoch included). sdk/policystore derives
// changes from a store's versions; code may give them too.
//
// While From's state can still prove anything (until At plus From's
// reach, driver.Rule.Reach: its window, an hour more for a calendar
// window, a cell more for a sliding window, its tolerance for GCRA), every
// decision also evaluates From, under its own keys and enforced (a shadow
// rule when the rule or From is one; reported with RuleDecision.Before =
// Version), and the changed rule, while it has no state of its own,
// starts from the units From counts, placed at the decision's time. With
// several changes in reach, each From starts likewise from the next older
// one's, and the rule from the newest's (see WithChange). So a person
// capped before the change stays capped as long as the old or the new
// rule would cap them, and the change admits no one past the new limit.
// From must have the rule's dimensions (a re-keyed rule cannot carry:
// NewPolicy refuses such a change).
type Change struct {
	From    Rule
	At      time.Time
	Version int64
}

// WithChange records the changes of the rule named rule (in any order;
// the policy keeps them newest first): every change whose reach has not
// passed is enforced, its From evaluated just before the rule, oldest
// first; each seeds from the next older one in reach, and the newest in
// reach seeds the rule (see Change). NewPolicy checks each change: the
// rule exists, From is a valid rule with the rule's dimensions whose
// state the rule does not keep (SameState: a change of limit, burst or
// shadow alone keeps the counts and is no Change; a GCRA rate change is
// one) and another identity (RuleIDs: a GCRA rate change under the same
// Epoch would share From's keys), At is set and Version is at least 1 (it marks From in
// decisions: RuleDecision.Before); errors wrap ErrInvalidPolicy or
// ErrInvalidRule.
func WithChange(rule string, changes ...Change) PolicyOption {
	return func(o *policyOptions) error {
		if o.changes == nil {
			o.changes = map[string][]Change{}
		}
		o.changes[rule] = append(o.changes[rule], changes...)
		return nil
	}
}

// WithOverrides makes the policy's decisions read the subject's
// per-person overrides (Admin.SetOverride), in the same atomic step:
// one more key read per decision. Without it overrides are neither read
// nor settable for the policy.
func WithOverrides() PolicyOption {
	return func(o *policyOptions) error {
		o.overrides = true
		return nil
	}
}

// WithWide declares wide the dimension sets whose rules are keyed by any
// of dims beyond the shard key (ShardBy): sets a person has many values
// of (campaigns, contents, devices). A backend with storage layouts keeps
// such a set out of the person's one root value from its first value,
// where touching one value costs the same however many are live (the
// Redis backend: a hash beside the root, one field per value, docs/DESIGN.md
// "Wide subjects"); without the declaration it moves them there once
// the root grows past a measured size. Decisions and counts are the same
// either way, and changing the declaration carries every count. Each dim
// must be a dimension of a rule of the policy and not a shard dimension;
// NewPolicy refuses others (ErrInvalidPolicy).
func WithWide(dims ...string) PolicyOption {
	return func(o *policyOptions) error {
		if len(dims) == 0 {
			return fmt.Errorf("%w: WithWide needs at least one dimension", ErrInvalidPolicy)
		}
		o.wide = append(o.wide, dims...)
		return nil
	}
}

// NewPolicy checks rules and returns a policy named name (a
// [A-Za-z0-9_.-]{1,64} name; it appears in storage keys). Errors wrap
// ErrInvalidRule or ErrInvalidPolicy and name the rule and field.
//
// The rules must share at least one dimension (ShardBy): its values form
// the Redis hash tag, so that one decision touches one cluster slot.
func NewPolicy(name string, rules []Rule, opts ...PolicyOption) (*Policy, error) {
	p, _, err := newPolicy(name, rules, opts...)
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	return p, nil
}

// newPolicy is NewPolicy without the "sdk: " prefix on errors; it also
// returns the index of the rule at fault (-1: the policy itself).
func newPolicy(name string, rules []Rule, opts ...PolicyOption) (*Policy, int, error) {
	bad := func(format string, args ...any) (*Policy, int, error) {
		return nil, -1, fmt.Errorf("policy %q: %w: "+format, append([]any{name, ErrInvalidPolicy}, args...)...)
	}
	if !validName(name) {
		return bad("name must match [A-Za-z0-9_.-]{1,%d}", keyname.MaxName)
	}
	if len(rules) == 0 {
		return bad("no rules")
	}
	o := policyOptions{trailMax: DefaultTrailMax, trailTTL: DefaultTrailTTL}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, -1, fmt.Errorf("policy %q: %w", name, err)
		}
	}
	p := &Policy{
		name:      name,
		rules:     make([]Rule, len(rules)),
		ids:       make([]string, len(rules)),
		others:    make([][]string, len(rules)),
		failOpen:  o.failOpen,
		trailMax:  o.trailMax,
		trailTTL:  o.trailTTL,
		hotDeny:   o.hotDeny,
		overrides: o.overrides,
		quietSrc:  o.quietSrc,
		quiet:     o.quiet,
		quietLoc:  o.quietLoc,
		quietMemo: quietMemoFor(o.quiet),
	}
	if i, err := p.addRules(rules); err != nil {
		return nil, i, fmt.Errorf("policy %q: %w", name, err)
	}
	p.shardBy = sharedDimensions(p.rules)
	if len(p.shardBy) == 0 {
		return bad("rules share no dimension (every rule must name at least one common dimension, the shard key)")
	}
	p.groupRules()
	if err := p.addWide(o.wide); err != nil {
		return nil, -1, fmt.Errorf("policy %q: %w", name, err)
	}
	if o.person != "" && !slices.Contains(p.shardBy, o.person) {
		return bad("person dimension %q must be a shard dimension (one every rule is keyed by: %v)", o.person, p.shardBy)
	}
	p.person = o.person
	if err := p.addClasses(o.classes); err != nil {
		return nil, -1, fmt.Errorf("policy %q: %w", name, err)
	}
	p.addHeadrooms()
	if i, err := p.addChanges(o.changes); err != nil {
		return nil, i, fmt.Errorf("policy %q: %w", name, err)
	}
	p.keyCap = new(atomic.Int64)
	return p, -1, nil
}

// addHeadrooms indexes the headroom tiers of p's rules by rule name
// (p.headrooms; nil when no rule keeps any).
func (p *Policy) addHeadrooms() {
	for _, r := range p.rules {
		if len(r.Headroom) > 0 {
			if p.headrooms == nil {
				p.headrooms = make(map[string][]Headroom)
			}
			p.headrooms[r.Name] = r.Headroom
		}
	}
}

// addRules normalizes rules into p (rules, ids, idemTTL, dims). It
// returns the index of the rule at fault.
func (p *Policy) addRules(rules []Rule) (int, error) {
	seen := make(map[string]bool, len(rules))
	for i, r := range rules {
		nr, err := r.normalize()
		if err != nil {
			return i, err
		}
		if seen[nr.Name] {
			return i, fmt.Errorf("rule %q: %w: duplicate rule name", nr.Name, ErrInvalidPolicy)
		}
		seen[nr.Name] = true
		p.rules[i] = nr
		p.ids[i] = ruleID(nr)
		p.idemTTL = max(p.idemTTL, nr.Window)
		for _, d := range nr.Dimensions {
			if !slices.Contains(p.dims, d) {
				p.dims = append(p.dims, d)
			}
		}
	}
	return -1, nil
}

// addWide checks WithWide's dims against p's rules and marks the rules
// they declare wide (p.wide, p.wideRule).
func (p *Policy) addWide(dims []string) error {
	if len(dims) == 0 {
		return nil
	}
	p.wideRule = make([]bool, len(p.rules))
	for _, d := range dims {
		if slices.Contains(p.shardBy, d) {
			return fmt.Errorf("%w: wide dimension %q is a shard dimension (every rule's: its values are the person, not a set of values)", ErrInvalidPolicy, d)
		}
		if !slices.Contains(p.dims, d) {
			return fmt.Errorf("%w: wide dimension %q is not a dimension of any rule", ErrInvalidPolicy, d)
		}
		if !slices.Contains(p.wide, d) {
			p.wide = append(p.wide, d)
		}
		for i := range p.rules {
			if slices.Contains(p.others[i], d) {
				p.wideRule[i] = true
			}
		}
	}
	slices.Sort(p.wide)
	return nil
}

// Wide returns the dimensions WithWide declared, sorted (nil: none).
func (p *Policy) Wide() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.wide)
}

// sharedDimensions are the dimensions every rule names (the shard key),
// in the first rule's order.
func sharedDimensions(rules []Rule) []string {
	var shared []string
	for _, d := range rules[0].Dimensions {
		if !slices.ContainsFunc(rules[1:], func(r Rule) bool { return !slices.Contains(r.Dimensions, d) }) {
			shared = append(shared, d)
		}
	}
	return shared
}

// groupRules sets, per rule of p, its dimensions beyond the shard key
// (others, and sorted), its dimension set's group suffix (groups) and
// the first rule of that set (firstOfGroup).
func (p *Policy) groupRules() {
	p.groups = make([]string, len(p.rules))
	p.sorted = make([][]string, len(p.rules))
	p.firstOfGroup = make([]int, len(p.rules))
	for i, r := range p.rules {
		for _, d := range r.Dimensions {
			if !slices.Contains(p.shardBy, d) {
				p.others[i] = append(p.others[i], d)
			}
		}
		p.sorted[i] = slices.Sorted(slices.Values(p.others[i]))
		p.groups[i] = "=" + strings.Join(p.sorted[i], ",")
		p.firstOfGroup[i] = slices.Index(p.groups, p.groups[i])
	}
}

// addChanges checks the changes given with WithChange and records them
// per rule, newest first. It returns the index of the rule at fault (-1:
// a rule p lacks).
func (p *Policy) addChanges(byRule map[string][]Change) (int, error) {
	names := slices.Sorted(maps.Keys(byRule)) // a deterministic first error
	for _, name := range names {
		i := slices.IndexFunc(p.rules, func(r Rule) bool { return r.Name == name })
		if i < 0 {
			return -1, fmt.Errorf("%w: change of rule %q: the policy has no such rule", ErrInvalidPolicy, name)
		}
		if len(byRule[name]) == 0 {
			continue // WithChange(rule) without changes: nothing to record
		}
		for _, c := range byRule[name] {
			ch, err := p.newChange(i, c)
			if err != nil {
				return i, err
			}
			if p.changes == nil {
				p.changes = make([][]change, len(p.rules))
			}
			p.changes[i] = append(p.changes[i], ch)
		}
		slices.SortStableFunc(p.changes[i], func(a, b change) int {
			if c := b.At.Compare(a.At); c != 0 {
				return c
			}
			return cmp.Compare(b.Version, a.Version)
		})
		p.hasChanges = p.hasChanges || len(p.changes[i]) > 0
	}
	return -1, nil
}

// newChange checks c, a change of rule i, and returns it as recorded.
func (p *Policy) newChange(i int, c Change) (change, error) {
	r := p.rules[i]
	name := r.Name
	from := c.From
	from.Name = r.Name // a change keeps the name: a renamed rule is another rule
	nf, err := from.normalize()
	if err != nil {
		return change{}, fmt.Errorf("change of rule %q (version %d): from: %w", name, c.Version, err)
	}
	if !slices.Equal(slices.Sorted(slices.Values(nf.Dimensions)), slices.Sorted(slices.Values(r.Dimensions))) {
		return change{}, fmt.Errorf("rule %q: %w: change (version %d) from a rule keyed by other dimensions (%v, now %v): its counts cannot carry over",
			name, ErrInvalidPolicy, c.Version, nf.Dimensions, r.Dimensions)
	}
	id := ruleID(nf)
	if SameState(nf, r) {
		return change{}, fmt.Errorf("rule %q: %w: change (version %d) keeps the rule's state (only limit, burst or shadow differ, which keeps the counts: SameState): not a change",
			name, ErrInvalidPolicy, c.Version)
	}
	if id == p.ids[i] {
		// Another meaning under the same keys (a GCRA rate, a limit
		// across driver.LogLine): From and the rule would share state.
		return change{}, fmt.Errorf("rule %q: %w: change (version %d) from a rule with the same keys (another GCRA interval or a limit across LogLine, the same Epoch): give the rule a new Epoch",
			name, ErrInvalidPolicy, c.Version)
	}
	if c.At.IsZero() {
		return change{}, fmt.Errorf("rule %q: %w: change (version %d) has no time (At)", name, ErrInvalidPolicy, c.Version)
	}
	if c.Version < 1 {
		// RuleDecision.Before and RuleKey.Before mark From by it.
		return change{}, fmt.Errorf("rule %q: %w: change has no version (Version must be >= 1, got %d)", name, ErrInvalidPolicy, c.Version)
	}
	c.From = nf
	ch := change{Change: c, id: id, reach: driverRule(nf).Reach()}
	ch.end = c.At.Add(ch.reach)
	for _, d := range nf.Dimensions {
		if !slices.Contains(p.shardBy, d) {
			ch.others = append(ch.others, d)
		}
	}
	return ch, nil
}

// driverRule returns the driver's spec of r, without keys.
func driverRule(r Rule) driver.Rule {
	return driver.Rule{
		Name:       r.Name,
		Algorithm:  driver.Algorithm(r.Algorithm),
		Limit:      r.Limit,
		Window:     r.Window,
		SubWindows: r.SubWindows,
		Burst:      r.Burst,
		Calendar:   driver.CalendarUnit(r.Calendar),
		Location:   r.Location,
		Shadow:     r.Shadow,
		Epoch:      r.Epoch,
	}
}

// ruleID returns 6 lowercase base32 characters of a hash of the rule's
// identity: algorithm, window, sub-windows, calendar unit and zone, the
// dimensions it is keyed by (so re-keying a rule can never read counters
// keyed by other dimensions) and its Epoch when > 0 (a rule of Epoch 0
// keeps the id it had before epochs existed). Limit, Burst and Shadow are
// left out so that changing them keeps the counts.
func ruleID(r Rule) string {
	zone := ""
	if r.Calendar != driver.NoCalendar && r.Location != nil {
		zone = r.Location.String()
	}
	id := fmt.Sprintf("freqcap/rule/v1\x00%s\x00%d\x00%d\x00%s\x00%s\x00%s",
		r.Algorithm, int64(r.Window), r.SubWindows, r.Calendar, zone, strings.Join(r.Dimensions, "\x01"))
	if r.Epoch > 0 {
		id += fmt.Sprintf("\x00epoch\x00%d", r.Epoch)
	}
	sum := sha256.Sum256([]byte(id))
	return b32.EncodeToString(sum[:])[:6]
}

// Name returns the policy's name.
func (p *Policy) Name() string {
	if p == nil {
		return ""
	}
	return p.name
}

// Rules returns a copy of the policy's rules, normalized (defaults filled
// in), in policy order.
func (p *Policy) Rules() []Rule {
	if p == nil {
		return nil
	}
	out := make([]Rule, len(p.rules))
	for i, r := range p.rules {
		r.Dimensions = slices.Clone(r.Dimensions)
		out[i] = r
	}
	return out
}

// RuleIDs returns each rule's identity id, in policy order: the rule's
// own storage key holds it, so a rule whose id changes (another
// algorithm, window, cell count, calendar, zone, set of dimensions or
// Epoch) counts in other state: from scratch, unless a Change carries
// its counts (WithChange).
func (p *Policy) RuleIDs() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.ids)
}

// FailOpen reports whether a backend failure yields an allowed, degraded
// decision rather than an error.
func (p *Policy) FailOpen() bool { return p != nil && p.failOpen }

// HotDenyCache returns the size of the policy's hot-deny cache (0: none).
func (p *Policy) HotDenyCache() int {
	if p == nil {
		return 0
	}
	return p.hotDeny
}

// IdempotencyTTL returns how long an idempotent attempt's decision is
// kept for replay: the longest window of the policy's rules (a calendar
// rule counts its nominal window, driver.CalendarUnit.Nominal: 24h, 1h,
// 7 days or 31 days; a GCRA rule its Window).
func (p *Policy) IdempotencyTTL() time.Duration {
	if p == nil {
		return 0
	}
	return p.idemTTL
}

// Dimensions returns the union of the rules' dimensions, in first-use
// order.
func (p *Policy) Dimensions() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.dims)
}

// ShardBy returns the dimensions every rule shares, in the first rule's
// order. Their values form the hash tag of every key of a decision.
func (p *Policy) ShardBy() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.shardBy)
}

// checkResetSet checks the rule names of a ResetRules call: at least one,
// each a rule of p, and with every rule of p keyed by the same dimensions
// as one named (rules of one set of dimensions share their state on some
// backends, so they are reset together). Errors wrap ErrInvalidRule.
func (p *Policy) checkResetSet(names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("%w: no rule named", ErrInvalidRule)
	}
	for _, n := range names {
		i := slices.IndexFunc(p.rules, func(r Rule) bool { return r.Name == n })
		if i < 0 {
			return fmt.Errorf("%w: policy %q has no rule %q", ErrInvalidRule, p.name, n)
		}
		for j, r := range p.rules {
			if p.firstOfGroup[j] == p.firstOfGroup[i] && !slices.Contains(names, r.Name) {
				return fmt.Errorf("%w: rule %q is keyed by the same dimensions as rule %q, which shares its state: name both to reset them", ErrInvalidRule, r.Name, n)
			}
		}
	}
	return nil
}

// SameDimensions returns the names of p's rules keyed by exactly the
// dimensions named (in any order; the shard dimensions included), in
// policy order: the sets Admin.ResetRules resets whole.
func (p *Policy) SameDimensions(dims ...string) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, r := range p.rules {
		same := true
		for _, d := range r.Dimensions {
			same = same && slices.Contains(dims, d)
		}
		for _, d := range dims {
			same = same && slices.Contains(r.Dimensions, d)
		}
		if same {
			out = append(out, r.Name)
		}
	}
	return out
}

// valid reports whether p can be used by a Limiter.
func (p *Policy) valid() error {
	if p == nil || len(p.rules) == 0 {
		return fmt.Errorf("%w: nil or empty policy (build it with NewPolicy)", ErrInvalidPolicy)
	}
	return nil
}
