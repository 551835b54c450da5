package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The JSON API: what the pages show, for scripts (inspect, reset,
// policies, overrides, stats). Durations are integer milliseconds (retry
// and reset times rounded up). Decisions are freqcap serve's (package
// serve): POST /api/v1/check is retired.

type apiError struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

// RuleJSON is one rule's part of a decision or inspection.
type RuleJSON struct {
	Rule         string `json:"rule"`
	Algorithm    string `json:"algorithm"`
	Allowed      bool   `json:"allowed"`
	Used         int64  `json:"used"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	CostTooHigh  bool   `json:"cost_too_high,omitempty"`
	// Shadow: a shadow rule (never denies). Before: the rule as it was
	// before that policy-store version, enforced beside its successor.
	Shadow bool  `json:"shadow,omitempty"`
	Before int64 `json:"before,omitempty"`
}

// InspectionJSON is the answer of GET /api/v1/inspect.
type InspectionJSON struct {
	Policy  string       `json:"policy"`
	At      time.Time    `json:"at"`
	Allowed bool         `json:"allowed"` // whether a cost-1 request would be allowed now (overrides and shadow rules accounted for)
	Rules   []RuleJSON   `json:"rules"`
	Skipped []string     `json:"skipped"`
	Denials []DenialJSON `json:"denials"`
	// Override is the person's override deciding a request now (a block
	// or an exempt); absent when none does.
	Override *OverrideJSON `json:"override,omitempty"`
}

// DenialJSON is one entry of the denial trail.
type DenialJSON struct {
	At           time.Time `json:"at"`
	Rule         string    `json:"rule"`
	Used         int64     `json:"used"`
	Limit        int64     `json:"limit"`
	Cost         int64     `json:"cost"`
	RetryAfterMS int64     `json:"retry_after_ms"`
	CostTooHigh  bool      `json:"cost_too_high,omitempty"`
	// Values are the attempt's values beyond the shard ones: what was
	// blocked (e.g. {"content": "<fingerprint>"}).
	Values map[string]string `json:"values,omitempty"`
	// Shadow: a shadow rule would have denied (the attempt may have been
	// allowed). Override: the block override that denied (Rule empty).
	Shadow   bool  `json:"shadow,omitempty"`
	Override int64 `json:"override,omitempty"`
	// Exempt: an exempt rule would have denied, and the attempt's class
	// passed it. Quiet: denied for quiet hours (Rule empty). Class,
	// Priority, Identity: the attempt's, when it gave them.
	Exempt   bool   `json:"exempt,omitempty"`
	Quiet    bool   `json:"quiet,omitempty"`
	Class    string `json:"class,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Identity string `json:"identity,omitempty"`
}

func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func rulesJSON(rds []sdk.RuleDecision) []RuleJSON {
	out := make([]RuleJSON, 0, len(rds))
	for _, rd := range rds {
		out = append(out, RuleJSON{
			Rule: rd.Rule, Algorithm: rd.Algorithm.String(), Allowed: rd.Allowed,
			Used: rd.Used, Limit: rd.Limit, Remaining: rd.Remaining,
			ResetAfterMS: ceilMS(rd.ResetAfter), RetryAfterMS: ceilMS(rd.RetryAfter),
			CostTooHigh: rd.CostTooHigh, Shadow: rd.Shadow, Before: rd.Before,
		})
	}
	return out
}

// decodeJSON reads the request body into v: one JSON object of at most
// bodyLimit bytes (else 413), valid UTF-8 (else 400: the decoder would
// replace invalid bytes and make two byte strings one subject), no
// unknown fields, and nothing after the object (else 400).
func decodeJSON(c echo.Context, v any) error {
	limit := bodyLimit(c.Request())
	data, err := io.ReadAll(io.LimitReader(c.Request().Body, limit+1))
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "cannot read the request body")
	}
	if int64(len(data)) > limit {
		return tooLarge(limit)
	}
	if !utf8.Valid(data) {
		return echo.NewHTTPError(http.StatusBadRequest, "invalid JSON body: not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "invalid JSON body: "+jsonProblem(err))
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return echo.NewHTTPError(http.StatusBadRequest, "invalid JSON body: data after the JSON object")
	}
	return nil
}

// backendUnavailable is what API clients and viewers are told when the
// backend fails: its error names addresses, and goes to the log only.
const backendUnavailable = "the backend is unavailable (details are in the console's log)"

// checkReplacement is what POST /api/v1/check, retired, tells its
// callers to call instead: freqcap serve's decision API, whose HTTP/JSON
// calls take the same policy, subject and cost.
const checkReplacement = "POST /api/v1/check is retired: decisions over the network are freqcap serve's " +
	"(POST /freqcap.v1.FreqcapService/Take to consume, /Peek to ask; the same policy, subject and cost; docs/SERVE.md). " +
	"Migration: docs/CONSOLE.md, \"Migrating from POST /api/v1/check\""

// apiCheckRetired answers POST /api/v1/check, the console's decision API
// until freqcap serve took that over: 410 Gone, naming the replacement.
func (s *Server) apiCheckRetired(c echo.Context) error {
	return echo.NewHTTPError(http.StatusGone, checkReplacement)
}

// ResetRequest is the body of POST /api/v1/reset.
type ResetRequest struct {
	Policy string `json:"policy"`
	// Subject gives the policy's shard dimensions and, optionally,
	// others: the rules whose dimensions it all gives are reset, as in
	// the console's reset form.
	Subject sdk.Subject `json:"subject"`
	// Rules, when given, resets only these rules (sdk.Admin.ResetRules:
	// every rule keyed by the same dimensions as one named must be named
	// too) and keeps the open reservations.
	Rules []string `json:"rules,omitempty"`
}

// ResetJSON is the answer of POST /api/v1/reset.
type ResetJSON struct {
	Policy string   `json:"policy"`
	Reset  []string `json:"reset"` // rules whose counters were deleted
	Kept   []string `json:"kept"`  // rules left alone: a dimension was not given, or not named in rules
}

// apiReset is POST /api/v1/reset (admin): the reset form as JSON, with the
// same scoping, and audited the same way.
func (s *Server) apiReset(c echo.Context) error {
	var req ResetRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	if req.Policy == "" {
		return echo.NewHTTPError(http.StatusBadRequest, "policy is required")
	}
	p, subj, _, err := s.resetTarget(func(k string) string {
		if k == "policy" {
			return req.Policy
		}
		return req.Subject[k]
	})
	if err != nil {
		return err
	}
	for k := range req.Subject {
		if !slices.Contains(p.Dimensions(), k) {
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("policy %q has no dimension %q", p.Name(), k))
		}
	}
	rules, keep, err := s.doReset(c, p, subj, req.Rules)
	if err != nil {
		return err
	}
	if rules == nil {
		rules = []string{}
	}
	if keep == nil {
		keep = []string{}
	}
	return c.JSON(http.StatusOK, ResetJSON{Policy: p.Name(), Reset: rules, Kept: keep})
}

// jsonProblem describes a decoding error without echoing the input.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q has the wrong type", te.Field)
	case errors.Is(err, io.EOF):
		return "empty body"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return "cannot decode"
}

// apiInspect is GET /api/v1/inspect?policy=P&<dimension>=<value>…
func (s *Server) apiInspect(c echo.Context) error {
	name := c.QueryParam("policy")
	if name == "" {
		return echo.NewHTTPError(http.StatusBadRequest, "policy is required")
	}
	p, ok := s.snap().byName[name]
	if !ok {
		return echo.NewHTTPError(http.StatusNotFound, "no such policy")
	}
	subj, _ := subjectFrom(p, c.QueryParam)
	if err := checkSubject(subj); err != nil {
		return err
	}
	ins, err := s.cfg.Admin.Inspect(c.Request().Context(), p, subj)
	if err != nil {
		if errors.Is(err, sdk.ErrInvalidSubject) {
			return err
		}
		s.warn.Warn("api-inspect", "console: api inspect failed", "policy", p.Name(), "err", err)
		return echo.NewHTTPError(http.StatusServiceUnavailable, "could not inspect: "+backendUnavailable)
	}
	s.backendAnswered()
	out := InspectionJSON{
		Policy: ins.Policy, At: ins.At, Allowed: true,
		Rules: rulesJSON(ins.Rules), Skipped: ins.Skipped, Denials: []DenialJSON{},
	}
	if out.Skipped == nil {
		out.Skipped = []string{}
	}
	for _, r := range ins.Rules {
		if !r.Allowed && !r.Shadow { // a shadow rule never denies
			out.Allowed = false
		}
	}
	if o := s.deciding(c.Request().Context(), p, subj, ins.At); o != nil {
		oj := overrideJSON(*o)
		out.Override, out.Allowed = &oj, o.Kind != driver.Block
	}
	for _, d := range ins.Denials {
		out.Denials = append(out.Denials, DenialJSON{
			At: d.At, Rule: d.Rule, Used: d.Used, Limit: d.Limit, Cost: d.Cost,
			RetryAfterMS: ceilMS(d.RetryAfter), CostTooHigh: d.CostTooHigh, Values: d.Values,
			Shadow: d.Shadow, Override: d.Override,
			Exempt: d.Exempt, Quiet: d.Quiet, Class: d.Class, Priority: d.Priority, Identity: d.Identity,
		})
	}
	return c.JSON(http.StatusOK, out)
}

// PolicyJSON is a policy as configured, for GET /api/v1/policies.
type PolicyJSON struct {
	Name       string           `json:"name"`
	Failure    string           `json:"failure"`
	Dimensions []string         `json:"dimensions"`
	ShardBy    []string         `json:"shard_by"`
	Rules      []PolicyRuleJSON `json:"rules"`
}

// PolicyRuleJSON is one rule as configured.
type PolicyRuleJSON struct {
	Name       string   `json:"name"`
	Algorithm  string   `json:"algorithm"`
	Limit      int64    `json:"limit"`
	WindowMS   int64    `json:"window_ms"`
	SubWindows int      `json:"sub_windows,omitempty"`
	Burst      int64    `json:"burst,omitempty"`
	Calendar   string   `json:"calendar,omitempty"`
	Timezone   string   `json:"timezone,omitempty"`
	By         []string `json:"by"`
	// Quota and QuotaWindowMS are what decisions report as the rule's
	// limit, and the window it refills over (RateLimit-Policy's q and w):
	// Limit and WindowMS, except for GCRA, where the quota is Burst+1
	// units and the window the time they take to accrue at Limit per
	// WindowMS.
	Quota         int64 `json:"quota"`
	QuotaWindowMS int64 `json:"quota_window_ms"`
}

func (s *Server) apiPolicies(c echo.Context) error {
	out := make([]PolicyJSON, 0, len(s.snap().order))
	for _, p := range s.snap().order {
		pj := PolicyJSON{Name: p.Name(), Failure: failure(p), Dimensions: p.Dimensions(), ShardBy: p.ShardBy()}
		for _, r := range p.Rules() {
			rj := PolicyRuleJSON{
				Name: r.Name, Algorithm: r.Algorithm.String(), Limit: r.Limit,
				WindowMS: r.Window.Milliseconds(), SubWindows: r.SubWindows, Burst: r.Burst,
				Calendar: r.Calendar.String(), By: r.Dimensions,
				Quota: shownLimit(r), QuotaWindowMS: shownWindow(r).Milliseconds(),
			}
			if r.Calendar != 0 && r.Location != nil {
				rj.Timezone = r.Location.String()
			}
			pj.Rules = append(pj.Rules, rj)
		}
		out = append(out, pj)
	}
	return c.JSON(http.StatusOK, map[string]any{"policies": out})
}
