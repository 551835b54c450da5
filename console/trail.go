package console

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/sdk"
)

// fingerprintDim reports whether dimension d takes fingerprints
// (sdk.Fingerprint of a text) rather than ids: a dimension named
// "content" or ending in "_content". The subject page offers the
// fingerprint helper for such dimensions only.
func fingerprintDim(d string) bool {
	return d == "content" || strings.HasSuffix(d, "_content")
}

// fingerprintDims returns p's dimensions that take fingerprints.
func fingerprintDims(p *sdk.Policy) []string {
	var out []string
	for _, d := range p.Dimensions() {
		if fingerprintDim(d) {
			out = append(out, d)
		}
	}
	return out
}

// maxRecheck is how many distinct value sets from the trail the subject
// page re-checks live with a Peek (one backend call each); blocks beyond
// are shown as the trail has them.
const maxRecheck = 8

// orderedValues returns vals as fields in p's dimension order (values of
// dimensions p no longer has last, sorted).
func orderedValues(p *sdk.Policy, vals map[string]string) []views.Field {
	if len(vals) == 0 {
		return nil
	}
	out := make([]views.Field, 0, len(vals))
	dims := p.Dimensions()
	for _, d := range dims {
		if v, ok := vals[d]; ok {
			out = append(out, views.Field{Name: d, Value: v})
		}
	}
	for _, d := range slices.Sorted(maps.Keys(vals)) {
		if !slices.Contains(dims, d) {
			out = append(out, views.Field{Name: d, Value: vals[d]})
		}
	}
	return out
}

// valuesKey is a canonical text of vals, for grouping.
func valuesKey(vals map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		b.WriteString(strconv.Quote(k))
		b.WriteByte('=')
		b.WriteString(strconv.Quote(vals[k]))
		b.WriteByte(',')
	}
	return b.String()
}

// exact returns subj with vals added: the exact subject a trail entry
// was about. The shard values are subj's.
func exact(p *sdk.Policy, subj sdk.Subject, vals map[string]string) sdk.Subject {
	out := sdk.Subject{}
	for _, d := range p.ShardBy() {
		if v := subj[d]; v != "" {
			out[d] = v
		}
	}
	for _, d := range p.Dimensions() {
		if v, ok := vals[d]; ok && v != "" {
			out[d] = v
		}
	}
	return out
}

// agrees reports whether vals agree with subj on every dimension both
// give.
func agrees(subj sdk.Subject, vals map[string]string) bool {
	for d, v := range vals {
		if sv, ok := subj[d]; ok && sv != v {
			return false
		}
	}
	return true
}

// blockedFor finds, from the trail, the (values, rule) pairs subj is
// still blocked for among the rules the inspection skipped (they need
// dimensions subj lacks), and re-checks up to maxRecheck value sets with
// a Peek of the exact subject: a pair the Peek admits is dropped (reset,
// or freed early), and its retry time is the Peek's. A Peek that fails
// leaves the trail's word. Newest block first.
func (s *Server) blockedFor(ctx context.Context, p *sdk.Policy, subj sdk.Subject, ins sdk.Inspection, canReset bool) []views.Blocked {
	if len(ins.Skipped) == 0 {
		return nil
	}
	type pair struct {
		vals  map[string]string
		rule  string
		until time.Time
		live  bool
	}
	var pairs []*pair
	byKey := map[string]*pair{}
	var sets []map[string]string // distinct value sets, newest first
	seenSet := map[string]bool{}
	for _, d := range ins.Denials {
		if d.Shadow || d.CostTooHigh || len(d.Values) == 0 || !slices.Contains(ins.Skipped, d.Rule) || !agrees(subj, d.Values) {
			continue
		}
		if !d.Until().After(ins.At) {
			continue
		}
		vk := valuesKey(d.Values)
		k := d.Rule + "\x00" + vk
		if x, ok := byKey[k]; ok {
			if d.Until().After(x.until) {
				x.until = d.Until()
			}
			continue
		}
		x := &pair{vals: d.Values, rule: d.Rule, until: d.Until()}
		byKey[k] = x
		pairs = append(pairs, x)
		if !seenSet[vk] {
			seenSet[vk] = true
			sets = append(sets, d.Values)
		}
	}
	// The live re-check: what a request of the exact subject would meet.
	for i, vals := range sets {
		if i == maxRecheck {
			break
		}
		d, err := s.cfg.Limiter.Peek(ctx, p, sdk.Attempt{Subject: exact(p, subj, vals)})
		if err != nil || d.Degraded {
			continue // the trail's word stands
		}
		vk := valuesKey(vals)
		for _, rd := range d.Rules {
			if rd.Shadow || !slices.Contains(ins.Skipped, rd.Rule) {
				continue
			}
			k := rd.Rule + "\x00" + vk
			x := byKey[k]
			switch {
			case x != nil && rd.Allowed:
				x.until = time.Time{} // no longer blocked
				x.live = true
			case x != nil:
				x.until, x.live = d.At.Add(rd.RetryAfter), true
			case !rd.Allowed && !rd.CostTooHigh:
				// Another rule for the same values: blocked too.
				x = &pair{vals: vals, rule: rd.Rule, until: d.At.Add(rd.RetryAfter), live: true}
				byKey[k] = x
				pairs = append(pairs, x)
			}
		}
	}
	var out []views.Blocked
	for _, x := range pairs {
		if !x.until.After(ins.At) {
			continue
		}
		ex := exact(p, subj, x.vals)
		b := views.Blocked{
			Values:  orderedValues(p, x.vals),
			Rule:    x.rule,
			Until:   fmtTime(x.until),
			RetryIn: fmtCountdown(x.until.Sub(ins.At)),
			Live:    x.live,
			URL:     "/subject?" + subjectQuery(p.Name(), ex),
			UntilAt: x.until,
		}
		if canReset {
			b.ResetURL = "/reset?" + subjectQuery(p.Name(), ex)
		}
		if r, ok := ruleNamed(p, x.rule); ok {
			b.RetryNote = cellNote(r, x.until.Sub(ins.At))
		}
		out = append(out, b)
	}
	return out
}

// unrecorded names the skipped rules with a denial still in force in the
// trail whose values were not recorded (entries written before values
// were): the subject may be blocked for values the page cannot name.
func unrecorded(ins sdk.Inspection) []string {
	var out []string
	for _, d := range ins.Denials {
		if !d.Shadow && len(d.Values) == 0 && !d.CostTooHigh && slices.Contains(ins.Skipped, d.Rule) && d.Until().After(ins.At) && !slices.Contains(out, d.Rule) {
			out = append(out, d.Rule)
		}
	}
	return out
}

// groupDenials turns a trail (newest first) into rows, grouping identical
// consecutive denied attempts: an attempt is the entries of one instant
// (one per denying rule), and consecutive attempts with the same entries
// (rule, values, used/limit, cost) become one group, shown once with a
// count and the first and last time.
func groupDenials(p *sdk.Policy, subj sdk.Subject, ds []sdk.Denial, now time.Time, canReset bool) []views.DenialRow {
	type attempt struct {
		ents []sdk.Denial
		sig  string
	}
	var atts []attempt
	for _, d := range ds {
		if n := len(atts); n > 0 && atts[n-1].ents[0].At.Equal(d.At) {
			atts[n-1].ents = append(atts[n-1].ents, d)
			continue
		}
		atts = append(atts, attempt{ents: []sdk.Denial{d}})
	}
	for i := range atts {
		var b strings.Builder
		for _, d := range atts[i].ents {
			fmt.Fprintf(&b, "%s|%d|%d|%d|%v|%v|%d|%v|%v|%s|%d|%s|%s;", d.Rule, d.Used, d.Limit, d.Cost, d.CostTooHigh, d.Shadow, d.Override, d.Exempt, d.Quiet, d.Class, d.Priority, d.Identity, valuesKey(d.Values))
		}
		atts[i].sig = b.String()
	}
	var rows []views.DenialRow
	for i := 0; i < len(atts); {
		j := i + 1
		for j < len(atts) && atts[j].sig == atts[i].sig {
			j++
		}
		// atts[i] is the newest of the group, atts[j-1] the oldest.
		first := atts[j-1].ents[0].At
		for _, d := range atts[i].ents {
			row := views.DenialRow{
				At:          fmtTime(d.At),
				Ago:         fmtAgo(d.At, now),
				Rule:        d.Rule,
				Used:        d.Used,
				Limit:       d.Limit,
				Cost:        d.Cost,
				RetryAfter:  fmtCountdown(d.RetryAfter),
				CostTooHigh: d.CostTooHigh,
				Count:       j - i,
				Values:      orderedValues(p, d.Values),
				Partial:     d.ValuesPartial,
				Shadow:      d.Shadow,
				Override:    d.Override,
				Exempt:      d.Exempt,
				Quiet:       d.Quiet,
				Class:       d.Class,
				Priority:    d.Priority,
				Identity:    d.Identity,
			}
			if (d.Override != 0 || d.Quiet) && d.RetryAfter > 0 {
				row.Until = fmtTime(d.At.Add(d.RetryAfter))
			}
			if row.Count > 1 {
				row.First, row.FirstAgo = fmtTime(first), fmtAgo(first, now)
			}
			if r, ok := ruleNamed(p, d.Rule); ok && !d.CostTooHigh {
				row.RetryNote = cellNote(r, d.RetryAfter)
				row.Headroom = headroomDenial(r, d)
			}
			if len(d.Values) > 0 {
				ex := exact(p, subj, d.Values)
				row.URL = "/subject?" + subjectQuery(p.Name(), ex)
				if canReset && d.Override == 0 { // a reset does not lift a block
					row.ResetURL = "/reset?" + subjectQuery(p.Name(), ex)
				}
			}
			rows = append(rows, row)
		}
		i = j
	}
	return rows
}

// trailNote says how far back the trail goes.
func trailNote(ins sdk.Inspection) string {
	if ins.TrailMax == 0 {
		return "This policy keeps no denial trail."
	}
	keep := fmt.Sprintf("The trail keeps the newest %s, for %s after the last one.", views.Count(ins.TrailMax, "denial", "denials"), fmtWindow(ins.TrailTTL))
	if len(ins.Denials) == 0 {
		return keep
	}
	since := fmtTime(ins.TrailSince())
	if ins.TrailFull {
		return fmt.Sprintf("%s It is full: it goes back to %s only, older denials were dropped.", keep, since)
	}
	return fmt.Sprintf("%s It holds every denial since %s (%s), and there was none in the %s before that.", keep, since, views.Count(len(ins.Denials), "entry", "entries"), fmtWindow(ins.TrailTTL))
}
