// Package whatif estimates what a proposed version of the policies would
// have denied over the last hour or day, beside what the current version
// denied, by replaying the traffic sample the fleet's Recorders keep
// (fleet.Options.Sample) through both on a memory backend with a fake
// clock.
//
// How it estimates: the Recorders log every counted attempt of 1 subject
// in N (N = fleet.Options.Sample, 16 by default; a subject is in the
// sample when a hash of its shard values is, the same in every process,
// so every attempt of a sampled subject is logged by every service that
// records). Estimate reads the log of each policy (up to 25 h), replays
// it in time order through the current policy and through the proposed
// one, each from empty state, and counts per window the attempts denied
// and the distinct people (subjects) denied at least once, per policy and
// per rule, then multiplies by N.
//
// Its error: with N > 1 a figure is a sum over the sampled subjects, each
// of whom stands for N; the interval given is a 95% interval: for
// attempts, Value ± 1.96·√(N(N−1)·Σ aᵢ²), aᵢ being each sampled person's
// count (the Horvitz–Thompson variance of subject sampling), never below
// what the sample itself shows; for people, the score (Wilson) interval
// of a binomial count, wider above (about [0, 3.84·N] when the sample
// shows none; attempts then get that bound times the most attempts any
// sampled person made in the window); the difference between the
// versions (WindowReport.Added) has the interval of the sampled people's
// paired differences, N·Σdᵢ ± 1.96·√(N(N−1)·Σdᵢ²). With N = 1 the figures
// are exact replays and the interval is empty. What no interval covers, and each Report says: the state before
// the replay's first attempt (a 24 h rule's count from the day before the
// log starts: the first hours of the log start at zero, so both versions'
// denials are undercounted until then); the traffic of services that do
// not record to the same storage and prefix (their attempts counted in
// the real state, not in the replay); lists that hit their bound (their
// oldest attempts were dropped); attempts decided by exempt or block
// overrides (left out of both versions' denials; limit overrides are
// replayed with the policy's own limits); reservations later cancelled
// (replayed as takes); and how people would have reacted to other
// decisions (the replay sends the same attempts, retries included).
//
// Messaging caps replay as they were decided: each attempt is sent again
// with its message class, priority and zone (fleet.SampledAttempt), so a
// version's quiet hours, classes and headroom decide it (an attempt whose
// class a version does not declare is an error there: Unreplayable). Each
// Outcome says how many denials were for quiet hours (Quiet), how many
// attempts a class let past a rule that would have denied (Exempted: not
// denials of that rule), and each rule how many of its denials were for
// headroom only. A class never exempts a shadow rule, so a shadow rule's
// figures are what it would deny if enforced as it stands, every class's
// attempts included. Identities are not recorded: an attempt is replayed
// for the subject it gave, not the person its identity is linked to.
package whatif

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// DefaultWindows are the windows Estimate reports when given none: the
// last hour and the last 24 hours.
var DefaultWindows = []time.Duration{time.Hour, 24 * time.Hour}

// MaxWindow is the longest window Estimate reports: the sample's
// retention.
const MaxWindow = fleet.SampleRetention

// z95 is the normal quantile of a two-sided 95% interval.
const z95 = 1.959964

// Report is Estimate's answer: per policy (current or proposed, by name)
// and window, what each version denied. String renders it.
type Report struct {
	// At is when the windows end (the Reader's now).
	At       time.Time
	Windows  []time.Duration
	Policies []PolicyReport
	// Notes say what the figures cannot know (see the package doc), and
	// what this report's data lacked.
	Notes []string
}

// PolicyReport is one policy's estimate.
type PolicyReport struct {
	Policy string
	// InCurrent and InProposed say which versions have the policy (a
	// policy only proposed has no recorded traffic; one only current
	// denies nothing in the proposed version).
	InCurrent, InProposed bool
	// Sample is N: each sampled subject stands for N (0: no traffic).
	Sample int
	// Replayed counts the sampled attempts replayed (over the whole log,
	// windows and what precedes them); Since is the oldest one: the
	// replay's state starts empty there.
	Replayed int
	Since    time.Time
	// Full counts the log's lists that hit their bound (attempts lost);
	// Overridden the attempts an exempt or block override decided (left
	// out of both versions' denials); Unreplayable, per version, the
	// attempts it could not decide (e.g. a proposed rule keyed by a
	// dimension the attempts did not give).
	Full, Overridden                          int
	UnreplayableCurrent, UnreplayableProposed int
	Windows                                   []WindowReport
}

// WindowReport is a policy's estimate over one window ending at
// Report.At.
type WindowReport struct {
	Window time.Duration
	// Covered is how much of the window the sample covers: from the
	// oldest sampled attempt (or the window's start, if later) to
	// Report.At. Less than Window when the log starts inside the window
	// (recording began later, or the lists expired).
	Covered time.Duration
	// Attempts and People are the attempts made and the distinct people
	// who made them.
	Attempts, People Figure
	// Recorded is what the current version actually denied (the
	// sampled decisions as they were made; Rules empty): beside Current,
	// it shows what the replay could not know.
	Recorded Outcome
	// Current and Proposed are the replays' denials.
	Current, Proposed Outcome
	// Added is Proposed.Denied − Current.Denied: the attempts the
	// proposed version denies beyond the current one (negative: fewer),
	// with the interval of that difference (the sampled people's
	// differences, paired, so it is narrower than the two intervals
	// apart). Zero when a version lacks the policy.
	Added Figure
}

// Outcome is what one version denied in a window.
type Outcome struct {
	// Denied counts the attempts denied; People the distinct people
	// denied at least once.
	Denied, People Figure
	// Quiet counts the denials for quiet hours (sdk.WithQuietHours; in
	// Denied); Exempted the attempts their message class let past a rule
	// that would have denied them (sdk.WithClass; denied only if another
	// rule or quiet hours denied them).
	Quiet, Exempted Figure
	// Rules holds each rule's denials (a shadow rule's: what it would
	// have denied), in policy order.
	Rules []RuleOutcome
}

// RuleOutcome is one rule's denials in a window.
type RuleOutcome struct {
	Rule string
	// Shadow: a shadow rule; its figures are what it would have denied.
	Shadow         bool
	Denied, People Figure
	// Headroom counts the denials (in Denied) due only to the units the
	// rule keeps for higher priorities (sdk.Rule.WithHeadroom).
	Headroom Figure
}

// count writes f with its noun: one for exactly 1, else many.
func count(f fmt.Stringer, one, many string) string {
	t := f.String()
	if t == "1" {
		return t + " " + one
	}
	return t + " " + many
}

// Figure is a count scaled from the sample: Value = N × Sampled, and
// its 95% interval [Low, High] (Low = High = Value when N = 1).
type Figure struct {
	Value, Low, High int64
	// Sampled is the figure in the sample itself.
	Sampled int64
}

// Estimate reads the traffic sample of every policy named in current or
// proposed from rd and replays it through both versions (see the package
// doc), for each window (default DefaultWindows; each at most MaxWindow).
// Policies are matched by name. It errors when a window is out of range,
// a name repeats within a version, or a read fails.
func Estimate(ctx context.Context, rd *fleet.Reader, current, proposed []*sdk.Policy, windows ...time.Duration) (Report, error) {
	if len(windows) == 0 {
		windows = DefaultWindows
	}
	for _, w := range windows {
		if w <= 0 || w > MaxWindow {
			return Report{}, fmt.Errorf("whatif: estimate: window must be in (0, %v], got %v", MaxWindow, w)
		}
	}
	cur, err := byName(current)
	if err != nil {
		return Report{}, fmt.Errorf("whatif: estimate: current: %w", err)
	}
	prop, err := byName(proposed)
	if err != nil {
		return Report{}, fmt.Errorf("whatif: estimate: proposed: %w", err)
	}
	names := make([]string, 0, len(cur)+len(prop))
	for n := range cur {
		names = append(names, n)
	}
	for n := range prop {
		if cur[n] == nil {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	rep := Report{Windows: slices.Clone(windows)}
	var full, overridden, partial bool
	for _, name := range names {
		tr, err := rd.Traffic(ctx, name, fleet.SampleStep+fleet.SampleRetention)
		if err != nil {
			return Report{}, fmt.Errorf("whatif: estimate: %w", err)
		}
		rep.At = tr.To
		pr, err := estimatePolicy(ctx, tr, cur[name], prop[name], windows)
		if err != nil {
			return Report{}, fmt.Errorf("whatif: estimate: policy %s: %w", name, err)
		}
		full = full || pr.Full > 0
		overridden = overridden || pr.Overridden > 0
		partial = partial || pr.UnreplayableCurrent > 0 || pr.UnreplayableProposed > 0
		if pr.Replayed == 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("policy %s: no sampled traffic (a new policy, or no Recorder samples it): nothing to replay", name))
		}
		for _, w := range pr.Windows {
			if pr.Replayed > 0 && w.Covered < w.Window {
				rep.Notes = append(rep.Notes, fmt.Sprintf("policy %s: the sample covers only the last %v of the %v window", name, w.Covered.Round(time.Minute), w.Window))
			}
		}
		rep.Policies = append(rep.Policies, pr)
	}
	rep.Notes = append(rep.Notes,
		"intervals are 95% intervals of the subject sample (each sampled subject stands for N); exact replays when N = 1",
		"both versions start from empty state at the oldest sampled attempt: denials that depend on earlier traffic (long windows) are undercounted at first",
		"attempts of services that do not record to this storage and prefix are not replayed; the replay sends the same attempts whatever it decides")
	if full {
		rep.Notes = append(rep.Notes, "some lists of the sample hit their bound: their oldest attempts are missing (raise fleet.Options.SampleKeep or the sample's N)")
	}
	if overridden {
		rep.Notes = append(rep.Notes, "attempts decided by exempt or block overrides are left out of both versions' denials")
	}
	if partial {
		rep.Notes = append(rep.Notes, "some attempts could not be replayed by a version (see Unreplayable: e.g. a message class it does not declare): its figures leave them out")
	}
	return rep, nil
}

func byName(ps []*sdk.Policy) (map[string]*sdk.Policy, error) {
	m := map[string]*sdk.Policy{}
	for _, p := range ps {
		if p.Name() == "" {
			return nil, fmt.Errorf("%w: nil or empty policy (build it with NewPolicy)", sdk.ErrInvalidPolicy)
		}
		if m[p.Name()] != nil {
			return nil, fmt.Errorf("%w: policy %s given twice", sdk.ErrInvalidPolicy, p.Name())
		}
		m[p.Name()] = p
	}
	return m, nil
}

// tally counts, per person, something in one window.
type tally map[uint64]int64

// windowTally is what one window counts: attempts, recorded denials, and
// each version's denials, in total and per rule.
type windowTally struct {
	attempts, recorded tally
	versions           [2]versionTally
}

type versionTally struct {
	denied, quiet, exempted tally
	rules, headroom         []tally // by rule, in policy order
}

// estimatePolicy replays tr through cur and prop (either may be nil).
func estimatePolicy(ctx context.Context, tr fleet.Traffic, cur, prop *sdk.Policy, windows []time.Duration) (PolicyReport, error) {
	pr := PolicyReport{Policy: tr.Policy, InCurrent: cur != nil, InProposed: prop != nil, Sample: tr.Sample, Full: tr.Full}
	pols := [2]*sdk.Policy{cur, prop}
	var reps [2]*replayer
	for v, p := range pols {
		if p == nil {
			continue
		}
		r, err := newReplayer(p)
		if err != nil {
			return PolicyReport{}, err
		}
		reps[v] = r
	}
	ws := make([]windowTally, len(windows))
	for i := range ws {
		ws[i] = windowTally{attempts: tally{}, recorded: tally{}}
		for v, r := range reps {
			if r != nil {
				ws[i].versions[v] = versionTally{denied: tally{}, quiet: tally{}, exempted: tally{}, rules: make([]tally, len(r.rules)), headroom: make([]tally, len(r.rules))}
				for k := range r.rules {
					ws[i].versions[v].rules[k], ws[i].versions[v].headroom[k] = tally{}, tally{}
				}
			}
		}
	}
	for _, a := range tr.Attempts {
		if err := ctx.Err(); err != nil {
			return PolicyReport{}, err
		}
		pr.Replayed++
		if pr.Since.IsZero() {
			pr.Since = a.At
		}
		var in []int // the windows a is in
		for i, w := range windows {
			if !a.At.Before(tr.To.Add(-w)) {
				in = append(in, i)
				ws[i].attempts[a.Person]++
				if !a.Allowed {
					ws[i].recorded[a.Person]++
				}
			}
		}
		if a.Override == driver.Exempt || a.Override == driver.Block {
			pr.Overridden++
			continue
		}
		for v, r := range reps {
			if r == nil {
				continue
			}
			rp, ok := r.take(ctx, a)
			if !ok {
				if v == 0 {
					pr.UnreplayableCurrent++
				} else {
					pr.UnreplayableProposed++
				}
				continue
			}
			for _, i := range in {
				vt := &ws[i].versions[v]
				if !rp.allowed {
					vt.denied[a.Person]++
				}
				if rp.quiet {
					vt.quiet[a.Person]++
				}
				if rp.exempted {
					vt.exempted[a.Person]++
				}
				for k, d := range rp.ruleDenied {
					if d {
						vt.rules[k][a.Person]++
					}
					if rp.headroom[k] {
						vt.headroom[k][a.Person]++
					}
				}
			}
		}
	}
	n := tr.Sample
	for i, w := range windows {
		wt := &ws[i]
		peak := int64(0) // the most attempts of a sampled person in the window
		for _, c := range wt.attempts {
			peak = max(peak, c)
		}
		wr := WindowReport{Window: w, Covered: w, Attempts: scale(wt.attempts, n, false, peak), People: scale(wt.attempts, n, true, 1)}
		if start := tr.To.Add(-w); pr.Since.After(start) {
			wr.Covered = tr.To.Sub(pr.Since)
		}
		wr.Recorded = Outcome{Denied: scale(wt.recorded, n, false, peak), People: scale(wt.recorded, n, true, 1)}
		outs := [2]*Outcome{&wr.Current, &wr.Proposed}
		for v, r := range reps {
			if r == nil {
				continue
			}
			vt := &wt.versions[v]
			out := Outcome{Denied: scale(vt.denied, n, false, peak), People: scale(vt.denied, n, true, 1),
				Quiet: scale(vt.quiet, n, false, peak), Exempted: scale(vt.exempted, n, false, peak)}
			for k, rule := range r.rules {
				out.Rules = append(out.Rules, RuleOutcome{Rule: rule.Name, Shadow: rule.Shadow,
					Denied: scale(vt.rules[k], n, false, peak), People: scale(vt.rules[k], n, true, 1),
					Headroom: scale(vt.headroom[k], n, false, peak)})
			}
			*outs[v] = out
		}
		if reps[0] != nil && reps[1] != nil {
			wr.Added = scaleDiff(wt.versions[0].denied, wt.versions[1].denied, n)
		}
		pr.Windows = append(pr.Windows, wr)
	}
	return pr, nil
}

// scale turns per-person counts of a 1/n subject sample into a
// Figure: of the sum (people false) or of the persons counted (true).
// peak bounds one person's count when the sample shows none.
//
// People: the sampled count d is Binomial(D, 1/n); the interval is the
// score (Wilson) interval of D, the D whose sampling error puts d within
// 1.96 standard deviations: asymmetric, wider above, and for d = 0 an
// upper bound of about 3.84·n. Sums: the Horvitz–Thompson variance
// n(n−1)·Σaᵢ² of n·Σaᵢ, the interval never below the sampled sum; for an
// empty sample, the people bound times peak.
func scale(t tally, n int, people bool, peak int64) Figure {
	var s, sq float64
	for _, c := range t {
		x := float64(c)
		if people {
			x = 1
		}
		s += x
		sq += x * x
	}
	if n <= 1 {
		v := int64(s)
		return Figure{Value: v, Low: v, High: v, Sampled: v}
	}
	nf := float64(n)
	if people || s == 0 {
		d := float64(len(t))
		q := 1 - 1/nf
		b := 2*d + z95*z95*q
		root := math.Sqrt(max(b*b-4*d*d, 0))
		lo, hi := nf*(b-root)/2, nf*(b+root)/2
		f := Figure{Value: int64(math.Round(nf * d)), Sampled: int64(d), Low: max(int64(d), int64(math.Floor(lo))), High: int64(math.Ceil(hi))}
		if !people { // no sampled person: at most peak each
			f.High *= max(peak, 1)
		}
		return f
	}
	v := nf * s
	sd := math.Sqrt(nf * (nf - 1) * sq)
	return Figure{Value: int64(math.Round(v)), Sampled: int64(s),
		Low: max(int64(s), int64(math.Floor(v-z95*sd))), High: int64(math.Ceil(v + z95*sd))}
}

// scaleDiff is the Figure of Σ(after − before) over the people of a 1/n
// sample: n·Σdᵢ ± 1.96·√(n(n−1)·Σdᵢ²), dᵢ each person's difference.
func scaleDiff(before, after tally, n int) Figure {
	var s, sq float64
	seen := map[uint64]bool{}
	for _, t := range []tally{before, after} {
		for person := range t {
			if seen[person] {
				continue
			}
			seen[person] = true
			d := float64(after[person] - before[person])
			s += d
			sq += d * d
		}
	}
	if n <= 1 {
		v := int64(s)
		return Figure{Value: v, Low: v, High: v, Sampled: v}
	}
	nf := float64(n)
	sd := math.Sqrt(nf * (nf - 1) * sq)
	v := nf * s
	return Figure{Value: int64(math.Round(v)), Sampled: int64(s), Low: int64(math.Floor(v - z95*sd)), High: int64(math.Ceil(v + z95*sd))}
}

// replayer replays attempts through one policy on a memory backend
// whose fake clock follows the attempts' times.
type replayer struct {
	p     *sdk.Policy
	rules []sdk.Rule
	clock *fakeclock.Clock
	lim   *sdk.Limiter
}

// newReplayer rebuilds p from its rules and its quiet hours and classes,
// which decide attempts as its rules do: its other options (hot-deny
// cache, trail, overrides, the changes it carries from a former version;
// its person dimension, which only an attempt's identity engages, and no
// sample records one) decide nothing a replay from empty state should
// see.
func newReplayer(p *sdk.Policy) (*replayer, error) {
	rules := p.Rules()
	var opts []sdk.PolicyOption
	if loc, qs := p.QuietHours(); loc != nil {
		opts = append(opts, sdk.WithQuietHours(loc, qs...))
	}
	if cs := p.Classes(); len(cs) > 0 {
		opts = append(opts, sdk.WithClass(cs...))
	}
	q, err := sdk.NewPolicy(p.Name(), rules, opts...)
	if err != nil {
		return nil, err
	}
	c := fakeclock.New(time.Time{})
	return &replayer{p: q, rules: rules, clock: c, lim: sdk.New(memory.New(&memory.Options{Clock: c}), sdk.WithClock(c))}, nil
}

// replayed is what a version decided of a replayed attempt: whether it
// allowed it, whether it denied it for quiet hours, whether a class let
// it past a rule; per rule whether the rule denied it (a shadow rule:
// would have; a rule's former self counts as the rule; not a rule the
// class is exempt from) and whether only for headroom.
type replayed struct {
	allowed, quiet, exempted bool
	ruleDenied, headroom     []bool
}

// take replays a, with its class, priority and zone. ok is false when the
// policy could not decide it (a class it does not declare, a zone that
// does not load, a dimension its rules need and a lacks).
func (r *replayer) take(ctx context.Context, a fleet.SampledAttempt) (out replayed, ok bool) {
	if a.At.After(r.clock.Now()) {
		r.clock.Set(a.At)
	}
	att := sdk.Attempt{Subject: sdk.Subject(a.Values), Cost: a.Cost, Class: a.Class, Priority: a.Priority}
	if a.Zone != "" {
		loc, err := sdk.LoadZone(a.Zone)
		if err != nil {
			return replayed{}, false
		}
		att.Zone = loc
	}
	d, err := r.lim.Take(ctx, r.p, att)
	if err != nil {
		return replayed{}, false
	}
	out = replayed{allowed: d.Allowed, quiet: !d.Allowed && !d.Quiet.IsZero(), exempted: len(d.Exempted) > 0,
		ruleDenied: make([]bool, len(r.rules)), headroom: make([]bool, len(r.rules))}
	j, former := 0, false
	for _, rd := range d.Rules {
		if rd.Before != 0 {
			former = former || !rd.Allowed
			continue
		}
		if j >= len(r.rules) || rd.Rule != r.rules[j].Name {
			break
		}
		out.ruleDenied[j] = (!rd.Allowed || former) && rd.Exempt == driver.NotExempt
		out.headroom[j] = out.ruleDenied[j] && rd.Headroom
		j, former = j+1, false
	}
	return out, true
}

// String renders the report as a table: per policy and window, the
// attempts and people the current version denied (replayed, and as
// recorded) and the proposed one would have, each with its interval.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "what-if at %s\n", r.At.UTC().Format(time.RFC3339))
	for _, p := range r.Policies {
		fmt.Fprintf(&b, "policy %s", p.Policy)
		switch {
		case !p.InCurrent:
			b.WriteString(" (new)")
		case !p.InProposed:
			b.WriteString(" (removed)")
		}
		if p.Sample > 0 {
			fmt.Fprintf(&b, ": 1 subject in %d sampled, %d attempts replayed since %s", p.Sample, p.Replayed, p.Since.UTC().Format(time.RFC3339))
		}
		b.WriteByte('\n')
		for _, w := range p.Windows {
			fmt.Fprintf(&b, "  last %v", w.Window)
			if w.Covered < w.Window {
				fmt.Fprintf(&b, " (the sample covers %v)", w.Covered.Round(time.Minute))
			}
			fmt.Fprintf(&b, ": %s by %s\n", count(w.Attempts, "attempt", "attempts"), count(w.People, "person", "people"))
			fmt.Fprintf(&b, "    recorded: denied %s, %s\n", count(w.Recorded.Denied, "attempt", "attempts"), count(w.Recorded.People, "person", "people"))
			for _, o := range []struct {
				name string
				out  Outcome
				has  bool
			}{{"current", w.Current, p.InCurrent}, {"proposed", w.Proposed, p.InProposed}} {
				if !o.has {
					continue
				}
				fmt.Fprintf(&b, "    %s: denies %s, %s", o.name, count(o.out.Denied, "attempt", "attempts"), count(o.out.People, "person", "people"))
				if o.name == "proposed" && p.InCurrent {
					fmt.Fprintf(&b, " (added: %s)", count(w.Added, "attempt", "attempts"))
				}
				b.WriteByte('\n')
				if o.out.Quiet.Sampled > 0 {
					fmt.Fprintf(&b, "      quiet hours deny %s\n", count(o.out.Quiet, "attempt", "attempts"))
				}
				if o.out.Exempted.Sampled > 0 {
					fmt.Fprintf(&b, "      classes let %s past a rule that would deny\n", count(o.out.Exempted, "attempt", "attempts"))
				}
				for _, ru := range o.out.Rules {
					verb := "denies"
					if ru.Shadow {
						verb = "would deny (shadow)"
					}
					fmt.Fprintf(&b, "      %s %s %s, %s", ru.Rule, verb, count(ru.Denied, "attempt", "attempts"), count(ru.People, "person", "people"))
					if ru.Headroom.Sampled > 0 {
						fmt.Fprintf(&b, " (%s for headroom)", ru.Headroom)
					}
					b.WriteByte('\n')
				}
			}
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

// String writes the estimate and, when it is not exact, its interval:
// "120 [96, 144]".
func (e Figure) String() string {
	if e.Low == e.High && e.Low == e.Value {
		return fmt.Sprint(e.Value)
	}
	return fmt.Sprintf("%d [%d, %d]", e.Value, e.Low, e.High)
}
