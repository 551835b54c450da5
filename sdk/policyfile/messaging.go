package policyfile

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/freqcap/freqcap/sdk"
)

// This file owns the policy file's messaging keys (issue 37), read and
// written: a policy's person, quiet_hours and classes, a rule's headroom.
//
//	person: user
//	quiet_hours: {zone: Europe/Berlin, periods: [{from: "21:00", to: "08:00", days: [mon, tue, wed, thu, fri]}]}
//	classes:
//	  - {name: otp, exempt: all, counted: true, quiet_hours: true}
//	  - {name: receipt, exempt: [recv-24h]}
//	rules:
//	  - {name: recv-24h, …, headroom: [{priority: 1, keep: 10}]}

// fileClock is a time of day, "HH:MM" (00:00 to 23:59), as a duration
// since midnight.
type fileClock time.Duration

func (c *fileClock) UnmarshalYAML(n *yaml.Node) error {
	d, ok := parseClock(n)
	if !ok {
		return fmt.Errorf("line %d: %w: quiet_hours: a time of day must be \"HH:MM\" (00:00 to 23:59), got %q", n.Line, sdk.ErrInvalidPolicy, n.Value)
	}
	*c = fileClock(d)
	return nil
}

// parseClock reads "HH:MM" (one or two hour digits, two minute digits),
// as time.Parse reads the layout clockLayout.
func parseClock(n *yaml.Node) (time.Duration, bool) {
	t, err := time.Parse(clockLayout, n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return 0, false
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, true
}

// clockLayout is the file's time of day, as a time layout.
const clockLayout = "15:04"

// formatClock writes a time of day as the file does.
func formatClock(d time.Duration) string {
	return time.Time{}.Add(d).Format(clockLayout)
}

// weekdays are the file's names of the days, by time.Weekday.
var weekdays = [...]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// fileWeekday is a day of the week: mon, tue, wed, thu, fri, sat or sun.
type fileWeekday time.Weekday

func (w *fileWeekday) UnmarshalYAML(n *yaml.Node) error {
	if i := slices.Index(weekdays[:], n.Value); n.Kind == yaml.ScalarNode && i >= 0 {
		*w = fileWeekday(i)
		return nil
	}
	return fmt.Errorf("line %d: %w: quiet_hours: days are mon, tue, wed, thu, fri, sat or sun, got %q", n.Line, sdk.ErrInvalidPolicy, n.Value)
}

// fileExempt is a class's exempt key: all, or a list of rule names.
type fileExempt struct {
	all   bool
	rules []string
}

func (e *fileExempt) UnmarshalYAML(n *yaml.Node) error {
	bad := func() error {
		return fmt.Errorf("line %d: %w: class exempt must be all or a list of rule names", n.Line, sdk.ErrInvalidPolicy)
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Value != "all" {
			return bad()
		}
		e.all = true
		return nil
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode || c.ShortTag() != "!!str" {
				return bad()
			}
			e.rules = append(e.rules, c.Value)
		}
		return nil
	}
	return bad()
}

// messagingOpts returns the options of fp's quiet_hours (with the base
// options: they depend on no rule), and those of its person and classes
// with the line of each (they name rules and dimensions).
func (fp filePolicy) messagingOpts() (quiet sdk.PolicyOption, late []lineOpt, line int, err error) {
	if q := fp.QuietHours; q != nil {
		bad := func(format string, args ...any) (sdk.PolicyOption, []lineOpt, int, error) {
			return nil, nil, q.line, fmt.Errorf("policy %q: %w: quiet_hours: "+format, append([]any{fp.Name, sdk.ErrInvalidPolicy}, args...)...)
		}
		if q.Zone == "" {
			return bad("zone missing (an IANA zone name such as Europe/Berlin; UTC is one)")
		}
		loc, err := sdk.LoadZone(q.Zone)
		if err != nil {
			return bad("%v", err)
		}
		if len(q.Periods) == 0 {
			return bad("periods missing (1 to %d, each {from: \"HH:MM\", to: \"HH:MM\", days: [...]})", sdk.MaxQuietPeriods)
		}
		ps := make([]sdk.QuietPeriod, len(q.Periods))
		for i, fq := range q.Periods {
			ps[i] = sdk.QuietPeriod{From: time.Duration(fq.From), To: time.Duration(fq.To)}
			for _, d := range fq.Days {
				ps[i].Days = append(ps[i].Days, time.Weekday(d))
			}
		}
		quiet = sdk.WithQuietHours(loc, ps...)
		if _, err := sdk.NewPolicy(fp.Name, []sdk.Rule{sdk.FixedWindow("x", 1, time.Second).By("x")}, quiet); err != nil {
			if inner := errors.Unwrap(err); inner != nil {
				err = inner // without NewPolicy's "sdk: ": the line goes before it
			}
			return nil, nil, q.line, err
		}
	}
	if fp.Person != "" {
		late = append(late, lineOpt{sdk.WithPerson(fp.Person), fp.personLine})
	}
	for _, fc := range fp.Classes {
		c := sdk.Class{Name: fc.Name, AllRules: fc.Exempt.all, Rules: fc.Exempt.rules, Counted: fc.Counted, QuietHours: fc.QuietHours}
		late = append(late, lineOpt{sdk.WithClass(c), fc.line})
	}
	return quiet, late, 0, nil
}

// lineOpt is an option and the line of the key that gives it.
type lineOpt struct {
	opt  sdk.PolicyOption
	line int
}

// headroom returns r with fr's headroom tiers.
func (fr fileRule) headroom(r sdk.Rule) sdk.Rule {
	for _, h := range fr.Headroom {
		r = r.WithHeadroom(h.Keep, h.Priority)
	}
	return r
}

// Headroom writes a rule's headroom tiers as the file does
// ("[{priority: 1, keep: 10}]"), "none" for none.
func Headroom(hs []sdk.Headroom) string {
	if len(hs) == 0 {
		return "none"
	}
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = fmt.Sprintf("{priority: %d, keep: %d}", h.Priority, h.Keep)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// QuietHours writes a policy's quiet hours as the file does
// ({zone: Europe/Berlin, periods: [{from: "21:00", to: "08:00", days:
// [mon, tue]}]}), "none" for none.
func QuietHours(loc *time.Location, ps []sdk.QuietPeriod) string {
	if loc == nil || len(ps) == 0 {
		return "none"
	}
	parts := make([]string, len(ps))
	for i, q := range ps {
		s := fmt.Sprintf("{from: %q, to: %q", formatClock(q.From), formatClock(q.To))
		if len(q.Days) > 0 {
			days := make([]string, len(q.Days))
			for j, d := range q.Days {
				days[j] = weekdays[d]
			}
			s += ", days: [" + strings.Join(days, ", ") + "]"
		}
		parts[i] = s + "}"
	}
	return fmt.Sprintf("{zone: %s, periods: [%s]}", loc, strings.Join(parts, ", "))
}

// Class writes a class as the file does ({name: otp, exempt: all,
// counted: true, quiet_hours: true}; keys that are false or empty left
// out).
func Class(c sdk.Class) string {
	s := "{name: " + c.Name
	switch {
	case c.AllRules:
		s += ", exempt: all"
	case len(c.Rules) > 0:
		s += ", exempt: [" + strings.Join(c.Rules, ", ") + "]"
	}
	if c.Counted {
		s += ", counted: true"
	}
	if c.QuietHours {
		s += ", quiet_hours: true"
	}
	return s + "}"
}

// messagingChanges lists the messaging settings that differ from from to
// p, in the file's words (SettingChanges).
func (p Policy) messagingChanges(from Policy) []string {
	var out []string
	if o, n := from.Person(), p.Person(); o != n {
		out = append(out, fmt.Sprintf("person %s → %s", orNone(o), orNone(n)))
	}
	if o, n := QuietHours(from.QuietHours()), QuietHours(p.QuietHours()); o != n {
		out = append(out, fmt.Sprintf("quiet_hours %s → %s", o, n))
	}
	oc, nc := from.Classes(), p.Classes()
	for _, c := range nc {
		i := slices.IndexFunc(oc, func(o sdk.Class) bool { return o.Name == c.Name })
		switch {
		case i < 0:
			out = append(out, fmt.Sprintf("class %s added: %s", c.Name, Class(c)))
		case Class(oc[i]) != Class(c):
			out = append(out, fmt.Sprintf("class %s: %s → %s", c.Name, Class(oc[i]), Class(c)))
		}
	}
	for _, c := range oc {
		if !slices.ContainsFunc(nc, func(n sdk.Class) bool { return n.Name == c.Name }) {
			out = append(out, fmt.Sprintf("class %s removed: %s", c.Name, Class(c)))
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
