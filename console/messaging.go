package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// headroomText describes the units r keeps for higher priorities
// (Rule.WithHeadroom): "keeps 10 for priority ≥ 1, 3 for priority ≥ 5".
func headroomText(r sdk.Rule) string {
	if len(r.Headroom) == 0 {
		return ""
	}
	parts := make([]string, len(r.Headroom))
	for i, h := range r.Headroom {
		parts[i] = fmt.Sprintf("%d for priority ≥ %d", h.Keep, h.Priority)
	}
	return "keeps " + strings.Join(parts, ", ")
}

// headroomDenial explains a trail entry of rule r that r's headroom
// denied: a denial of an exact count (a fixed window, a sliding log)
// whose cost fit the limit, of an attempt below a tier of r's
// (Rule.WithHeadroom): "within the limit, but its last 10 units are kept
// for priority ≥ 1". Any other entry, or one of a count that is an estimate
// (sliding window cells), gets "".
func headroomDenial(r sdk.Rule, d sdk.Denial) string {
	exact := r.Algorithm == driver.FixedWindow || driver.Rule{Algorithm: r.Algorithm, Limit: r.Limit}.ExactLog()
	if !exact || d.Shadow || d.Exempt || d.Quiet || d.Override != 0 || d.CostTooHigh || d.Used+d.Cost > d.Limit {
		return ""
	}
	for _, h := range r.Headroom {
		if d.Priority < h.Priority {
			kept := fmt.Sprintf("%d units are", h.Keep)
			if h.Keep == 1 {
				kept = "unit is"
			}
			return fmt.Sprintf("within the limit, but its last %s kept for priority ≥ %d", kept, h.Priority)
		}
	}
	return ""
}

// quietText describes one quiet period: "21:00–08:00 every day",
// "22:00–07:00 from Fri, Sat".
func quietText(q sdk.QuietPeriod) string {
	hm := func(d time.Duration) string {
		return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	s := hm(q.From) + "–" + hm(q.To)
	if len(q.Days) == 0 {
		return s + " every day"
	}
	days := make([]string, len(q.Days))
	for i, d := range q.Days {
		days[i] = d.String()[:3]
	}
	return s + " from " + strings.Join(days, ", ")
}

// classText describes a message class.
func classText(c sdk.Class) string {
	var what []string
	switch {
	case c.AllRules:
		what = append(what, "exempt from every rule")
	case len(c.Rules) > 0:
		what = append(what, "exempt from "+strings.Join(c.Rules, ", "))
	}
	if len(what) > 0 {
		if c.Counted {
			what[0] += ", counted"
		} else {
			what[0] += ", not counted"
		}
	}
	if c.QuietHours {
		what = append(what, "may send in quiet hours")
	}
	return c.Name + ": " + strings.Join(what, "; ")
}

// messagingNote explains p's quiet hours (whether they are on at now, in
// the policy's zone) and classes; nil when it has neither.
func messagingNote(p *sdk.Policy, now time.Time) *views.MessagingNote {
	loc, qs := p.QuietHours()
	cs := p.Classes()
	if loc == nil && len(cs) == 0 {
		return nil
	}
	n := &views.MessagingNote{}
	if loc != nil {
		n.Zone = loc.String()
		for _, q := range qs {
			n.Quiet = append(n.Quiet, quietText(q))
		}
		if end := sdk.QuietEnd(p, loc, now); end.After(now) {
			n.QuietNow = fmt.Sprintf("Quiet hours are on now in %s, until %s local (%s).", loc, end.In(loc).Format("Mon 15:04"), fmtCountdown(end.Sub(now)))
		}
	}
	for _, c := range cs {
		n.Classes = append(n.Classes, classText(c))
	}
	return n
}

// messagingStats sums up st's messaging caps for the fleet view: denials
// for quiet hours, per class what its exemptions decided, per rule its
// exempted and headroom counts; nil when there are none.
func messagingStats(st fleet.Stats) []string {
	var out []string
	if st.QuietDenied > 0 {
		out = append(out, fmt.Sprintf("%d denied for quiet hours", st.QuietDenied))
	}
	for _, c := range st.Classes {
		out = append(out, fmt.Sprintf("class %s: %d passed a rule it is exempt from, %d sent in quiet hours", c.Class, c.Exempted, c.QuietPassed))
	}
	for _, r := range st.Rules {
		if r.Exempted > 0 || r.Headroom > 0 {
			out = append(out, fmt.Sprintf("rule %s: %d would-be denials exempted, %d denials for headroom", r.Rule, r.Exempted, r.Headroom))
		}
	}
	return out
}
