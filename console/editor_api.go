package console

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/sdk/policystore"
)

// PolicyDocRequest is the body of POST /api/v1/policies/plan and
// POST /api/v1/policies/apply.
type PolicyDocRequest struct {
	// YAML is the whole policy file.
	YAML string `json:"yaml"`
	// Base is the version the apply was planned against (apply only):
	// the store must still be at it (else 409).
	Base int64 `json:"base"`
	// ConfirmRekey lets an apply re-key rules (apply only).
	ConfirmRekey bool `json:"confirm_rekey,omitempty"`
	// Reason is required for an apply (audited).
	Reason string `json:"reason,omitempty"`
}

// RollbackRequest is the body of POST /api/v1/policies/rollback.
type RollbackRequest struct {
	// Version is the version whose document is applied again.
	Version      int64  `json:"version"`
	Base         int64  `json:"base"`
	ConfirmRekey bool   `json:"confirm_rekey,omitempty"`
	Reason       string `json:"reason"`
}

// PlanJSON is the answer of POST /api/v1/policies/plan.
type PlanJSON struct {
	Base      int64            `json:"base"`
	Changes   []PlanChangeJSON `json:"changes"`
	Warnings  []string         `json:"warnings"`
	Rekey     bool             `json:"rekey"`
	Unchanged bool             `json:"unchanged"`
	Text      string           `json:"text"`
	// WhatIf is the estimate in words ("" when there is none).
	WhatIf string `json:"whatif,omitempty"`
}

// PlanChangeJSON is one change of a plan.
type PlanChangeJSON struct {
	Policy  string `json:"policy"`
	Rule    string `json:"rule,omitempty"`
	Kind    string `json:"kind"`
	Carries string `json:"carries,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// VersionJSON is one version of the policy store.
type VersionJSON struct {
	Version int64     `json:"version"`
	At      time.Time `json:"at"`
	By      string    `json:"by"`
	Reason  string    `json:"reason"`
	// YAML is the document (GET /api/v1/policies/version only).
	YAML string `json:"yaml,omitempty"`
}

func versionJSON(v policystore.Version, withSource bool) VersionJSON {
	out := VersionJSON{Version: v.Number, At: v.At.UTC(), By: v.By, Reason: v.Reason}
	if withSource {
		out.YAML = string(v.Source)
	}
	return out
}

// apiPlan is POST /api/v1/policies/plan (admin): the editor's preview.
// 422 with the error (line and key) for an invalid document.
func (s *Server) apiPlan(c echo.Context) error {
	if s.cfg.Store == nil {
		return errNoEditor
	}
	var req PolicyDocRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	ctx := c.Request().Context()
	plan, err := s.cfg.Store.Plan(ctx, []byte(req.YAML))
	if err != nil {
		return editorError("plan", err)
	}
	pv := s.planView(ctx, plan)
	out := PlanJSON{Base: pv.Base, Changes: []PlanChangeJSON{}, Warnings: pv.Warnings, Rekey: pv.Rekey, Unchanged: pv.Unchanged, Text: pv.Text, WhatIf: pv.WhatIf}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	for _, ch := range pv.Changes {
		out.Changes = append(out.Changes, PlanChangeJSON(ch))
	}
	return c.JSON(http.StatusOK, out)
}

// apiApply is POST /api/v1/policies/apply (admin): 201 with the version
// stored; 409 when the store moved past base or a re-keying is not
// confirmed; 422 for an invalid document.
func (s *Server) apiApply(c echo.Context) error {
	var req PolicyDocRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	v, err := s.apply(c, []byte(req.YAML), req.Base, req.ConfirmRekey, req.Reason, 0)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, versionJSON(v, false))
}

// apiRollback is POST /api/v1/policies/rollback (admin): applies version
// Version's document again; 201 with the new version.
func (s *Server) apiRollback(c echo.Context) error {
	var req RollbackRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	if req.Version <= 0 {
		return badRequest("version must be a version number")
	}
	v, err := s.rollbackTo(c, req.Version, req.Base, req.ConfirmRekey, req.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, versionJSON(v, false))
}

// apiHistory is GET /api/v1/policies/history?max=N (viewer): the
// versions, newest first (default and at most 100).
func (s *Server) apiHistory(c echo.Context) error {
	if s.cfg.Store == nil {
		return errNoEditor
	}
	max := historyMax
	if v := c.QueryParam("max"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return badRequest("max must be a positive number")
		}
		max = min(n, historyMax)
	}
	hs, err := s.cfg.Store.History(c.Request().Context(), max)
	if err != nil {
		return editorError("history", err)
	}
	out := make([]VersionJSON, 0, len(hs))
	for _, h := range hs {
		out = append(out, versionJSON(h.Version, false))
	}
	return c.JSON(http.StatusOK, map[string]any{"versions": out})
}

// apiVersion is GET /api/v1/policies/version?n=N (viewer; 0 or absent:
// the current one), with its document.
func (s *Server) apiVersion(c echo.Context) error {
	if s.cfg.Store == nil {
		return errNoEditor
	}
	var n int64
	if v := c.QueryParam("n"); v != "" {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil || x < 0 {
			return badRequest("n must be a version number")
		}
		n = x
	}
	v, err := s.cfg.Store.Version(c.Request().Context(), n)
	if err != nil {
		return editorError("read", err)
	}
	return c.JSON(http.StatusOK, versionJSON(v, true))
}
