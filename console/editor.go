package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// WhatIf estimates, from the traffic the services recorded, what a
// proposed version would have denied compared with the current one (the
// editor's preview). The freqcap command adapts fleet/whatif.
type WhatIf interface {
	// Estimate returns the estimate in words: per policy and rule, the
	// attempts and people denied over the last hour and 24 h, now and as
	// proposed, and the estimate's error.
	Estimate(ctx context.Context, current, proposed []*sdk.Policy) (string, error)
}

// maxReason bounds an apply's reason, in bytes.
const maxReason = 256

var errNoEditor = echo.NewHTTPError(http.StatusNotFound, "this console does not follow a policy store: its policies are read-only (start it with --policies store)")

// checkReason checks an apply's or rollback's reason (required).
func checkReason(r string) (string, error) {
	r = strings.TrimSpace(r)
	switch {
	case r == "":
		return r, badRequest("give a reason: it is kept with the version and in the audit log")
	case len(r) > maxReason:
		return r, badRequest(fmt.Sprintf("the reason is longer than %d bytes", maxReason))
	case !utf8.ValidString(r) || strings.ContainsAny(r, "\r\n"):
		return r, badRequest("the reason must be one line of text")
	}
	return r, nil
}

// editorError turns an editor failure into the HTTP error to answer.
func editorError(op string, err error) error {
	switch {
	case errors.Is(err, sdk.ErrInvalidPolicy), errors.Is(err, sdk.ErrInvalidRule):
		// The policy file's own text, line and key.
		return echo.NewHTTPError(http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, policystore.ErrVersionConflict):
		return echo.NewHTTPError(http.StatusConflict, "another version was applied since this one was previewed: nothing was applied; preview again")
	case errors.Is(err, policystore.ErrRekeyNotConfirmed):
		return echo.NewHTTPError(http.StatusConflict, "this version re-keys a rule, whose counts start afresh: nothing was applied; confirm the re-keying to apply it")
	case errors.Is(err, policystore.ErrUnreadableVersion):
		// Not an outage: a version written by hand or by a newer
		// freqcap. The editor starts from the newest one that loads.
		return echo.NewHTTPError(http.StatusUnprocessableEntity, err.Error()+": open the editor (it starts from the newest version that loads) and apply, or roll back to a version that loads from the history")
	case errors.Is(err, policystore.ErrNoPolicyVersion):
		return echo.NewHTTPError(http.StatusNotFound, "no such policy version")
	case errors.Is(err, errors.ErrUnsupported):
		return echo.NewHTTPError(http.StatusNotImplemented, "this backend keeps no policy store")
	}
	return fmt.Errorf("policy %s: %w", op, marked(err))
}

// editorHead reads the store's head into v: the version shown (the
// newest that loads) and, when the current one does not load, why.
func (s *Server) editorHead(ctx context.Context, v *views.EditorView) error {
	h, err := s.cfg.Store.Head(ctx)
	if err != nil {
		return err
	}
	v.Current = storedRow(h.Loaded, h.Loaded.Number)
	v.Source = string(h.Loaded.Source)
	if h.Loaded.Number != h.Number {
		v.Current.Current = false
		v.StoreVersion, v.Unloadable = h.Number, h.Problem()
	}
	return nil
}

// apply applies src over base and records it in the audit log, for the
// editor, the rollback and the API alike. from, when nonzero, is the
// version a rollback restores.
func (s *Server) apply(c echo.Context, src []byte, base int64, rekey bool, reason string, from int64) (policystore.Version, error) {
	if s.cfg.Store == nil {
		return policystore.Version{}, errNoEditor
	}
	reason, err := checkReason(reason)
	if err != nil {
		return policystore.Version{}, err
	}
	id := identityOf(c)
	v, aerr := s.applyOver(c.Request().Context(), src, base, rekey, id.Name, reason)
	action := "policy-apply"
	if from > 0 {
		action = "policy-rollback"
	}
	entry := s.auditEntry(c, action, nil, nil)
	entry.Reason, entry.Outcome = reason, "ok"
	entry.Detail = fmt.Sprintf("over version %d", base)
	if from > 0 {
		entry.Detail = fmt.Sprintf("back to version %d, over version %d", from, base)
	}
	if aerr != nil {
		entry.Outcome = "refused"
		if !(errors.Is(aerr, policystore.ErrVersionConflict) || errors.Is(aerr, policystore.ErrRekeyNotConfirmed) || errors.Is(aerr, sdk.ErrInvalidPolicy) || errors.Is(aerr, sdk.ErrInvalidRule)) {
			entry.Outcome = "failed"
		}
	} else {
		entry.Version = v.Number
		entry.Detail = fmt.Sprintf("version %d, ", v.Number) + entry.Detail
	}
	if err := s.audit.Record(entry); err != nil {
		return v, fmt.Errorf("policy apply: recording the audit entry: %w", err)
	}
	if aerr != nil {
		return v, editorError("apply", aerr)
	}
	s.log.Info("console: policy version applied", "actor", entry.Actor, "version", v.Number, "base", base, "rollback_of", from)
	return v, nil
}

// applyOver plans src and applies it if the store is still at base (else
// an error wrapping policystore.ErrVersionConflict, nothing stored).
func (s *Server) applyOver(ctx context.Context, src []byte, base int64, rekey bool, by, reason string) (policystore.Version, error) {
	p, err := s.cfg.Store.Plan(ctx, src)
	if err != nil {
		return policystore.Version{}, err
	}
	if p.Base != base {
		return policystore.Version{}, fmt.Errorf("console: apply over version %d, the store is at %d: %w", base, p.Base, policystore.ErrVersionConflict)
	}
	p.ConfirmRekey = rekey
	return s.cfg.Store.Apply(ctx, p, by, reason)
}

// planView builds the preview of plan (with the what-if estimate).
func (s *Server) planView(ctx context.Context, plan *policystore.Plan) views.PlanView {
	pv := views.PlanView{
		Base:      plan.Base,
		Warnings:  plan.Warnings,
		Rekey:     len(plan.Rekeyed()) > 0,
		Unchanged: !plan.Changed(),
		Text:      plan.String(),
		Changes:   planRows(plan),
	}
	switch {
	case s.cfg.WhatIf == nil:
		pv.WhatIfNote = "No estimate: this console has no recorded traffic to replay."
	default:
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		cur, err := s.planCurrent(ctx, plan)
		if err == nil {
			pv.WhatIf, err = s.cfg.WhatIf.Estimate(ctx, cur, plan.Policies)
		}
		if err != nil {
			s.warn.Warn("whatif", "console: what-if estimate failed", "err", err)
			pv.WhatIfNote = "No estimate: the recorded traffic could not be replayed (the console's log has the error)."
		}
	}
	return pv
}

// planCurrent is the policies plan is made against (the what-if
// replays them beside the plan's): its Against version's, whatever
// version this console runs; the console's own for an empty store.
func (s *Server) planCurrent(ctx context.Context, plan *policystore.Plan) ([]*sdk.Policy, error) {
	if plan.Against == 0 {
		return s.snap().order, nil
	}
	v, err := s.cfg.Store.Version(ctx, plan.Against)
	if err != nil {
		return nil, err
	}
	return v.Policies()
}

// planRows are the preview's rows of plan's changes: a policy's own
// change or settings, then its changed rules.
func planRows(p *policystore.Plan) []views.PlanChangeRow {
	var out []views.PlanChangeRow
	for _, d := range p.Diffs {
		if d.Kind == policystore.Unchanged {
			continue
		}
		if len(d.Settings) > 0 || d.Kind != policystore.Modified {
			out = append(out, views.PlanChangeRow{Policy: d.Policy, Kind: "policy " + d.Kind.String(), Detail: strings.Join(d.Settings, "; ")})
		}
		for _, r := range d.Rules {
			if r.Kind == policystore.Unchanged {
				continue
			}
			out = append(out, views.PlanChangeRow{
				Policy: d.Policy, Rule: r.Rule, Kind: r.Kind.String(),
				Carries: strings.TrimPrefix(r.Carry.String(), "carries "),
				Detail:  strings.TrimPrefix(strings.Join(r.Fields, ", ")+"; "+r.Note, "; "),
			})
		}
	}
	return out
}

// storedRow is v as the history lists it.
func storedRow(v policystore.Version, current int64) views.VersionRow {
	return views.VersionRow{
		Version: v.Number, At: fmtTime(v.At), By: v.By, Reason: v.Reason,
		Current: v.Number == current,
		URL:     "/policies/version?n=" + strconv.FormatInt(v.Number, 10),
	}
}

// editPage is GET /policies/edit: the current version's source in an
// edit box (admins) or read-only (viewers).
func (s *Server) editPage(c echo.Context) error {
	if s.cfg.Store == nil {
		return errNoEditor
	}
	v := views.EditorView{
		Page:    s.page(c, "policies"),
		CanEdit: identityOf(c).Role >= RoleAdmin,
		Running: s.snap().version,
	}
	if err := s.editorHead(c.Request().Context(), &v); err != nil {
		return editorError("read", err)
	}
	v.Title = "Policy editor"
	return render(c, http.StatusOK, views.EditorPage(v))
}

// preview is POST /policies/preview (admin): the document's validation
// errors, or its plan, re-keying warning and what-if estimate, with the
// apply form.
func (s *Server) preview(c echo.Context) error {
	if s.cfg.Store == nil {
		return errNoEditor
	}
	src := formSource(c)
	ctx := c.Request().Context()
	v := views.EditorView{
		Page:      s.page(c, "policies"),
		CanEdit:   true,
		Running:   s.snap().version,
		Previewed: true,
	}
	if err := s.editorHead(ctx, &v); err != nil {
		return editorError("read", err)
	}
	v.Source = src
	v.Title = "Policy editor: preview"
	status := http.StatusOK
	plan, err := s.cfg.Store.Plan(ctx, []byte(src))
	switch {
	case errors.Is(err, sdk.ErrInvalidPolicy), errors.Is(err, sdk.ErrInvalidRule):
		v.Invalid, status = err.Error(), http.StatusUnprocessableEntity
	case err != nil:
		return editorError("plan", err)
	default:
		v.Plan = s.planView(ctx, plan)
	}
	return render(c, status, views.EditorPage(v))
}

// applyForm is POST /policies/apply (admin): applies the previewed
// document over the version it was previewed against.
func (s *Server) applyForm(c echo.Context) error {
	base, err := strconv.ParseInt(c.FormValue("base"), 10, 64)
	if err != nil || base < 0 {
		return badRequest("base must be the version the preview was made against")
	}
	v, err := s.apply(c, []byte(formSource(c)), base, c.FormValue("rekey") == "yes", c.FormValue("reason"), 0)
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/policies/history?done=applied&v="+strconv.FormatInt(v.Number, 10))
}

// formSource reads the policy file a form posts: browsers send a
// textarea's line ends as CRLF, which the store would keep (and every
// diff would show); they are LF again here.
func formSource(c echo.Context) string {
	return strings.ReplaceAll(c.FormValue("source"), "\r\n", "\n")
}

// historyMax is how many versions the history page lists.
const historyMax = 100

// historyPage is GET /policies/history: who applied which version, when
// and why; links to view, diff and roll back.
func (s *Server) historyPage(c echo.Context) error {
	if s.cfg.Store == nil {
		return errNoEditor
	}
	hs, err := s.cfg.Store.History(c.Request().Context(), historyMax)
	if err != nil {
		return editorError("history", err)
	}
	v := views.HistoryView{Page: s.page(c, "policies"), Running: s.snap().version, CanEdit: identityOf(c).Role >= RoleAdmin}
	v.Title = "Policy history"
	var cur int64
	if len(hs) > 0 {
		cur = hs[0].Number
	}
	for _, x := range hs {
		v.Versions = append(v.Versions, storedRow(x.Version, cur))
	}
	if c.QueryParam("done") == "applied" {
		v.Notice = "Version " + c.QueryParam("v") + " applied: every limiter following the store picks it up within 2 s. The apply is in the audit log."
	}
	return render(c, http.StatusOK, views.HistoryPage(v))
}

// versionParam reads version number name from get (positive).
func versionParam(get func(string) string, name string) (int64, error) {
	n, err := strconv.ParseInt(get(name), 10, 64)
	if err != nil || n <= 0 {
		return 0, badRequest(name + " must be a version number")
	}
	return n, nil
}

// versionPage is GET /policies/version?n=N: one version's source.
func (s *Server) versionPage(c echo.Context) error {
	if s.cfg.Store == nil {
		return errNoEditor
	}
	n, err := versionParam(c.QueryParam, "n")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	x, err := s.cfg.Store.Version(ctx, n)
	if err != nil {
		return editorError("read", err)
	}
	h, err := s.cfg.Store.Head(ctx)
	if err != nil {
		return editorError("read", err)
	}
	cur := h.Number
	v := views.VersionView{
		Page:    s.page(c, "policies"),
		Row:     storedRow(x, cur),
		Source:  string(x.Source),
		CanEdit: identityOf(c).Role >= RoleAdmin,
	}
	if n > 1 {
		v.DiffURL = fmt.Sprintf("/policies/diff?a=%d&b=%d", n-1, n)
	}
	if n != cur {
		v.RollbackURL = "/policies/rollback?n=" + strconv.FormatInt(n, 10)
	}
	v.Title = "Policy version " + strconv.FormatInt(n, 10)
	return render(c, http.StatusOK, views.VersionPage(v))
}

// diffPage is GET /policies/diff?a=N&b=M: the line diff of two versions'
// sources.
func (s *Server) diffPage(c echo.Context) error {
	if s.cfg.Store == nil {
		return errNoEditor
	}
	a, err := versionParam(c.QueryParam, "a")
	if err != nil {
		return err
	}
	b, err := versionParam(c.QueryParam, "b")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	va, err := s.cfg.Store.Version(ctx, a)
	if err != nil {
		return editorError("read", err)
	}
	vb, err := s.cfg.Store.Version(ctx, b)
	if err != nil {
		return editorError("read", err)
	}
	v := views.DiffView{Page: s.page(c, "policies"), A: storedRow(va, 0), B: storedRow(vb, 0)}
	for _, l := range diffLines(splitLines(string(va.Source)), splitLines(string(vb.Source))) {
		v.Lines = append(v.Lines, views.DiffLine{Op: l.op, Text: l.text})
	}
	v.Title = fmt.Sprintf("Policy versions %d → %d", a, b)
	return render(c, http.StatusOK, views.DiffPage(v))
}

// rollbackConfirm is GET /policies/rollback?n=N (admin): what applying
// version N's document again would do, and the form confirming it.
func (s *Server) rollbackConfirm(c echo.Context) error {
	if s.cfg.Store == nil {
		return errNoEditor
	}
	n, err := versionParam(c.QueryParam, "n")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	x, err := s.cfg.Store.Version(ctx, n)
	if err != nil {
		return editorError("read", err)
	}
	plan, err := s.cfg.Store.Plan(ctx, x.Source)
	if err != nil {
		return editorError("plan", err)
	}
	v := views.RollbackView{Page: s.page(c, "policies"), Row: storedRow(x, 0), Plan: s.planView(ctx, plan)}
	v.Title = "Roll back to version " + strconv.FormatInt(n, 10)
	return render(c, http.StatusOK, views.RollbackPage(v))
}

// rollback is POST /policies/rollback (admin): applies version n's
// document as a new version, over base.
func (s *Server) rollback(c echo.Context) error {
	if s.cfg.Store == nil {
		return errNoEditor
	}
	if c.FormValue("confirm") != "yes" {
		return badRequest("the rollback was not confirmed")
	}
	n, err := versionParam(c.FormValue, "n")
	if err != nil {
		return err
	}
	base, err := strconv.ParseInt(c.FormValue("base"), 10, 64)
	if err != nil || base < 0 {
		return badRequest("base must be the version the rollback was planned against")
	}
	v, err := s.rollbackTo(c, n, base, c.FormValue("rekey") == "yes", c.FormValue("reason"))
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/policies/history?done=applied&v="+strconv.FormatInt(v.Number, 10))
}

// rollbackTo applies version n's document again as a new version.
func (s *Server) rollbackTo(c echo.Context, n, base int64, rekey bool, reason string) (policystore.Version, error) {
	if s.cfg.Store == nil {
		return policystore.Version{}, errNoEditor
	}
	x, err := s.cfg.Store.Version(c.Request().Context(), n)
	if err != nil {
		return policystore.Version{}, editorError("read", err)
	}
	return s.apply(c, x.Source, base, rekey, reason, n)
}

// diffLine is one line of a line diff: op ' ', '-' or '+'.
type diffLine struct {
	op   string
	text string
}

// splitLines splits s into lines, without their ends.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// maxDiffCells bounds the diff's table (lines of a × lines of b); beyond
// it the diff shows every line of a removed and every line of b added.
const maxDiffCells = 4 << 20

// diffLines is the shortest line diff of a and b (longest common
// subsequence).
func diffLines(a, b []string) []diffLine {
	if len(a)*len(b) > maxDiffCells {
		var out []diffLine
		for _, l := range a {
			out = append(out, diffLine{"-", l})
		}
		for _, l := range b {
			out = append(out, diffLine{"+", l})
		}
		return out
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	lcs := make([][]int32, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []diffLine
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, diffLine{" ", a[i]})
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, diffLine{"-", a[i]})
			i++
		default:
			out = append(out, diffLine{"+", b[j]})
			j++
		}
	}
	for ; i < len(a); i++ {
		out = append(out, diffLine{"-", a[i]})
	}
	for ; j < len(b); j++ {
		out = append(out, diffLine{"+", b[j]})
	}
	return out
}
