package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
)

// The fleet's traffic: what the Recorders of every service (fleet.Recorder)
// flushed to the backend, read with Config.Fleet's Stats and Announced.

// announcedWithin is how recent an announcement must be to count: a
// service renews its announcements every minute.
const announcedWithin = 10 * time.Minute

// StatsJSON is GET /api/v1/stats: a policy's decisions over the last
// hour, summed over every process recording them.
type StatsJSON struct {
	Policy      string          `json:"policy"`
	From        time.Time       `json:"from"`
	To          time.Time       `json:"to"`
	StepSeconds int64           `json:"step_seconds"`
	Allowed     int64           `json:"allowed"`
	Denied      int64           `json:"denied"`
	Rules       []RuleStatsJSON `json:"rules"`
	// QuietDenied counts the decisions denied for quiet hours; Classes,
	// per message class, the decisions its exemptions decided.
	QuietDenied int64            `json:"quiet_denied"`
	Classes     []ClassStatsJSON `json:"classes"`
}

// ClassStatsJSON is one message class's part of StatsJSON: its decisions
// some rule would have denied but for the class's exemption, and those
// sent in quiet hours it may pass.
type ClassStatsJSON struct {
	Class       string `json:"class"`
	Exempted    int64  `json:"exempted"`
	QuietPassed int64  `json:"quiet_passed"`
}

// RuleStatsJSON is one rule's verdicts in StatsJSON.
type RuleStatsJSON struct {
	Rule      string `json:"rule"`
	Allowed   int64  `json:"allowed"`
	Denied    int64  `json:"denied"`
	NearLimit int64  `json:"near_limit"`
	// Exempted counts the rule's would-be denials a class was exempt
	// from; Headroom its denials for headroom only.
	Exempted int64 `json:"exempted"`
	Headroom int64 `json:"headroom"`
}

// apiStats answers GET /api/v1/stats?policy=NAME with the per-rule
// allowed and denied totals of the last hour, across every process.
func (s *Server) apiStats(c echo.Context) error {
	name := c.QueryParam("policy")
	p := s.snap().byName[name]
	if p == nil {
		return echo.NewHTTPError(http.StatusNotFound, "no such policy")
	}
	st, err := s.cfg.Fleet.Stats(c.Request().Context(), p, time.Hour)
	if errors.Is(err, errors.ErrUnsupported) {
		return echo.NewHTTPError(http.StatusNotImplemented, "the backend keeps no statistics")
	}
	if err != nil {
		return err
	}
	out := StatsJSON{Policy: st.Policy, From: st.From.UTC(), To: st.To.UTC(), StepSeconds: int64(st.Step / time.Second),
		Allowed: st.Allowed, Denied: st.Denied, Rules: make([]RuleStatsJSON, 0, len(st.Rules)),
		QuietDenied: st.QuietDenied, Classes: make([]ClassStatsJSON, 0, len(st.Classes))}
	for _, c := range st.Classes {
		out.Classes = append(out.Classes, ClassStatsJSON{Class: c.Class, Exempted: c.Exempted, QuietPassed: c.QuietPassed})
	}
	for _, r := range st.Rules {
		out.Rules = append(out.Rules, RuleStatsJSON{Rule: r.Rule, Allowed: r.Allowed, Denied: r.Denied, NearLimit: r.NearLimit, Exempted: r.Exempted, Headroom: r.Headroom})
	}
	return c.JSON(http.StatusOK, out)
}

// maxChartPoints bounds the points of a chart's line: longer series are
// summed into wider buckets (24 h of 1 min buckets: 4 min per point).
const maxChartPoints = 360

// chart lays out series as a Width×Height polyline pair (y grows down),
// and, when ev was sampled, a third line of the keys evicted in each
// bucket (matched by the bucket's start), on the same axis.
func chart(title string, pts []fleet.StatsPoint, step time.Duration, w, h int, ev *fleet.Evictions) views.Chart {
	span := step * time.Duration(len(pts))
	var evicted []int64 // per point of pts; nil: not sampled
	if ev != nil && ev.Sampled && ev.Step == step {
		at := make(map[int64]int64, len(ev.Series))
		for _, p := range ev.Series {
			at[p.At.Unix()] = p.Evicted
		}
		evicted = make([]int64, len(pts))
		for i, p := range pts {
			evicted[i] = at[p.At.Unix()]
		}
	}
	if k := (len(pts) + maxChartPoints - 1) / maxChartPoints; k > 1 { // sum k buckets per point
		merged := make([]fleet.StatsPoint, 0, maxChartPoints)
		var mergedEv []int64
		for i := 0; i < len(pts); i += k {
			m := fleet.StatsPoint{At: pts[i].At}
			for _, p := range pts[i:min(i+k, len(pts))] {
				m.Allowed += p.Allowed
				m.Denied += p.Denied
				m.NearLimit += p.NearLimit
			}
			merged = append(merged, m)
			if evicted != nil {
				var e int64
				for _, v := range evicted[i:min(i+k, len(pts))] {
					e += v
				}
				mergedEv = append(mergedEv, e)
			}
		}
		pts, step, evicted = merged, step*time.Duration(k), mergedEv
	}
	c := views.Chart{Title: title, Width: w, Height: h, StepNote: fmtWindow(step) + " buckets"}
	for i, p := range pts {
		c.Max = max(c.Max, p.Allowed, p.Denied)
		c.AllowedSum += p.Allowed
		c.DeniedSum += p.Denied
		if evicted != nil {
			c.Max = max(c.Max, evicted[i])
			c.EvictedSum += evicted[i]
		}
	}
	if len(pts) > 0 {
		c.From = fmtWindow(span) + " ago"
		c.To = "now"
	}
	top := max(c.Max, 1)
	line := func(v func(fleet.StatsPoint) int64) string {
		var b strings.Builder
		for i, p := range pts {
			x := 0.0
			if len(pts) > 1 {
				x = float64(i) * float64(w) / float64(len(pts)-1)
			}
			y := float64(h) - float64(v(p))*float64(h-2)/float64(top) - 1
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(x, 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
		}
		return b.String()
	}
	c.Allowed = line(func(p fleet.StatsPoint) int64 { return p.Allowed })
	c.Denied = line(func(p fleet.StatsPoint) int64 { return p.Denied })
	if evicted != nil {
		i := -1
		c.Evicted = line(func(fleet.StatsPoint) int64 { i++; return evicted[i] })
	}
	return c
}

// overviewTop is how many denied subjects the overview lists per policy.
const overviewTop = 10

// fleetView reads the statistics and announcements for the overview.
func (s *Server) fleetView(ctx context.Context) views.FleetView {
	var v views.FleetView
	lim := s.cfg.Fleet
	// The servers' evictions, charted beside every policy's decisions: read
	// once per window. Not sampled, or unreadable: the charts go without.
	var evs [2]*fleet.Evictions
	for i, w := range []time.Duration{time.Hour, 24 * time.Hour} {
		ev, err := lim.Evictions(ctx, w)
		switch {
		case err == nil:
			evs[i] = &ev
		case !errors.Is(err, errors.ErrUnsupported):
			s.warn.Warn("overview-evictions", "overview: reading evictions", "err", err)
		}
	}
	for _, p := range s.snap().order {
		hour, err := lim.Stats(ctx, p, time.Hour)
		if err == nil {
			var day fleet.Stats
			day, err = lim.Stats(ctx, p, 24*time.Hour)
			if err == nil {
				v.Policies = append(v.Policies, s.fleetPolicy(p, hour, day, evs[0], evs[1]))
				continue
			}
		}
		if errors.Is(err, errors.ErrUnsupported) {
			v.Error = "The backend keeps no statistics: the fleet's traffic is not recorded."
		} else {
			// The error may name backend addresses: the log gets it, viewers do not.
			s.warn.Warn("overview-stats", "overview: reading statistics", "err", err)
			v.Error = "Statistics could not be read: the backend failed (the console's log has the error)."
		}
		v.Policies = nil
		return v
	}
	anns, err := lim.Announced(ctx, announcedWithin)
	var bad *fleet.MalformedError
	switch {
	case errors.As(err, &bad):
		// Some fields no recorder wrote: the others still count.
		if s.malformed.first(err.Error()) {
			s.log.Warn("overview: skipped malformed announcements (logged once)", "err", err)
		}
		v.Warnings = append(v.Warnings, fmt.Sprintf("%s in the backend could not be read and %s skipped (the console's log names the keys); the other services' announcements are shown.",
			views.Count(bad.Fields, "announcement", "announcements"), views.Plural(bad.Fields, "was", "were")))
	case err != nil:
		s.warn.Warn("overview-announced", "overview: reading announced policies", "err", err)
		v.Warnings = append(v.Warnings, "Announced policies could not be read: the backend failed (the console's log has the error).")
		return v
	}
	announced := map[string]bool{}
	old := superseded(anns)
	for i, a := range anns {
		if old[i] {
			continue // its service announced a newer version since
		}
		announced[a.Policy] = true
		ver := ""
		if a.Version > 0 {
			ver = fmt.Sprintf(" version %d", a.Version)
		}
		v.Announced = append(v.Announced, fmt.Sprintf("%s%s (%s, last seen %s)", a.Policy, ver, views.Count(len(a.Rules), "rule", "rules"), a.LastSeen.Local().Format("15:04:05")))
		if running := s.snap().version; running > 0 {
			switch {
			case a.Version == 0:
				v.Warnings = append(v.Warnings, fmt.Sprintf("A service runs policy %s from a policy file, not from the policy store (this console runs store version %d): it does not follow the store's changes.", a.Policy, running))
			case a.Version < running:
				v.Warnings = append(v.Warnings, fmt.Sprintf("A service runs policy %s at store version %d, behind this console's version %d: it has not picked up the latest apply (a watching service does within 2 s).", a.Policy, a.Version, running))
			case a.Version > running:
				v.Warnings = append(v.Warnings, fmt.Sprintf("A service runs policy %s at store version %d, ahead of this console's version %d.", a.Policy, a.Version, running))
			}
		}
		p := s.snap().byName[a.Policy]
		if p == nil {
			v.Warnings = append(v.Warnings, fmt.Sprintf("A service runs policy %s, which the console's policy file lacks: its traffic is not shown.", a.Policy))
			continue
		}
		if d := fleet.AnnouncementOf(p).Diff(a); len(d) > 0 {
			v.Warnings = append(v.Warnings, fmt.Sprintf("A service runs policy %s differently from the console's policy file (here: the console; there: the service): %s. Subject pages read the console's keys, so they may show zeros for subjects the service capped: load the same policy file as your services.", a.Policy, strings.Join(d, "; ")))
		}
	}
	for i := range v.Policies {
		v.Policies[i].RecordedPolicy = announced[v.Policies[i].Name]
	}
	return v
}

func (s *Server) fleetPolicy(p *sdk.Policy, hour, day fleet.Stats, evHour, evDay *fleet.Evictions) views.FleetPolicy {
	fp := views.FleetPolicy{
		Name:        p.Name(),
		Hour:        chart("Last hour", hour.Series, hour.Step, 600, 120, evHour),
		Day:         chart("Last 24 h", day.Series, day.Step, 600, 120, evDay),
		Allowed1h:   hour.Allowed,
		Denied1h:    hour.Denied,
		NoTraffic:   day.Allowed+day.Denied == 0,
		DeniedShare: "—",
	}
	if tot := hour.Allowed + hour.Denied; tot > 0 {
		fp.DeniedShare = fmt.Sprintf("%.0f%%", 100*float64(hour.Denied)/float64(tot))
	}
	for _, r := range hour.Rules {
		fp.NearLimit1h += r.NearLimit
		rc := chart(r.Rule, r.Series, hour.Step, 300, 40, nil)
		fp.Rules = append(fp.Rules, views.FleetRule{Name: r.Rule, Allowed: r.Allowed, Denied: r.Denied, NearLimit: r.NearLimit, Chart: rc, Exempted: r.Exempted, Headroom: r.Headroom})
	}
	fp.Messaging = messagingStats(hour)
	shard := p.ShardBy()
	for _, d := range hour.TopDenied {
		if len(fp.TopDenied) == overviewTop {
			break
		}
		subj := d.Subject(p)
		if subj == nil {
			continue
		}
		vals := make([]views.Field, len(shard))
		for i, dim := range shard {
			vals[i] = views.Field{Name: dim, Value: subj[dim]}
		}
		fp.TopDenied = append(fp.TopDenied, views.TopSubject{Values: vals, URL: "/subject?" + subjectQuery(p.Name(), subj), Count: d.Count})
	}
	return fp
}

// onceSet remembers, up to onceMax of them, the messages already
// logged, so that each is logged once however often the page is read.
type onceSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

const onceMax = 64

// first reports whether msg is new (and remembers it).
func (o *onceSet) first(msg string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[msg] {
		return false
	}
	if o.seen == nil || len(o.seen) >= onceMax {
		o.seen = map[string]bool{}
	}
	o.seen[msg] = true
	return true
}
