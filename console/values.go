package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/sdk"
)

// ValueLister is what the console asks of a Limiter's administration to
// list a person's live values of a nested dimension set (the subject
// page's values sections, GET /api/v1/values). *sdk.Admin implements it;
// the console finds it on Config.Admin with a type assertion. Without it
// the subject page shows no values and the API answers 501.
type ValueLister interface {
	Values(ctx context.Context, p *sdk.Policy, s sdk.Subject, set string, opts sdk.ValuesOptions) (sdk.ValuesPage, error)
}

var _ ValueLister = (*sdk.Admin)(nil)

// markedValues is the ValueLister the console calls, its errors marked
// as the backend's (see markedLimiter).
type markedValues struct{ v ValueLister }

func (m markedValues) Values(ctx context.Context, p *sdk.Policy, s sdk.Subject, set string, opts sdk.ValuesOptions) (sdk.ValuesPage, error) {
	pg, err := m.v.Values(ctx, p, s, set, opts)
	return pg, marked(err)
}

// subjectValuesLimit is how many values the subject page shows per set
// and page.
const subjectValuesLimit = 20

// valuesViews lists, for each nested set of p (sdk.Policy.NestedSets), a
// page of subj's live values: the first page, but for the set named set
// the page at cursor. Errors are shown in the set's section.
func (s *Server) valuesViews(ctx context.Context, p *sdk.Policy, subj sdk.Subject, set, cursor string) []views.ValuesView {
	if s.vals == nil {
		return nil
	}
	var out []views.ValuesView
	base := "/subject?" + subjectQuery(p.Name(), subj)
	for _, name := range p.NestedSets() {
		cur := ""
		if name == set {
			cur = cursor
		}
		out = append(out, s.valuesView(ctx, p, subj, name, cur, base))
	}
	return out
}

// valuesView is one set's section of the subject page: the page of subj's
// values of set at cursor; base is the subject page's URL, which its
// links extend.
func (s *Server) valuesView(ctx context.Context, p *sdk.Policy, subj sdk.Subject, set, cursor, base string) views.ValuesView {
	v := views.ValuesView{Set: set, Anchor: "values-" + set}
	page := func(cur string) string {
		if cur == "" {
			return base + "#" + v.Anchor
		}
		return base + "&" + url.Values{"set": {set}, "cursor": {cur}}.Encode() + "#" + v.Anchor
	}
	pg, err := s.vals.Values(ctx, p, subj, set, sdk.ValuesOptions{Limit: subjectValuesLimit, Cursor: cursor})
	switch {
	case errors.Is(err, sdk.ErrInvalidCursor):
		v.Error, v.FirstURL = "This page of values is no longer valid.", page("")
		return v
	case errors.Is(err, errors.ErrUnsupported):
		s.warn.Warn("values", "console: listing values is unsupported", "policy", p.Name(), "set", set, "err", err)
		v.Error = "This backend cannot list a person's values of this set (details are in the console's log)."
		return v
	case err != nil:
		s.warn.Warn("values", "console: listing values failed", "policy", p.Name(), "set", set, "err", err)
		v.Error = "The values could not be listed: " + backendUnavailable + "."
		return v
	}
	v.Total, v.Partial, v.Dims, v.At = pg.Total, pg.Partial, pg.Dimensions, fmtTime(pg.At)
	if pg.Prev != "" {
		v.PrevURL, v.FirstURL = page(pg.Prev), page("")
	}
	if pg.Next != "" {
		v.NextURL = page(pg.Next)
	}
	for _, val := range pg.Values {
		v.Rows = append(v.Rows, valueRow(p, val, pg.At))
		if val.Subject == nil {
			v.Unnamed++
		}
	}
	return v
}

// valueRow is one value of a set's section.
func valueRow(p *sdk.Policy, val sdk.Value, at time.Time) views.ValueRow {
	row := views.ValueRow{ID: val.ID, EndsIn: fmtCountdown(val.Expires.Sub(at))}
	if !val.Written.IsZero() {
		row.Written, row.WrittenAgo = fmtTime(val.Written), fmtAgo(val.Written, at)
	}
	if val.Subject == nil {
		return row
	}
	row.URL = "/subject?" + subjectQuery(p.Name(), val.Subject)
	shard := p.ShardBy()
	for _, d := range p.Dimensions() {
		if v, ok := val.Subject[d]; ok && !slices.Contains(shard, d) {
			row.Values = append(row.Values, views.Field{Name: d, Value: v})
		}
	}
	for _, rd := range val.Rules {
		row.Rules = append(row.Rules, views.ValueRule{
			Rule: rd.Rule, Used: rd.Used, Limit: rd.Limit, Remaining: rd.Remaining,
			ResetIn: fmtCountdown(rd.ResetAfter), RetryIn: fmtCountdown(rd.RetryAfter),
			Allowed: rd.Allowed, Shadow: rd.Shadow, Before: rd.Before,
		})
	}
	return row
}

// ValuesJSON is the answer of GET /api/v1/values: a page of a person's
// live values of a nested dimension set, most recently written first.
type ValuesJSON struct {
	Policy     string    `json:"policy"`
	Set        string    `json:"set"`
	Dimensions []string  `json:"dimensions"`
	At         time.Time `json:"at"`
	// Total is how many live values the person holds in the set; Partial
	// that the backend stopped at its bound before reading them all.
	Total   int  `json:"total"`
	Partial bool `json:"partial,omitempty"`
	// Next and Prev are the cursors of the pages after and before this
	// one (absent: none).
	Next   string      `json:"next,omitempty"`
	Prev   string      `json:"prev,omitempty"`
	Values []ValueJSON `json:"values"`
}

// ValueJSON is one value of a ValuesJSON page.
type ValueJSON struct {
	// Values are the set's dimension values; absent when the backend does
	// not store the value's name (Redis: a narrow root's values, and those
	// moved into a wide root's hash and not written since), which ID then
	// tells apart.
	Values    map[string]string `json:"values,omitempty"`
	ID        string            `json:"id,omitempty"`
	WrittenAt *time.Time        `json:"written_at,omitempty"`
	ExpiresAt time.Time         `json:"expires_at"`
	// Rules are the set's rules for the value, as GET /api/v1/inspect
	// reports them; absent with Values.
	Rules []RuleJSON `json:"rules,omitempty"`
}

// apiValues is GET /api/v1/values?policy=P&set=S[&cursor=C][&limit=N]&<dimension>=<value>…
func (s *Server) apiValues(c echo.Context) error {
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
	set := c.QueryParam("set")
	if sets := p.NestedSets(); set == "" && len(sets) == 1 {
		set = sets[0]
	}
	limit := sdk.DefaultValuesLimit
	if l := c.QueryParam("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > sdk.MaxValuesLimit {
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("limit must be an integer from 1 to %d", sdk.MaxValuesLimit))
		}
		limit = n
	}
	if s.vals == nil {
		return echo.NewHTTPError(http.StatusNotImplemented, "this console's limiter cannot list a person's values")
	}
	pg, err := s.vals.Values(c.Request().Context(), p, subj, set, sdk.ValuesOptions{Limit: limit, Cursor: c.QueryParam("cursor")})
	switch {
	case errors.Is(err, sdk.ErrInvalidSubject), errors.Is(err, sdk.ErrInvalidRule), errors.Is(err, sdk.ErrInvalidCursor):
		return echo.NewHTTPError(http.StatusBadRequest, err.Error()) // sdk errors never contain subject values
	case errors.Is(err, errors.ErrUnsupported):
		s.warn.Warn("api-values", "console: api values unsupported", "policy", p.Name(), "err", err)
		return echo.NewHTTPError(http.StatusNotImplemented, "this backend cannot list a person's values of this set (details are in the console's log)")
	case err != nil:
		s.warn.Warn("api-values", "console: api values failed", "policy", p.Name(), "err", err)
		return echo.NewHTTPError(http.StatusServiceUnavailable, "could not list the values: "+backendUnavailable)
	}
	s.backendAnswered()
	out := ValuesJSON{
		Policy: pg.Policy, Set: pg.Set, Dimensions: pg.Dimensions, At: pg.At,
		Total: pg.Total, Partial: pg.Partial, Next: pg.Next, Prev: pg.Prev, Values: []ValueJSON{},
	}
	for _, v := range pg.Values {
		vj := ValueJSON{ID: v.ID, ExpiresAt: v.Expires}
		if !v.Written.IsZero() {
			w := v.Written
			vj.WrittenAt = &w
		}
		if v.Subject != nil {
			vj.Values = map[string]string{}
			for _, d := range pg.Dimensions {
				vj.Values[d] = v.Subject[d]
			}
			vj.Rules = rulesJSON(v.Rules)
		}
		out.Values = append(out.Values, vj)
	}
	return c.JSON(http.StatusOK, out)
}
