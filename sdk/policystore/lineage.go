package policystore

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

// ChangeKind says what became of a rule (or a policy) from the store's
// current version to a planned one.
type ChangeKind uint8

const (
	// Unchanged: the same rule; its counts carry exactly.
	Unchanged ChangeKind = iota
	// Added: a rule (or policy) the current version lacks; it starts
	// afresh. A renamed rule is a removed rule plus an added one.
	Added
	// Removed: a rule (or policy) the planned version lacks; its counts
	// are dropped.
	Removed
	// Modified: the limit, burst, headroom or shadow flag changed and the state
	// keeps its meaning (sdk.SameState; or, for a policy, a setting or a
	// rule changed): the rule keeps its state, its counts carry exactly. A
	// GCRA rule's limit is its rate: a limit change that moves its
	// emission interval (Window/Limit) is no Modified but a Reidentified.
	Modified
	// Reidentified: the window, sub-windows, algorithm, calendar or zone
	// changed, or the state would change its meaning under the same keys
	// (a GCRA rule's rate, hence its emission interval; a sliding window's
	// or sliding log's limit across driver.LogLine): the rule starts under new keys (a new
	// epoch) from what its former self proves, and the former rule is
	// enforced beside it until its state proves nothing more
	// (sdk.Change): carried conservatively.
	Reidentified
	// Rekeyed: the rule's dimensions (or its policy's shard dimensions)
	// changed: counts kept by other dimensions say nothing about the new
	// ones, so the rule starts afresh. An apply must confirm it.
	Rekeyed
)

// String returns the kind as Plan.String writes it.
func (k ChangeKind) String() string {
	switch k {
	case Unchanged:
		return "unchanged"
	case Added:
		return "added"
	case Removed:
		return "removed"
	case Modified:
		return "modified"
	case Reidentified:
		return "identity changed"
	case Rekeyed:
		return "re-keyed"
	}
	return "unknown"
}

// Carry says what a rule's counts become across a change.
type Carry uint8

const (
	// CarriesExactly: the same state, under the same keys.
	CarriesExactly Carry = iota
	// CarriesConservatively: the new rule starts from what the old state
	// proves (placed at the change's time) and the old rule stays
	// enforced until its reach has passed: no one capped before is
	// uncapped, no one is admitted past the new limit.
	CarriesConservatively
	// CarriesNothing: the rule starts afresh (added, re-keyed) or its
	// counts are dropped (removed).
	CarriesNothing
)

// String returns the carry as Plan.String writes it.
func (c Carry) String() string {
	switch c {
	case CarriesExactly:
		return "carries exactly"
	case CarriesConservatively:
		return "carries conservatively"
	case CarriesNothing:
		return "carries nothing"
	}
	return "unknown"
}

// RuleDiff is what a plan does to one rule.
type RuleDiff struct {
	Rule  string
	Kind  ChangeKind
	Carry Carry
	// Fields lists what changed, e.g. "limit 50 → 40", "shadow on".
	Fields []string
	// Before and After are the rule in the current and the planned
	// version (nil when absent), After with its planned Epoch.
	Before, After *sdk.Rule
	// Note explains the carry in a sentence.
	Note string
}

// PolicyDiff is what a plan does to one policy.
type PolicyDiff struct {
	Policy string
	// Kind is Added, Removed, Modified (a setting or a rule changed) or
	// Unchanged.
	Kind ChangeKind
	// Settings lists the policy settings that changed (failure, trail,
	// hot_deny_cache, overrides, wide, person, quiet_hours, classes, shard
	// dimensions), as policyfile.Policy.SettingChanges writes them.
	Settings []string
	// Rules are the policy's rules, planned ones in file order, then
	// removed ones.
	Rules []RuleDiff
}

// reachSlack keeps a change in the lineage a little past its reach, so
// that clocks a little apart never drop one too early (a change kept too
// long costs nothing: the sdk ignores it once its reach has passed).
const reachSlack = time.Minute

// reach is how long after a change the rule r's state can still prove
// anything (driver.Rule.Reach, which the sdk enforces changes by).
func reach(r sdk.Rule) time.Duration {
	return driver.Rule{
		Algorithm: r.Algorithm, Limit: r.Limit, Window: r.Window, SubWindows: r.SubWindows,
		Burst: r.Burst, Calendar: r.Calendar, Location: r.Location,
	}.Reach()
}

// derive computes the lineage of version (the one after prev, whose
// lineage is prevLin; prev is nil for the first version) for the policies
// next, at now, and what changes per policy and rule, with warnings.
// Rules added by version 1 get epoch 0, later ones the version.
// It is pure: no backend, no clock.
func derive(prev []parsed, prevLin lineage, next []parsed, version int64, now time.Time) (lineage, []PolicyDiff, []string) {
	lin := lineage{}
	var diffs []PolicyDiff
	var warns []string
	addedEpoch := version
	if version == 1 {
		// The first version keeps the keys a policy file gives the same
		// rules: moving from --policies to the store keeps the counts.
		addedEpoch = 0
	}
	live := func(cs []sdk.Change) []sdk.Change {
		var out []sdk.Change
		for _, c := range cs {
			if !c.At.IsZero() && c.At.Add(reach(c.From)+reachSlack).Before(now) {
				continue // its reach has passed: it proves nothing more
			}
			out = append(out, c)
		}
		return out
	}
	for _, np := range next {
		name := np.policy.Name()
		pi := slices.IndexFunc(prev, func(p parsed) bool { return p.policy.Name() == name })
		d := PolicyDiff{Policy: name}
		if pi < 0 {
			d.Kind = Added
			for _, r := range np.rules {
				r.Epoch = addedEpoch
				lin.set(name, r.Name, ruleLineage{Epoch: r.Epoch})
				note := "starts afresh"
				if addedEpoch == 0 {
					note = "starts afresh, or from the counts of the same rule run from a policy file (epoch 0)"
				}
				d.Rules = append(d.Rules, RuleDiff{Rule: r.Name, Kind: Added, Carry: CarriesNothing, After: ptr(r), Note: note})
			}
			diffs = append(diffs, d)
			continue
		}
		pp := prev[pi]
		d.Settings = np.policy.SettingChanges(pp.policy)
		oldShard, newShard := pp.policy.ShardBy(), np.policy.ShardBy()
		shardMoved := !slices.Equal(oldShard, newShard)
		if shardMoved {
			d.Settings = append(d.Settings, fmt.Sprintf("shard dimensions %v → %v", oldShard, newShard))
		}
		oldIDs, newIDs := pp.policy.RuleIDs(), np.policy.RuleIDs()
		var added, removed []int
		for i, r := range np.rules {
			j := slices.IndexFunc(pp.rules, func(o sdk.Rule) bool { return o.Name == r.Name })
			if j < 0 {
				r.Epoch = version
				lin.set(name, r.Name, ruleLineage{Epoch: r.Epoch})
				d.Rules = append(d.Rules, RuleDiff{Rule: r.Name, Kind: Added, Carry: CarriesNothing, After: ptr(r), Note: "starts afresh"})
				added = append(added, i)
				continue
			}
			o := pp.rules[j]
			prl := prevLin.rule(name, o.Name)
			o.Epoch = prl.Epoch
			rd := RuleDiff{Rule: r.Name, Before: ptr(o), Fields: fieldChanges(o, r)}
			switch {
			case shardMoved || !sameSet(o.Dimensions, r.Dimensions):
				r.Epoch = version
				lin.set(name, r.Name, ruleLineage{Epoch: r.Epoch})
				rd.Kind, rd.Carry = Rekeyed, CarriesNothing
				why := fmt.Sprintf("by %v → %v", o.Dimensions, r.Dimensions)
				if shardMoved {
					why = fmt.Sprintf("the policy's shard dimensions %v → %v move every key", oldShard, newShard)
				}
				rd.Note = "starts afresh: counts kept by other dimensions prove nothing about the new ones"
				warns = append(warns, fmt.Sprintf("policy %q rule %q is re-keyed (%s): its counts start afresh, so people it capped are uncapped for up to %v; confirm with -rekey (Plan.ConfirmRekey)", name, r.Name, why, reach(o)))
			case !sdk.SameState(pp.rules[j], r): // both as the files give them, epoch 0
				// Another identity, or the same keys with another meaning
				// (a limit crossing driver.LogLine, a GCRA rate): a transition.
				r.Epoch = version
				changes := append([]sdk.Change{{From: o, Version: version}}, live(prl.Changes)...)
				lin.set(name, r.Name, ruleLineage{Epoch: r.Epoch, Changes: changes})
				rd.Kind, rd.Carry = Reidentified, CarriesConservatively
				rd.Note = fmt.Sprintf("starts under epoch %d from the old rule's count at each person's first attempt after the apply; the old rule stays enforced for %v after the apply", version, reach(o))
			default:
				r.Epoch = o.Epoch
				lin.set(name, r.Name, ruleLineage{Epoch: r.Epoch, Changes: live(prl.Changes)})
				rd.Kind, rd.Carry = Unchanged, CarriesExactly
				if len(rd.Fields) > 0 {
					rd.Kind = Modified
					rd.Note = "the same keys and state"
				}
			}
			rd.After = ptr(r)
			d.Rules = append(d.Rules, rd)
		}
		for j, o := range pp.rules {
			if slices.ContainsFunc(np.rules, func(r sdk.Rule) bool { return r.Name == o.Name }) {
				continue
			}
			o.Epoch = prevLin.rule(name, o.Name).Epoch
			d.Rules = append(d.Rules, RuleDiff{Rule: o.Name, Kind: Removed, Carry: CarriesNothing, Before: ptr(o), Note: "its counts are dropped"})
			removed = append(removed, j)
			warns = append(warns, fmt.Sprintf("policy %q rule %q is removed: its counts are dropped (adding it again later starts afresh)", name, o.Name))
		}
		// A removed rule and an added one of the same definition look
		// like a rename, which carries nothing.
		for _, j := range removed {
			for _, i := range added {
				if oldIDs[j] == newIDs[i] {
					warns = append(warns, fmt.Sprintf("policy %q: rule %q is removed and %q added with the same definition: a rename is a removal plus an addition, so %q starts afresh", name, pp.rules[j].Name, np.rules[i].Name, np.rules[i].Name))
				}
			}
		}
		d.Kind = Unchanged
		if len(d.Settings) > 0 || slices.ContainsFunc(d.Rules, func(r RuleDiff) bool { return r.Kind != Unchanged }) {
			d.Kind = Modified
		}
		diffs = append(diffs, d)
	}
	for _, pp := range prev {
		name := pp.policy.Name()
		if slices.ContainsFunc(next, func(p parsed) bool { return p.policy.Name() == name }) {
			continue
		}
		d := PolicyDiff{Policy: name, Kind: Removed}
		for _, o := range pp.rules {
			o.Epoch = prevLin.rule(name, o.Name).Epoch
			d.Rules = append(d.Rules, RuleDiff{Rule: o.Name, Kind: Removed, Carry: CarriesNothing, Before: ptr(o), Note: "its counts are dropped"})
		}
		diffs = append(diffs, d)
		warns = append(warns, fmt.Sprintf("policy %q is removed: services asking for it find no policy, its counts are dropped", name))
	}
	return lin, diffs, warns
}

func ptr(r sdk.Rule) *sdk.Rule { return &r }

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// fieldChanges lists the fields of rule o that differ in r.
func fieldChanges(o, r sdk.Rule) []string {
	var out []string
	add := func(key string, a, b any) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %v → %v", key, a, b))
		}
	}
	add("algorithm", algorithmNames[o.Algorithm], algorithmNames[r.Algorithm])
	add("window", o.Window, r.Window)
	add("sub_windows", o.SubWindows, r.SubWindows)
	add("calendar", calendarOrNone(o.Calendar), calendarOrNone(r.Calendar))
	add("timezone", zone(o), zone(r))
	if !slices.Equal(o.Dimensions, r.Dimensions) {
		out = append(out, fmt.Sprintf("by %v → %v", o.Dimensions, r.Dimensions))
	}
	add("limit", o.Limit, r.Limit)
	add("burst", o.Burst, r.Burst)
	add("headroom", policyfile.Headroom(o.Headroom), policyfile.Headroom(r.Headroom))
	if o.Shadow != r.Shadow {
		if r.Shadow {
			out = append(out, "shadow on")
		} else {
			out = append(out, "shadow off")
		}
	}
	return out
}

func calendarOrNone(c driver.CalendarUnit) string {
	if c == driver.NoCalendar {
		return "none"
	}
	return calendarNames[c]
}

func zone(r sdk.Rule) string {
	if r.Calendar == driver.NoCalendar || r.Location == nil {
		return "none"
	}
	return r.Location.String()
}

// A parsed policy is one policy of a policy file with its rules as the
// file gives them (epoch 0), as derive compares them.
type parsed struct {
	policy policyfile.Policy
	rules  []sdk.Rule
}

// parse checks the policy file src (named source in errors) as
// policyfile.Load does.
func parse(src []byte, source string) ([]parsed, error) {
	ps, err := policyfile.Parse(src, source)
	if err != nil {
		return nil, err
	}
	out := make([]parsed, len(ps))
	for i, p := range ps {
		out[i] = parsed{policy: p, rules: p.Rules()}
	}
	return out, nil
}

// build returns the policies ps as a version with lineage lin runs them:
// each rule with its epoch, each identity change given (sdk.WithChange);
// changes without At get at.
func build(ps []parsed, lin lineage, at time.Time) ([]*sdk.Policy, error) {
	out := make([]*sdk.Policy, len(ps))
	for i, p := range ps {
		name := p.policy.Name()
		rules := slices.Clone(p.rules)
		var opts []sdk.PolicyOption
		for j := range rules {
			rl := lin.rule(name, rules[j].Name)
			rules[j].Epoch = rl.Epoch
			if len(rl.Changes) > 0 {
				cs := slices.Clone(rl.Changes)
				for k := range cs {
					if cs[k].At.IsZero() {
						cs[k].At = at
					}
				}
				opts = append(opts, sdk.WithChange(rules[j].Name, cs...))
			}
		}
		np, err := p.policy.Rebuild(rules, opts...)
		if err != nil {
			return nil, fmt.Errorf("policystore: build policy %q with its lineage: %w", name, err)
		}
		out[i] = np
	}
	return out, nil
}

// describeRule writes r as one line of a policy file would, naming what
// runs for a sliding window: an exact log (sdk.Rule.ExactLog) or its
// cells, in format; nothing for a rule not known (nil: a plan read from
// a server, whose changes carry no rule definitions).
func describeRule(rp *sdk.Rule, format string) string {
	if rp == nil {
		return ""
	}
	r := *rp
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d per %v", algorithmNames[r.Algorithm], r.Limit, r.Window)
	switch {
	case r.Algorithm != driver.SlidingWindow:
	case r.ExactLog(): // what runs: a log; its cells are unused
		b.WriteString(" (exact log)")
	case r.SubWindows > 0:
		fmt.Fprintf(&b, " (%d cells)", r.SubWindows)
	}
	if r.Burst > 0 {
		fmt.Fprintf(&b, " burst %d", r.Burst)
	}
	if r.Calendar != driver.NoCalendar {
		fmt.Fprintf(&b, " calendar %s %s", calendarNames[r.Calendar], zone(r))
	}
	fmt.Fprintf(&b, " by %v", r.Dimensions)
	if len(r.Headroom) > 0 {
		fmt.Fprintf(&b, " headroom %s", policyfile.Headroom(r.Headroom))
	}
	if r.Shadow {
		b.WriteString(" shadow")
	}
	if r.Epoch != 0 {
		fmt.Fprintf(&b, " epoch %d", r.Epoch)
	}
	return fmt.Sprintf(format, b.String())
}
