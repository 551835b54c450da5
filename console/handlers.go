package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// describeTTL is how long the backend's description is cached;
// describeErrTTL how long a failure to describe is (an outage shows at
// once, and goes away as soon as the backend answers again: see
// backendAnswered).
const (
	describeTTL    = 30 * time.Second
	describeErrTTL = 2 * time.Second
)

type describeCache struct {
	mu   sync.Mutex
	at   time.Time
	desc driver.Description
	err  error
}

// describe returns the backend's description, cached for describeTTL.
func (s *Server) describe(ctx context.Context) (driver.Description, error) {
	dc := &s.descCache
	dc.mu.Lock()
	defer dc.mu.Unlock()
	now := s.now()
	ttl := describeTTL
	if dc.err != nil {
		ttl = describeErrTTL
	}
	if !dc.at.IsZero() && now.Sub(dc.at) < ttl {
		return dc.desc, dc.err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	dc.desc, dc.err = s.cfg.Admin.Describe(ctx)
	dc.at = now
	if dc.err != nil && !errors.Is(dc.err, errors.ErrUnsupported) {
		s.warn.Warn("describe", "console: backend did not describe itself", "err", dc.err)
	}
	return dc.desc, dc.err
}

// backendAnswered forgets a cached failure to describe the backend: it
// has just answered a request, so the overview must not show the outage
// any longer.
func (s *Server) backendAnswered() {
	dc := &s.descCache
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.err != nil {
		dc.at = time.Time{}
	}
}

func (s *Server) policyNames() []string {
	order := s.snap().order
	names := make([]string, len(order))
	for i, p := range order {
		names[i] = p.Name()
	}
	return names
}

// policyParam returns the policy named by v, the first policy when v is
// empty, or a 404.
func (s *Server) policyParam(v string) (*sdk.Policy, error) {
	ps := s.snap()
	if v == "" {
		if len(ps.order) == 0 {
			return nil, echo.NewHTTPError(http.StatusServiceUnavailable, "no policies are in force")
		}
		return ps.order[0], nil
	}
	p, ok := ps.byName[v]
	if !ok {
		return nil, echo.NewHTTPError(http.StatusNotFound, "no such policy")
	}
	return p, nil
}

func (s *Server) overview(c echo.Context) error {
	v := views.OverviewView{Page: s.page(c, "overview"), Live: s.overviewLiveView()}
	v.Title = "Overview"
	v.Fleet = s.fleetView(c.Request().Context())
	desc, err := s.describe(c.Request().Context())
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		v.Backend.Error = "This backend does not describe itself."
	case err != nil:
		// The error names addresses: it is in the log, not on the page.
		v.Backend.Error = "The backend did not describe itself: " + backendUnavailable + "."
	default:
		v.Backend = backendView(desc)
	}
	v.Version = s.snap().version
	v.VersionNote = s.versionNote(c.Request().Context(), v.Version)
	for _, p := range s.snap().order {
		ps := views.PolicySummary{
			Name:      p.Name(),
			Failure:   failure(p),
			Dims:      strings.Join(p.Dimensions(), ", "),
			ShardBy:   strings.Join(p.ShardBy(), ", "),
			LookupURL: "/subject?" + subjectQuery(p.Name(), nil),
		}
		for _, r := range p.Rules() {
			line := fmt.Sprintf("%s: %d / %s", r.Name, shownLimit(r), ruleWindow(r))
			if r.Algorithm == driver.GCRA {
				line += fmt.Sprintf(" (GCRA %d per %s, burst %d)", r.Limit, fmtWindow(r.Window), r.Burst)
			}
			if r.Shadow {
				line += " (shadow: never denies)"
			}
			ps.Rules = append(ps.Rules, line)
		}
		v.Policies = append(v.Policies, ps)
	}
	return render(c, http.StatusOK, views.OverviewPage(v))
}

func (s *Server) overviewLive(c echo.Context) error {
	return render(c, http.StatusOK, views.OverviewLiveBody(s.overviewLiveView()))
}

func (s *Server) overviewLiveView() views.OverviewLive {
	live := views.OverviewLive{URL: "/live/overview", At: fmtTime(s.now())}
	for _, p := range s.snap().order {
		r := s.metrics.Rates(p.Name())
		row := views.RateRow{
			Policy:        p.Name(),
			AllowedPerSec: fmtRate(r.AllowedPerSec),
			DeniedPerSec:  fmtRate(r.DeniedPerSec),
			Allowed:       r.Allowed,
			Denied:        r.Denied,
			Errors:        r.Error,
			Degraded:      r.Degraded,
			DeniedShare:   "—",
		}
		if tot := r.Allowed + r.Denied; tot > 0 {
			row.DeniedShare = fmt.Sprintf("%.0f%%", 100*float64(r.Denied)/float64(tot))
		}
		live.Rates = append(live.Rates, row)
	}
	return live
}

func backendView(d driver.Description) views.BackendView {
	b := views.BackendView{Name: d.Name, Target: d.Target, Notes: d.Notes, Warnings: d.Warnings}
	for _, m := range d.Memory {
		row := views.MemoryRow{Node: m.Node, Evicts: m.Evicts || !m.Known}
		switch {
		case !m.Known:
			row.MaxMemory, row.Policy, row.EvictedKeys, row.Verdict = "?", "?", "?", "unknown: "+m.Unknown
		default:
			row.MaxMemory, row.Policy, row.EvictedKeys = "0 (no limit)", m.Policy, strconv.FormatInt(m.EvictedKeys, 10)
			if m.MaxMemory > 0 {
				row.MaxMemory = fmtBytes(m.MaxMemory)
			}
			row.Verdict = "never evicts"
			if m.Evicts {
				row.Verdict = "may evict freqcap's keys"
			}
		}
		b.Memory = append(b.Memory, row)
	}
	algs := make([]driver.Algorithm, 0, len(d.Strategies))
	for a := range d.Strategies {
		algs = append(algs, a)
	}
	slices.Sort(algs)
	for _, a := range algs {
		st := d.Strategies[a]
		b.Strategies = append(b.Strategies, views.StrategyRow{Algorithm: a.String(), Name: st.Name, Reason: st.Reason})
	}
	return b
}

func failure(p *sdk.Policy) string {
	if p.FailOpen() {
		return "open"
	}
	return "closed"
}

// subject is the lookup page: the form, and for the subject given, each
// rule's state, the denial trail and the audit log.
func (s *Server) subject(c echo.Context) error {
	p, err := s.policyParam(c.QueryParam("policy"))
	if err != nil {
		return err
	}
	subj, fields := subjectFrom(p, c.QueryParam)
	v := views.SubjectView{
		Page:     s.page(c, "subject"),
		Policies: s.policyNames(),
		Policy:   p.Name(),
		Fields:   fields,
		Query:    subjectQuery(p.Name(), subj),
		Looked:   len(subj) > 0,
		CanReset: identityOf(c).Role >= RoleAdmin,
		FPDims:   fingerprintDims(p),
	}
	if d := c.QueryParam("fp"); slices.Contains(v.FPDims, d) && subj[d] != "" {
		v.FPDone = d
	}
	for _, f := range fields {
		if f.Value != "" {
			v.Given = append(v.Given, f)
		}
	}
	if v.Looked {
		// This subject's entries: those of the same shard values (a reset
		// of the user alone concerns every content of theirs).
		shard := sdk.Subject{}
		for _, d := range p.ShardBy() {
			if subj[d] != "" {
				shard[d] = subj[d]
			}
		}
		entries := s.audit.Filter(AuditFilter{Policy: p.Name(), Subject: shard})
		if len(entries) > subjectAuditRows {
			entries = entries[:subjectAuditRows]
		}
		v.Audit = auditRows(entries)
		v.AuditURL = "/audit?" + subjectQuery(p.Name(), shard)
	}
	v.Title = "Subject lookup"
	switch c.QueryParam("done") {
	case "reset":
		v.Notice = "Subject reset: its counters start from zero. The denial trail is kept; the reset is in the audit log below."
	case "reset-rules":
		if exact := planReset(p, subj).exact; len(exact) > 0 {
			v.Notice = "Reset " + strings.Join(exact, ", ") + " for these values: their counters start from zero; every other rule's counters are kept. The denial trail is kept; the reset is in the audit log below."
		}
	}
	switch c.QueryParam("done") {
	case "override-set":
		v.Notice = "Override #" + c.QueryParam("id") + " set; it is in the audit log below."
	case "override-deleted":
		v.Notice = "Override #" + c.QueryParam("id") + " deleted; the deletion is in the audit log below."
	}
	status := http.StatusOK
	if v.Looked {
		v.Live = s.subjectLiveView(c.Request().Context(), p, subj, v.CanReset)
		v.Overrides = s.overridesView(c.Request().Context(), p, subj, v.CanReset)
		v.Person = s.subjectPersonView(c.Request().Context(), p, subj, v.CanReset, v.Query, c.QueryParam("done"))
		if !v.Live.Unavailable && v.Live.Error == "" {
			v.Values = s.valuesViews(c.Request().Context(), p, subj, c.QueryParam("set"), c.QueryParam("cursor"))
		}
		switch {
		case v.Live.Unavailable:
			v.Error, status = v.Live.Error, http.StatusServiceUnavailable
		case v.Live.Error != "":
			v.Error, status = v.Live.Error, http.StatusBadRequest
		}
	}
	return render(c, status, views.SubjectPage(v))
}

// maxFingerprintText bounds the fingerprint helper's text, in bytes (the
// form body is bounded by maxBody too).
const maxFingerprintText = 60000

// fingerprint is POST /fingerprint, the fingerprint helper: it computes
// sdk.Fingerprint of the text typed and sends the browser to the subject
// page with that value in the chosen dimension, beside the subject's other
// values. The text is posted, so that it never enters a URL or a log; it
// is not kept.
func (s *Server) fingerprint(c echo.Context) error {
	p, err := s.policyParam(c.FormValue("policy"))
	if err != nil {
		return err
	}
	dim := c.FormValue("fp_dim")
	if !slices.Contains(fingerprintDims(p), dim) {
		return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("policy %q has no such dimension taking fingerprints", p.Name()))
	}
	text := c.FormValue("fp_text")
	switch {
	case text == "":
		return echo.NewHTTPError(http.StatusBadRequest, "enter the text to fingerprint")
	case len(text) > maxFingerprintText:
		return echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("the text is longer than %d bytes", maxFingerprintText))
	}
	subj, _ := subjectFrom(p, c.FormValue)
	subj[dim] = sdk.Fingerprint(text)
	return c.Redirect(http.StatusSeeOther, "/subject?"+subjectQuery(p.Name(), subj)+"&fp="+url.QueryEscape(dim))
}

// subjectAuditRows is how many audit entries the subject page shows.
const subjectAuditRows = 20

func (s *Server) subjectLive(c echo.Context) error {
	p, err := s.policyParam(c.QueryParam("policy"))
	if err != nil {
		return err
	}
	subj, _ := subjectFrom(p, c.QueryParam)
	canReset := identityOf(c).Role >= RoleAdmin
	return render(c, http.StatusOK, views.SubjectLiveBody(s.subjectLiveView(c.Request().Context(), p, subj, canReset)))
}

// subjectLiveView inspects subj under p. Input errors are shown in the
// view; backend errors too (the page stays useful for the other parts).
func (s *Server) subjectLiveView(ctx context.Context, p *sdk.Policy, subj sdk.Subject, canReset bool) views.SubjectLive {
	live := views.SubjectLive{URL: "/live/subject?" + subjectQuery(p.Name(), subj), Refreshed: fmtTime(s.now()), CanReset: canReset}
	if err := checkSubject(subj); err != nil {
		live.Error = err.Error()
		return live
	}
	for _, d := range p.ShardBy() {
		if subj[d] == "" {
			live.Error = fmt.Sprintf("Enter a value for %q: every rule of policy %q is keyed by it.", d, p.Name())
			return live
		}
	}
	ins, err := s.cfg.Admin.Inspect(ctx, p, subj)
	if err != nil {
		if errors.Is(err, sdk.ErrInvalidSubject) {
			live.Error = err.Error() // sdk errors never contain subject values
			return live
		}
		s.warn.Warn("inspect", "console: inspect failed", "policy", p.Name(), "err", err)
		live.Error = "The backend could not answer: " + backendUnavailable + "."
		live.Unavailable = true
		return live
	}
	s.backendAnswered()
	desc, derr := s.describe(ctx)
	live.Backend = desc.Name
	layout := s.cfg.Admin.KeyLayout(p, subj)
	keys := ruleKeysOf(layout)
	rules := map[string]sdk.Rule{}
	for _, r := range p.Rules() {
		rules[r.Name] = r
	}
	live.Allowed = true
	var retry time.Duration
	// A block or an exempt decides whatever the rules say.
	if o := s.deciding(ctx, p, subj, ins.At); o != nil {
		n := &views.OverrideNote{ID: o.ID, Kind: o.Kind.String(), Reason: o.Reason, Counted: o.Counted}
		if !o.Until.IsZero() {
			n.Until, n.RetryIn = fmtTime(o.Until), fmtCountdown(o.Until.Sub(ins.At))
		}
		live.Override = n
	}
	limited := s.limitedBy(ctx, p, subj, ins.At)
	live.Messaging = messagingNote(p, ins.At)
	for _, rd := range ins.Rules {
		r := rules[rd.Rule]
		row := views.RuleRow{
			Rule:      rd.Rule,
			Algorithm: rd.Algorithm.String(),
			Detail:    algorithmDetail(r),
			Dims:      strings.Join(r.Dimensions, ", "),
			Used:      rd.Used,
			Limit:     rd.Limit,
			Remaining: rd.Remaining,
			ResetIn:   fmtCountdown(rd.ResetAfter),
			RetryIn:   fmtCountdown(rd.RetryAfter),
			Allowed:   rd.Allowed,
			Strategy:  "—",
			ResetNote: cellNote(r, rd.ResetAfter),
			Shadow:    rd.Shadow,
			Before:    rd.Before,
			LimitBy:   limited[rd.Rule],
			Headroom:  headroomText(r),
		}
		if !rd.Allowed {
			row.RetryNote = cellNote(r, rd.RetryAfter)
		}
		if row.ResetNote != "" || row.RetryNote != "" {
			live.CellsNote = cellsNote
		}
		if derr == nil {
			if st, ok := desc.Strategies[rd.Algorithm]; ok {
				row.Strategy, row.Reason = st.Name, st.Reason
			}
		}
		if rd.Strategy != "" && rd.Strategy != row.Strategy {
			// What the backend ran for this very rule (e.g. a GCRA rule
			// redis-cell cannot express stays on plain Lua).
			row.Strategy, row.Reason = rd.Strategy, ""
		}
		if k, ok := keys[rd.Rule]; ok {
			row.Key, row.GroupKey = k.own, k.set
		}
		if rd.Shadow {
			// Tried, never denying: not part of the verdict.
			if !rd.Allowed {
				live.Shadow = append(live.Shadow, rd.Rule)
			}
			row.RetryIn = fmtCountdown(rd.RetryAfter)
			live.Rules = append(live.Rules, row)
			continue
		}
		live.Evaluated = append(live.Evaluated, rd.Rule)
		if !rd.Allowed {
			live.Allowed = false
			live.Blocking = append(live.Blocking, rd.Rule)
			if rd.RetryAfter > retry {
				live.RetryNote = ""
				if row.RetryNote != "" {
					live.RetryNote = rd.Rule + ": " + row.RetryNote
				}
			}
			retry = max(retry, rd.RetryAfter)
		}
		live.Rules = append(live.Rules, row)
	}
	live.RetryIn = fmtCountdown(retry)
	live.Skipped = ins.Skipped
	live.TrailKey, live.ReservationKey = layout.Trail, layout.Reservations
	for _, r := range p.Rules() {
		if !slices.Contains(ins.Skipped, r.Name) {
			continue
		}
		for _, d := range r.Dimensions {
			if subj[d] == "" && !slices.Contains(live.Missing, d) {
				live.Missing = append(live.Missing, d)
			}
		}
	}
	live.Blocked = s.blockedFor(ctx, p, subj, ins, canReset)
	live.Unrecorded = unrecorded(ins)
	live.Denials = groupDenials(p, subj, ins.Denials, ins.At, canReset)
	live.TrailNote = trailNote(ins)
	return live
}

func (s *Server) policiesPage(c echo.Context) error {
	ctx := c.Request().Context()
	ps := s.snap()
	v := views.PoliciesView{Page: s.page(c, "policies"), Version: ps.version, Editor: s.cfg.Store != nil}
	v.VersionNote = s.versionNote(ctx, ps.version)
	v.Title = "Policies"
	desc, derr := s.describe(ctx)
	for _, p := range ps.order {
		// Placeholder values show the key pattern: <user> passes the key
		// escaping unchanged.
		ph := sdk.Subject{}
		for _, d := range p.Dimensions() {
			ph[d] = "<" + d + ">"
		}
		layout := s.cfg.Admin.KeyLayout(p, ph)
		keys := ruleKeysOf(layout)
		pd := views.PolicyDetail{
			Name:      p.Name(),
			Failure:   failure(p),
			Dims:      strings.Join(p.Dimensions(), ", "),
			ShardBy:   strings.Join(p.ShardBy(), ", "),
			LookupURL: "/subject?" + subjectQuery(p.Name(), nil),
		}
		for _, r := range p.Rules() {
			row := views.PolicyRuleRow{
				Name:      r.Name,
				Algorithm: r.Algorithm.String(),
				Limit:     strconv.FormatInt(shownLimit(r), 10),
				Window:    ruleWindow(r),
				Detail:    algorithmDetail(r),
				Dims:      strings.Join(r.Dimensions, ", "),
				Strategy:  "—",
				Shadow:    r.Shadow,
			}
			if k, ok := keys[r.Name]; ok {
				row.Key, row.GroupKey = k.own, k.set
			}
			if derr == nil {
				if st, ok := desc.Strategies[evaluatedAs(r)]; ok {
					row.Strategy = st.Name
				}
			}
			pd.Rules = append(pd.Rules, row)
		}
		pd.Shadow, pd.Enforced, pd.ShadowError = s.shadowView(ctx, p)
		pd.TrailKey, pd.ReservationKey = layout.Trail, layout.Reservations
		v.Policies = append(v.Policies, pd)
	}
	return render(c, http.StatusOK, views.PoliciesPage(v))
}

// resetTarget reads the policy and subject of a reset request and checks
// that the subject gives the policy's shard dimensions.
func (s *Server) resetTarget(get func(string) string) (*sdk.Policy, sdk.Subject, []views.Field, error) {
	p, err := s.policyParam(get("policy"))
	if err != nil {
		return nil, nil, nil, err
	}
	subj, fields := subjectFrom(p, get)
	if err := checkSubject(subj); err != nil {
		return nil, nil, nil, err
	}
	for _, d := range p.ShardBy() {
		if subj[d] == "" {
			return nil, nil, nil, echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("a reset needs a value for %q", d))
		}
	}
	return p, subj, fields, nil
}

// resetRules splits p's rules into those subj gives the dimensions of
// (they are reset) and the others (left alone).
func resetRules(p *sdk.Policy, subj sdk.Subject) (reset, keep []string) {
	for _, r := range p.Rules() {
		ok := true
		for _, d := range r.Dimensions {
			if subj[d] == "" {
				ok = false
			}
		}
		if ok {
			reset = append(reset, r.Name)
		} else {
			keep = append(keep, r.Name)
		}
	}
	return reset, keep
}

// resetPlan is what a reset of a subject under a policy can do.
type resetPlan struct {
	// all are the rules the subject gives every dimension of, keep the
	// others: a whole reset (Admin.Reset) deletes all.
	all, keep []string
	// exact are the rules keyed by exactly the dimensions the subject
	// gives (a user and content pair's own rules): what
	// Admin.ResetRules deletes when the page resets "this pair".
	exact []string
}

func planReset(p *sdk.Policy, subj sdk.Subject) resetPlan {
	var pl resetPlan
	pl.all, pl.keep = resetRules(p, subj)
	var given []string
	for _, d := range p.Dimensions() {
		if subj[d] != "" {
			given = append(given, d)
		}
	}
	pl.exact = p.SameDimensions(given...)
	return pl
}

// widerNotes says, for the rules a whole reset of subj deletes beyond
// exact, what that means: one sentence per set of dimensions, naming the
// dimensions the rules are not keyed by, whose every value they count.
func widerNotes(p *sdk.Policy, subj sdk.Subject, all, exact []string) []string {
	var given []string
	for _, d := range p.Dimensions() {
		if subj[d] != "" {
			given = append(given, d)
		}
	}
	var notes []string
	done := map[string]bool{}
	for _, r := range p.Rules() {
		if !slices.Contains(all, r.Name) || slices.Contains(exact, r.Name) || done[r.Name] {
			continue
		}
		same := p.SameDimensions(r.Dimensions...)
		for _, n := range same {
			done[n] = true
		}
		var lacks []string
		for _, d := range given {
			if !slices.Contains(r.Dimensions, d) {
				lacks = append(lacks, d)
			}
		}
		verb, them, their := "is", "it", "its"
		if len(same) > 1 {
			verb, them, their = "are", "them", "their"
		}
		notes = append(notes, fmt.Sprintf("%s %s keyed by %s only, not by %s: resetting %s lifts %s limits for every %s of this %s, not only for the values above.",
			strings.Join(same, " and "), verb, strings.Join(r.Dimensions, " and "), strings.Join(lacks, " or "),
			them, their, strings.Join(lacks, " and "), strings.Join(r.Dimensions, " and ")))
	}
	return notes
}

// resetConfirm shows what a reset will do and asks for confirmation. Where
// the subject gives more dimensions than the shard's (a user and a
// content), it offers to reset the rules keyed by exactly those (the
// pair's own) and, separately, every rule the subject gives the
// dimensions of, saying which rules that adds and that they count every
// other value too.
func (s *Server) resetConfirm(c echo.Context) error {
	p, subj, fields, err := s.resetTarget(c.QueryParam)
	if err != nil {
		return err
	}
	given := fields[:0:0]
	for _, f := range fields {
		if f.Value != "" {
			given = append(given, f)
		}
	}
	pl := planReset(p, subj)
	v := views.ResetView{
		Page:    s.page(c, "subject"),
		Policy:  p.Name(),
		Fields:  given,
		Rules:   pl.all,
		Keep:    pl.keep,
		Keys:    s.resetKeys(p, subj, nil),
		BackURL: "/subject?" + subjectQuery(p.Name(), subj),
	}
	v.Title = "Reset subject"
	if len(pl.exact) < len(pl.all) {
		v.Title = "Reset"
		v.Wider = widerNotes(p, subj, pl.all, pl.exact)
		if len(pl.exact) > 0 {
			v.Exact = pl.exact
			v.ExactKeys = s.resetKeys(p, subj, pl.exact)
			for _, r := range pl.all {
				if !slices.Contains(pl.exact, r) {
					v.ExactKeeps = append(v.ExactKeeps, r)
				}
			}
		}
	}
	return render(c, http.StatusOK, views.ResetPage(v))
}

// reset carries out a confirmed reset and records it in the audit log:
// the rules the form names (rules=a,b: Admin.ResetRules), or without
// that field every rule the subject gives the dimensions of.
func (s *Server) reset(c echo.Context) error {
	p, subj, _, err := s.resetTarget(c.FormValue)
	if err != nil {
		return err
	}
	if c.FormValue("confirm") != "yes" {
		return echo.NewHTTPError(http.StatusBadRequest, "the reset was not confirmed")
	}
	var only []string
	done := "reset"
	if form, err := c.FormParams(); err == nil && form.Has("rules") {
		only, done = []string{}, "reset-rules"
		for _, r := range strings.Split(form.Get("rules"), ",") {
			if r = strings.TrimSpace(r); r != "" {
				only = append(only, r)
			}
		}
	}
	if _, _, err := s.doReset(c, p, subj, only); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/subject?"+subjectQuery(p.Name(), subj)+"&done="+done)
}

// auditEntry starts an audit entry for an action of c's identity (p nil:
// an action on the policy store as a whole).
func (s *Server) auditEntry(c echo.Context, action string, p *sdk.Policy, subj sdk.Subject) AuditEntry {
	id := identityOf(c)
	e := AuditEntry{
		At:      s.now(),
		Actor:   id.String(),
		Name:    id.Name,
		Role:    id.Role.String(),
		Via:     id.Method,
		Action:  action,
		Subject: subj,
		Remote:  c.RealIP(),
	}
	if p != nil { // nil: the action concerns the whole policy store
		e.Policy = p.Name()
	}
	return e
}

// doReset resets subj under p and records it in the audit log, for the
// form and the API alike: with only nil, every rule subj gives the
// dimensions of and the open reservations (Admin.Reset); else exactly
// the rules only names (Admin.ResetRules: whole sets of dimensions,
// reservations kept). reset and keep name the rules reset and kept, in
// policy order.
func (s *Server) doReset(c echo.Context, p *sdk.Policy, subj sdk.Subject, only []string) (reset, keep []string, err error) {
	ctx := c.Request().Context()
	var rerr error
	if only == nil {
		reset, keep = resetRules(p, subj)
		rerr = s.cfg.Admin.Reset(ctx, p, subj)
	} else {
		rerr = s.cfg.Admin.ResetRules(ctx, p, subj, only...)
		if errors.Is(rerr, sdk.ErrInvalidRule) || errors.Is(rerr, sdk.ErrInvalidSubject) {
			// Nothing was reset: the request named rules it cannot reset.
			// sdk errors never contain subject values.
			return nil, nil, echo.NewHTTPError(http.StatusBadRequest, rerr.Error())
		}
		for _, r := range p.Rules() {
			if slices.Contains(only, r.Name) {
				reset = append(reset, r.Name)
			} else {
				keep = append(keep, r.Name)
			}
		}
	}
	entry := s.auditEntry(c, "reset", p, subj)
	entry.Rules, entry.Outcome = reset, "ok"
	if rerr != nil {
		entry.Outcome = "failed: backend error"
		if errors.Is(rerr, errors.ErrUnsupported) {
			entry.Outcome = "failed: the backend cannot reset"
		}
	}
	if err := s.audit.Record(entry); err != nil {
		// The reset happened (or failed) but could not be recorded: say so
		// loudly rather than pretend all is well.
		return nil, nil, fmt.Errorf("reset of policy %q: recording the audit entry: %w", p.Name(), err)
	}
	if rerr != nil {
		if errors.Is(rerr, errors.ErrUnsupported) {
			return nil, nil, echo.NewHTTPError(http.StatusNotImplemented, "this backend cannot reset subjects")
		}
		return nil, nil, fmt.Errorf("reset of policy %q: %w", p.Name(), rerr)
	}
	s.backendAnswered()
	s.log.Info("console: subject reset", "policy", p.Name(), "actor", entry.Actor, "rules", reset)
	return reset, keep, nil
}

// auditRows are entries as the audit table shows them.
func auditRows(entries []AuditEntry) []views.AuditEntry {
	out := make([]views.AuditEntry, len(entries))
	for i, e := range entries {
		out[i] = views.AuditEntry{
			At: e.At, Actor: e.Actor, Action: e.Action, Policy: e.Policy,
			Subject: e.Subject, Rules: e.Rules, Cost: e.Cost, Outcome: e.Outcome,
			Reason: e.Reason, Detail: e.Detail,
		}
	}
	return out
}

// auditMaxRows is how many entries the audit page shows at most.
const auditMaxRows = 500

// auditPage is GET /audit: the audit log, newest first, filtered by
// policy and subject (the policy's dimensions as parameters), by any
// dimension's value (value=), by person (who=) and by action.
func (s *Server) auditPage(c echo.Context) error {
	f := AuditFilter{
		Policy: c.QueryParam("policy"),
		Value:  c.QueryParam("value"),
		Name:   c.QueryParam("who"),
		Action: c.QueryParam("action"),
	}
	v := views.AuditView{
		Page:     s.page(c, "audit"),
		Policies: s.policyNames(),
		Filter:   views.AuditFilter{Policy: f.Policy, Value: f.Value, Name: f.Name, Action: f.Action},
	}
	v.Title = "Audit log"
	if f.Policy != "" {
		p, err := s.policyParam(f.Policy)
		if err != nil {
			return err
		}
		f.Subject, v.Fields = subjectFrom(p, c.QueryParam)
	}
	if err := checkSubject(sdk.Subject{"value": f.Value, "who": f.Name}); err != nil {
		return err
	}
	all := s.audit.Filter(f)
	v.Matched = len(all)
	if len(all) > auditMaxRows {
		all = all[:auditMaxRows]
	}
	v.Entries = auditRows(all)
	return render(c, http.StatusOK, views.AuditPage(v))
}

// resetKeys lists what a reset deletes: the keys of the rules' sets of
// dimensions (the Redis layout), the rules' own keys (other layouts and
// module strategies) and, for a whole reset (only nil), the reservations'
// key; not the denial trail's, which a reset keeps. With only, the keys
// of those rules alone.
func (s *Server) resetKeys(p *sdk.Policy, subj sdk.Subject, only []string) []string {
	layout := s.cfg.Admin.KeyLayout(p, subj)
	keys := ruleKeysOf(layout)
	pick := func(rule string) bool { return only == nil || slices.Contains(only, rule) }
	var out []string
	for _, r := range p.Rules() {
		if k, ok := keys[r.Name]; ok && pick(r.Name) && !slices.Contains(out, k.set) {
			out = append(out, k.set)
		}
	}
	for _, r := range p.Rules() {
		if k, ok := keys[r.Name]; ok && pick(r.Name) {
			out = append(out, k.own)
		}
	}
	if only != nil || layout.Reservations == "" {
		return out
	}
	return append(out, layout.Reservations)
}

// ruleKey is a rule's own key and its set of dimensions' key.
type ruleKey struct{ own, set string }

// ruleKeysOf maps the name of each rule of l to its keys.
func ruleKeysOf(l sdk.KeyLayout) map[string]ruleKey {
	m := map[string]ruleKey{}
	for _, set := range l.Sets {
		for _, r := range set.Rules {
			m[r.Rule] = ruleKey{own: r.Key, set: set.Key}
		}
	}
	return m
}

// fmtBytes renders n bytes: "3.0 MiB".
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for q := n / unit; q >= unit && exp < 4; q /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
