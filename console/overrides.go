package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/internal/duration"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Overrider is what the console asks of a Limiter that keeps per-person
// overrides (the subject page's overrides, /api/v1/overrides).
// *sdk.Admin implements it; the console finds it on Config.Admin with
// a type assertion. Without it the subject page says the backend keeps no
// overrides and the API answers 501.
type Overrider interface {
	// SetOverride stores o for subject s (its shard values) under p and
	// returns it with its ID.
	SetOverride(ctx context.Context, p *sdk.Policy, s sdk.Subject, o driver.Override) (driver.Override, error)
	// DeleteOverride removes override id of s under p;
	// sdk.ErrOverrideNotFound when it is not there.
	DeleteOverride(ctx context.Context, p *sdk.Policy, s sdk.Subject, id int64) error
	// Overrides lists s's live overrides under p, by ID.
	Overrides(ctx context.Context, p *sdk.Policy, s sdk.Subject) ([]driver.Override, error)
}

// markedOverrider is the Overrider the console calls, its errors marked
// as the backend's (see markedLimiter).
type markedOverrider struct{ o Overrider }

func (m markedOverrider) SetOverride(ctx context.Context, p *sdk.Policy, s sdk.Subject, o driver.Override) (driver.Override, error) {
	out, err := m.o.SetOverride(ctx, p, s, o)
	return out, marked(err)
}

func (m markedOverrider) DeleteOverride(ctx context.Context, p *sdk.Policy, s sdk.Subject, id int64) error {
	return marked(m.o.DeleteOverride(ctx, p, s, id))
}

func (m markedOverrider) Overrides(ctx context.Context, p *sdk.Policy, s sdk.Subject) ([]driver.Override, error) {
	out, err := m.o.Overrides(ctx, p, s)
	return out, marked(err)
}

// shardOf returns the shard values of subj under p: the person an
// override is kept for.
func shardOf(p *sdk.Policy, subj sdk.Subject) sdk.Subject {
	shard := sdk.Subject{}
	for _, d := range p.ShardBy() {
		if subj[d] != "" {
			shard[d] = subj[d]
		}
	}
	return shard
}

// inputError reports whether err is the sdk refusing input (never a
// subject value in its text), so the console answers 400 with it.
func inputError(err error) bool {
	return errors.Is(err, sdk.ErrInvalidPolicy) || errors.Is(err, sdk.ErrInvalidRule) || errors.Is(err, sdk.ErrInvalidSubject)
}

// overrideInput is an override as a form or the API gives it.
type overrideInput struct {
	Kind    string
	Counted bool
	Limits  map[string]int64
	Until   string // RFC 3339, a duration from now ("2h", "3d"), or "" (never)
	Reason  string
}

// build checks in and returns the override it describes, at now. Errors
// are the HTTP 400s the form and the API show.
func (in overrideInput) build(p *sdk.Policy, now time.Time) (driver.Override, error) {
	var o driver.Override
	k, ok := driver.ParseOverrideKind(in.Kind)
	if !ok {
		return o, badRequest("kind must be exempt, block or limit")
	}
	o.Kind = k
	if k == driver.Exempt {
		o.Counted = in.Counted
	}
	if o.Kind == driver.Limit {
		if len(in.Limits) == 0 {
			return o, badRequest("a limit override needs a limit for at least one rule")
		}
		o.Limits = map[string]int64{}
		for name, lim := range in.Limits {
			if _, ok := ruleNamed(p, name); !ok {
				return o, badRequest(fmt.Sprintf("policy %q has no rule %q", p.Name(), name))
			}
			if lim < 1 || lim > driver.MaxLimit {
				return o, badRequest(fmt.Sprintf("the limit of rule %q must be between 1 and %d", name, driver.MaxLimit))
			}
			o.Limits[name] = lim
		}
	} else if len(in.Limits) > 0 {
		return o, badRequest("only a limit override takes limits")
	}
	until, err := parseUntil(in.Until, now)
	if err != nil {
		return o, err
	}
	o.Until = until
	reason := strings.TrimSpace(in.Reason)
	switch {
	case reason == "":
		return o, badRequest("give a reason: it is kept with the override and in the audit log")
	case len(reason) > driver.MaxOverrideReasonLen:
		return o, badRequest(fmt.Sprintf("the reason is longer than %d bytes", driver.MaxOverrideReasonLen))
	case !utf8.ValidString(reason) || strings.ContainsAny(reason, "\r\n"):
		return o, badRequest("the reason must be one line of text")
	}
	o.Reason = reason
	return o, nil
}

// parseUntil reads an override's end: "" (never), an RFC 3339 instant, a
// datetime-local value (UTC), or a duration from now (Go durations plus
// days: "90m", "3d", "1d12h").
func parseUntil(v string, now time.Time) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, nil
	}
	var t time.Time
	if d, err := duration.Parse(v); err == nil {
		if d <= 0 {
			return t, badRequest("the duration of an override must be positive")
		}
		return now.Add(d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04"} {
		if x, err := time.Parse(layout, v); err == nil {
			t = x
			break
		}
	}
	switch {
	case t.IsZero():
		return t, badRequest("until must be empty (never), a duration such as 2h or 3d, or a time such as 2026-12-01T18:00:00Z")
	case !t.After(now):
		return t, badRequest("until has already passed")
	}
	return t, nil
}

func badRequest(msg string) error { return echo.NewHTTPError(http.StatusBadRequest, msg) }

// overridesUnsupported is the answer when the Limiter keeps no overrides.
var errNoOverrides = echo.NewHTTPError(http.StatusNotImplemented, "this console's limiter keeps no per-person overrides")

// overrideTarget reads the policy and the person (shard values) of an
// override request.
func (s *Server) overrideTarget(get func(string) string) (*sdk.Policy, sdk.Subject, error) {
	p, err := s.policyParam(get("policy"))
	if err != nil {
		return nil, nil, err
	}
	subj, _ := subjectFrom(p, get)
	if err := checkSubject(subj); err != nil {
		return nil, nil, err
	}
	shard := shardOf(p, subj)
	for _, d := range p.ShardBy() {
		if shard[d] == "" {
			return nil, nil, badRequest(fmt.Sprintf("an override needs a value for %q", d))
		}
	}
	return p, shard, nil
}

// overrideError turns a failed SetOverride or DeleteOverride into the
// HTTP error to answer.
func overrideError(op string, p *sdk.Policy, err error) error {
	switch {
	case errors.Is(err, sdk.ErrOverrideNotFound):
		return echo.NewHTTPError(http.StatusNotFound, "no such override (deleted, or ended)")
	case errors.Is(err, sdk.ErrInvalidPolicy):
		return badRequest(fmt.Sprintf("policy %q does not read overrides: give it overrides: true in the policy file", p.Name()))
	case inputError(err):
		return badRequest(err.Error()) // sdk errors never contain subject values
	case errors.Is(err, errors.ErrUnsupported):
		return echo.NewHTTPError(http.StatusNotImplemented, "this backend keeps no per-person overrides")
	}
	return fmt.Errorf("%s override of policy %q: %w", op, p.Name(), err)
}

// setOverride stores an override and records it in the audit log, for
// the form and the API alike.
func (s *Server) setOverride(c echo.Context, p *sdk.Policy, shard sdk.Subject, in overrideInput) (driver.Override, error) {
	if s.ovr == nil {
		return driver.Override{}, errNoOverrides
	}
	o, err := in.build(p, s.now())
	if err != nil {
		return o, err
	}
	id := identityOf(c)
	o.By = id.Name
	stored, serr := s.ovr.SetOverride(c.Request().Context(), p, shard, o)
	entry := s.auditEntry(c, "override-set", p, shard)
	entry.Outcome = "ok"
	entry.Reason = o.Reason
	entry.Detail = overrideText(o)
	if serr != nil {
		entry.Outcome = "failed"
		if inputError(serr) || errors.Is(serr, errors.ErrUnsupported) {
			entry.Outcome = "refused"
		}
	} else {
		entry.Override = stored.ID
		entry.Detail = overrideText(stored)
	}
	if err := s.audit.Record(entry); err != nil {
		return stored, fmt.Errorf("override of policy %q: recording the audit entry: %w", p.Name(), err)
	}
	if serr != nil {
		return stored, overrideError("set", p, serr)
	}
	s.backendAnswered()
	s.log.Info("console: override set", "policy", p.Name(), "actor", entry.Actor, "id", stored.ID, "kind", stored.Kind.String())
	return stored, nil
}

// deleteOverride removes an override and records it in the audit log.
func (s *Server) deleteOverride(c echo.Context, p *sdk.Policy, shard sdk.Subject, id int64) error {
	if s.ovr == nil {
		return errNoOverrides
	}
	derr := s.ovr.DeleteOverride(c.Request().Context(), p, shard, id)
	entry := s.auditEntry(c, "override-delete", p, shard)
	entry.Override, entry.Outcome = id, "ok"
	switch {
	case errors.Is(derr, sdk.ErrOverrideNotFound):
		entry.Outcome = "refused: no such override"
	case derr != nil:
		entry.Outcome = "failed"
	}
	if err := s.audit.Record(entry); err != nil {
		return fmt.Errorf("override of policy %q: recording the audit entry: %w", p.Name(), err)
	}
	if derr != nil {
		return overrideError("delete", p, derr)
	}
	s.backendAnswered()
	s.log.Info("console: override deleted", "policy", p.Name(), "actor", entry.Actor, "id", id)
	return nil
}

// overrideText describes o in one line, as the audit log keeps it.
func overrideText(o driver.Override) string {
	var b strings.Builder
	if o.ID != 0 {
		fmt.Fprintf(&b, "#%d ", o.ID)
	}
	b.WriteString(o.Kind.String())
	if o.Kind == driver.Exempt {
		if o.Counted {
			b.WriteString(" (counted)")
		} else {
			b.WriteString(" (not counted)")
		}
	}
	if len(o.Limits) > 0 {
		b.WriteString(" " + limitsText(o.Limits))
	}
	if o.Until.IsZero() {
		b.WriteString(", no end")
	} else {
		b.WriteString(", until " + fmtTime(o.Until))
	}
	return b.String()
}

// limitsText writes limits as "rule=N, rule=N", by rule name.
func limitsText(limits map[string]int64) string {
	names := make([]string, 0, len(limits))
	for n := range limits {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + strconv.FormatInt(limits[n], 10)
	}
	return strings.Join(parts, ", ")
}

// overrideRows are os as the subject page shows them.
func overrideRows(p *sdk.Policy, shard sdk.Subject, os []driver.Override, now time.Time, canEdit bool) []views.OverrideRow {
	rows := make([]views.OverrideRow, 0, len(os))
	for _, o := range os {
		r := views.OverrideRow{
			ID:      o.ID,
			Kind:    o.Kind.String(),
			Counted: o.Kind == driver.Exempt && o.Counted,
			Limits:  limitsText(o.Limits),
			Until:   "no end",
			Reason:  o.Reason,
			By:      o.By,
			Created: fmtTime(o.Created),
		}
		if !o.Until.IsZero() {
			r.Until = fmtTime(o.Until) + " (in " + fmtCountdown(o.Until.Sub(now)) + ")"
		}
		if canEdit {
			r.DeleteURL = "/override/delete?" + subjectQuery(p.Name(), shard) + "&id=" + strconv.FormatInt(o.ID, 10)
		}
		rows = append(rows, r)
	}
	return rows
}

// overridesView reads the person's overrides for the subject page.
func (s *Server) overridesView(ctx context.Context, p *sdk.Policy, subj sdk.Subject, canEdit bool) views.OverridesView {
	shard := shardOf(p, subj)
	v := views.OverridesView{CanEdit: canEdit, Policy: p.Name(), Shard: orderedValues(p, shard)}
	for _, r := range p.Rules() {
		v.Rules = append(v.Rules, views.Field{Name: r.Name, Value: strconv.FormatInt(r.Limit, 10)})
	}
	if s.ovr == nil {
		v.Error = "This console's limiter keeps no per-person overrides."
		return v
	}
	os, err := s.ovr.Overrides(ctx, p, shard)
	switch {
	case errors.Is(err, sdk.ErrInvalidPolicy):
		v.Off = true
		return v
	case errors.Is(err, errors.ErrUnsupported):
		v.Error = "This backend keeps no per-person overrides."
		return v
	case err != nil:
		s.warn.Warn("overrides", "console: reading overrides failed", "policy", p.Name(), "err", err)
		v.Error = "The overrides could not be read: " + backendUnavailable + "."
		return v
	}
	v.Rows = overrideRows(p, shard, os, s.now(), canEdit)
	return v
}

// liveOverride finds the override that decides a request of subj now:
// the latest live block, else the latest live exempt; nil when none.
func liveOverride(os []driver.Override, now time.Time) *driver.Override {
	var exempt *driver.Override
	for i := len(os) - 1; i >= 0; i-- {
		o := &os[i]
		if !o.Until.IsZero() && !o.Until.After(now) {
			continue
		}
		if o.Kind == driver.Block {
			return o
		}
		if o.Kind == driver.Exempt && exempt == nil {
			exempt = o
		}
	}
	return exempt
}

// deciding returns the override deciding a request of subj under p at
// now (liveOverride), or nil: none, the policy reads none, the subject
// lacks shard values, or the overrides could not be read (the rules'
// word stands).
func (s *Server) deciding(ctx context.Context, p *sdk.Policy, subj sdk.Subject, now time.Time) *driver.Override {
	shard := shardOf(p, subj)
	if s.ovr == nil || len(shard) != len(p.ShardBy()) {
		return nil
	}
	os, err := s.ovr.Overrides(ctx, p, shard)
	if err != nil {
		return nil
	}
	return liveOverride(os, now)
}

// limitedBy maps each rule a live limit override sets the limit of, for
// subj under p at now, to that override's ID: per rule the latest (the
// highest ID), as the backends apply them. Nil when there is none or the
// overrides could not be read.
func (s *Server) limitedBy(ctx context.Context, p *sdk.Policy, subj sdk.Subject, now time.Time) map[string]int64 {
	shard := shardOf(p, subj)
	if s.ovr == nil || len(shard) != len(p.ShardBy()) {
		return nil
	}
	os, err := s.ovr.Overrides(ctx, p, shard)
	if err != nil {
		return nil
	}
	var by map[string]int64
	for _, o := range os {
		if o.Kind != driver.Limit || (!o.Until.IsZero() && !o.Until.After(now)) {
			continue
		}
		for name := range o.Limits {
			if by == nil {
				by = map[string]int64{}
			}
			if o.ID > by[name] {
				by[name] = o.ID
			}
		}
	}
	return by
}

// overrideForm reads the override form.
func overrideForm(c echo.Context, p *sdk.Policy) overrideInput {
	in := overrideInput{
		Kind:    c.FormValue("kind"),
		Counted: c.FormValue("counted") == "yes",
		Until:   c.FormValue("until"),
		Reason:  c.FormValue("reason"),
	}
	if in.Kind == "limit" {
		in.Limits = map[string]int64{}
		for _, r := range p.Rules() {
			v := strings.TrimSpace(c.FormValue("limit-" + r.Name))
			if v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				n = -1 // refused by build, naming the rule
			}
			in.Limits[r.Name] = n
		}
	}
	return in
}

// overrideSet is POST /override: the subject page's form.
func (s *Server) overrideSet(c echo.Context) error {
	p, shard, err := s.overrideTarget(c.FormValue)
	if err != nil {
		return err
	}
	o, err := s.setOverride(c, p, shard, overrideForm(c, p))
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/subject?"+subjectQuery(p.Name(), shard)+"&done=override-set&id="+strconv.FormatInt(o.ID, 10)+"#overrides")
}

// overrideDeleteConfirm is GET /override/delete: what the deletion does,
// and a confirmation button.
func (s *Server) overrideDeleteConfirm(c echo.Context) error {
	p, shard, err := s.overrideTarget(c.QueryParam)
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(c.QueryParam("id"), 10, 64)
	if err != nil || id <= 0 {
		return badRequest("id must be an override's number")
	}
	if s.ovr == nil {
		return errNoOverrides
	}
	os, err := s.ovr.Overrides(c.Request().Context(), p, shard)
	if err != nil {
		return overrideError("read", p, err)
	}
	i := slices.IndexFunc(os, func(o driver.Override) bool { return o.ID == id })
	if i < 0 {
		return echo.NewHTTPError(http.StatusNotFound, "no such override (deleted, or ended)")
	}
	v := views.OverrideDeleteView{
		Page:    s.page(c, "subject"),
		Policy:  p.Name(),
		Shard:   orderedValues(p, shard),
		Row:     overrideRows(p, shard, os[i:i+1], s.now(), true)[0],
		BackURL: "/subject?" + subjectQuery(p.Name(), shard),
	}
	now := s.now()
	for j, o := range os {
		if j != i && (o.Until.IsZero() || o.Until.After(now)) {
			v.Others++
		}
	}
	v.Title = "Delete override"
	return render(c, http.StatusOK, views.OverrideDeletePage(v))
}

// overrideDelete is POST /override/delete, confirmed.
func (s *Server) overrideDelete(c echo.Context) error {
	p, shard, err := s.overrideTarget(c.FormValue)
	if err != nil {
		return err
	}
	if c.FormValue("confirm") != "yes" {
		return badRequest("the deletion was not confirmed")
	}
	id, err := strconv.ParseInt(c.FormValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return badRequest("id must be an override's number")
	}
	if err := s.deleteOverride(c, p, shard, id); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/subject?"+subjectQuery(p.Name(), shard)+"&done=override-deleted&id="+strconv.FormatInt(id, 10)+"#overrides")
}
