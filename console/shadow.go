package console

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
)

// versionNote says when, by whom and why version n was applied ("" for
// a policy file, or when the store cannot say).
func (s *Server) versionNote(ctx context.Context, n int64) string {
	if n == 0 || s.cfg.Store == nil {
		return ""
	}
	v, err := s.cfg.Store.Version(ctx, n)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("applied %s by %s: “%s”", fmtTime(v.At), v.By, v.Reason)
}

// shadowView reads what p's shadow rules would have denied over the last
// hour and 24 h, and what its enforced rules denied, from the fleet's
// statistics. Empty when p has no shadow rule and none was shadow in the
// last 24 h.
func (s *Server) shadowView(ctx context.Context, p *sdk.Policy) (shadow, enforced []views.ShadowRow, problem string) {
	day, err := s.cfg.Fleet.Shadow(ctx, p, 24*time.Hour)
	if err == nil && len(day.Rules) == 0 {
		return nil, nil, ""
	}
	var hour fleet.ShadowStats
	if err == nil {
		hour, err = s.cfg.Fleet.Shadow(ctx, p, time.Hour)
	}
	if err != nil {
		hasShadow := false
		for _, r := range p.Rules() {
			hasShadow = hasShadow || r.Shadow
		}
		switch {
		case !hasShadow:
			return nil, nil, ""
		case errors.Is(err, errors.ErrUnsupported):
			return nil, nil, "The backend keeps no statistics: what the shadow rules would have denied is not recorded."
		}
		s.warn.Warn("shadow-stats", "console: reading shadow statistics", "policy", p.Name(), "err", err)
		return nil, nil, "The shadow rules' statistics could not be read: the backend failed (the console's log has the error)."
	}
	byRule := map[string]fleet.ShadowRuleStats{}
	for _, r := range hour.Rules {
		byRule[r.Rule] = r
	}
	for _, d := range day.Rules {
		h := byRule[d.Rule]
		shadow = append(shadow, views.ShadowRow{
			Rule:       d.Rule,
			Attempts1h: h.Attempts, Attempts24h: d.Attempts,
			Allowed1h: h.Allowed, Allowed24h: d.Allowed,
			People1h: h.People, People24h: d.People,
		})
	}
	sh, err := s.cfg.Fleet.Stats(ctx, p, time.Hour)
	if err != nil {
		return shadow, nil, ""
	}
	sd, err := s.cfg.Fleet.Stats(ctx, p, 24*time.Hour)
	if err != nil {
		return shadow, nil, ""
	}
	dayDenied := map[string]int64{}
	for _, r := range sd.Rules {
		dayDenied[r.Rule] = r.Denied
	}
	hourDenied := map[string]int64{}
	for _, r := range sh.Rules {
		hourDenied[r.Rule] = r.Denied
	}
	for _, r := range p.Rules() {
		if r.Shadow {
			continue
		}
		enforced = append(enforced, views.ShadowRow{Rule: r.Name, Attempts1h: hourDenied[r.Name], Attempts24h: dayDenied[r.Name], People1h: -1, People24h: -1})
	}
	return shadow, enforced, ""
}
