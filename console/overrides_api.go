package console

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// OverrideJSON is a per-person override on the wire.
type OverrideJSON struct {
	ID      int64            `json:"id"`
	Kind    string           `json:"kind"` // exempt, block or limit
	Counted bool             `json:"counted,omitempty"`
	Limits  map[string]int64 `json:"limits,omitempty"`
	// Until is when it ends; absent: never (until deleted).
	Until   *time.Time `json:"until,omitempty"`
	Reason  string     `json:"reason,omitempty"`
	By      string     `json:"by,omitempty"`
	Created *time.Time `json:"created,omitempty"`
}

func overrideJSON(o driver.Override) OverrideJSON {
	out := OverrideJSON{ID: o.ID, Kind: o.Kind.String(), Counted: o.Counted, Limits: o.Limits, Reason: o.Reason, By: o.By}
	if !o.Until.IsZero() {
		u := o.Until.UTC()
		out.Until = &u
	}
	if !o.Created.IsZero() {
		c := o.Created.UTC()
		out.Created = &c
	}
	return out
}

// OverridesJSON is the answer of GET /api/v1/overrides.
type OverridesJSON struct {
	Policy    string         `json:"policy"`
	Subject   sdk.Subject    `json:"subject"` // the person: the policy's shard values
	Overrides []OverrideJSON `json:"overrides"`
}

// OverrideRequest is the body of POST /api/v1/overrides.
type OverrideRequest struct {
	Policy string `json:"policy"`
	// Subject gives the policy's shard dimensions (the person; others are
	// refused).
	Subject sdk.Subject `json:"subject"`
	Kind    string      `json:"kind"` // exempt, block or limit
	// Counted: an exempt's attempts are still consumed from the rules.
	Counted bool `json:"counted,omitempty"`
	// Limits maps rule names to their new limits (kind limit only).
	Limits map[string]int64 `json:"limits,omitempty"`
	// Until is when it ends: RFC 3339, or a duration from now ("2h",
	// "3d"); empty: never.
	Until string `json:"until,omitempty"`
	// Reason is required (audited with the person).
	Reason string `json:"reason"`
}

// OverrideDeleteRequest is the body of POST /api/v1/overrides/delete.
type OverrideDeleteRequest struct {
	Policy  string      `json:"policy"`
	Subject sdk.Subject `json:"subject"`
	ID      int64       `json:"id"`
}

// apiTarget reads an API request's policy and person: only the policy's
// shard dimensions may be given.
func (s *Server) apiTarget(policy string, subj sdk.Subject) (*sdk.Policy, sdk.Subject, error) {
	if policy == "" {
		return nil, nil, badRequest("policy is required")
	}
	p, ok := s.snap().byName[policy]
	if !ok {
		return nil, nil, echo.NewHTTPError(http.StatusNotFound, "no such policy")
	}
	for k := range subj {
		if !slices.Contains(p.ShardBy(), k) {
			return nil, nil, badRequest(fmt.Sprintf("an override is kept per person: give only policy %q's shard dimensions, not %q", p.Name(), k))
		}
	}
	return s.overrideTarget(func(k string) string {
		if k == "policy" {
			return policy
		}
		return subj[k]
	})
}

// apiOverrides is GET /api/v1/overrides?policy=P&<shard dimension>=<value>…
func (s *Server) apiOverrides(c echo.Context) error {
	if c.QueryParam("policy") == "" {
		return badRequest("policy is required")
	}
	p, shard, err := s.overrideTarget(c.QueryParam)
	if err != nil {
		return err
	}
	if s.ovr == nil {
		return errNoOverrides
	}
	os, err := s.ovr.Overrides(c.Request().Context(), p, shard)
	if err != nil {
		return overrideError("read", p, err)
	}
	s.backendAnswered()
	out := OverridesJSON{Policy: p.Name(), Subject: shard, Overrides: []OverrideJSON{}}
	for _, o := range os {
		out.Overrides = append(out.Overrides, overrideJSON(o))
	}
	return c.JSON(http.StatusOK, out)
}

// apiOverrideSet is POST /api/v1/overrides (admin): the subject page's
// form as JSON, audited the same way. 201 with the override stored.
func (s *Server) apiOverrideSet(c echo.Context) error {
	var req OverrideRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	p, shard, err := s.apiTarget(req.Policy, req.Subject)
	if err != nil {
		return err
	}
	o, err := s.setOverride(c, p, shard, overrideInput{Kind: req.Kind, Counted: req.Counted, Limits: req.Limits, Until: req.Until, Reason: req.Reason})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, overrideJSON(o))
}

// apiOverrideDelete is POST /api/v1/overrides/delete (admin), audited.
// 404 for an unknown, deleted or ended override.
func (s *Server) apiOverrideDelete(c echo.Context) error {
	var req OverrideDeleteRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	p, shard, err := s.apiTarget(req.Policy, req.Subject)
	if err != nil {
		return err
	}
	if req.ID <= 0 {
		return badRequest("id must be an override's number")
	}
	if err := s.deleteOverride(c, p, shard, req.ID); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"deleted": req.ID})
}
