package conformance

import (
	"slices"
	"time"
)

// shadowNeverDenies: a shadow rule is evaluated and reported, consumes
// only what it admits, never denies, is named in ShadowDenied and leaves
// Denied, RetryAfter and CostTooHigh to the enforced rules.
func shadowNeverDenies(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	enf := e.fixed("e", 5, w)
	sh := e.fixed("s", 2, w).AsShadow()
	for i := int64(1); i <= 2; i++ {
		d := e.take(1, enf, sh)
		if !d.Allowed || d.Rules[1].Used != i || !d.Rules[1].Shadow || d.Rules[0].Shadow || len(d.ShadowDenied) != 0 {
			e.t.Fatalf("Take(e+s) #%d = allowed %t, rules %s, shadow denied %v, want allowed with s (shadow) at %d", i, d.Allowed, fmtRules(d.Rules), d.ShadowDenied, i)
		}
	}
	for i := int64(3); i <= 5; i++ {
		d := e.take(1, enf, sh)
		if !d.Allowed || len(d.Denied) != 0 || d.RetryAfter != 0 || d.CostTooHigh {
			e.t.Errorf("Take(e+s) #%d = allowed %t, denied %v, retry %v, cost too high %t, want allowed: a shadow rule never denies", i, d.Allowed, d.Denied, d.RetryAfter, d.CostTooHigh)
		}
		if !slices.Equal(d.ShadowDenied, []string{"s"}) || d.Rules[1].Allowed || d.Rules[1].Used != 2 || d.Rules[0].Used != i {
			e.t.Errorf("Take(e+s) #%d = shadow denied %v, rules %s, want s named in ShadowDenied, not admitting and not consumed (2), e at %d", i, d.ShadowDenied, fmtRules(d.Rules), i)
		}
	}
	d := e.take(1, enf, sh)
	if d.Allowed || !slices.Equal(d.Denied, []string{"e"}) || !slices.Equal(d.ShadowDenied, []string{"s"}) ||
		d.RetryAfter != d.Rules[0].RetryAfter || d.RetryAfter <= 0 {
		e.t.Errorf("Take(e+s) #6 = allowed %t, denied %v, shadow denied %v, retry %v, rules %s, want denied by e alone, its retry, s in ShadowDenied",
			d.Allowed, d.Denied, d.ShadowDenied, d.RetryAfter, fmtRules(d.Rules))
	}
	// The trail: one shadow entry per take s would have denied (#3 to #6),
	// and e's denial of #6.
	_, tr := e.inspect(enf, sh)
	var shadow, enforced int
	for _, x := range tr {
		switch {
		case x.Shadow && x.Rule == "s" && x.Override == 0:
			shadow++
		case !x.Shadow && x.Rule == "e":
			enforced++
		default:
			e.t.Errorf("trail entry %+v, want a shadow entry of s or a denial by e", x)
		}
	}
	if shadow != 4 || enforced != 1 {
		e.t.Errorf("Inspect(e+s) trail = %d shadow entries, %d denials by e, want 4 and 1 (%+v)", shadow, enforced, tr)
	}
	// Shadow is not identity: the enforced rule reads the same counts.
	d = e.peek(1, e.fixed("s", 2, w))
	if d.Allowed || d.Rules[0].Used != 2 || d.Rules[0].Shadow {
		e.t.Errorf("Peek(s enforced) = allowed %t, rules %s, want denied at 2/2: turning shadow off keeps the counts", d.Allowed, fmtRules(d.Rules))
	}
}

// shadowCostTooHigh: a cost a shadow rule can never admit is not the
// decision's CostTooHigh.
func shadowCostTooHigh(e *env) {
	w := time.Hour
	enf := e.fixed("e", 5, w)
	sh := e.fixed("s", 2, w).AsShadow()
	d := e.take(3, enf, sh)
	if !d.Allowed || d.CostTooHigh || !d.Rules[1].CostTooHigh || !slices.Equal(d.ShadowDenied, []string{"s"}) || d.Rules[0].Used != 3 {
		e.t.Errorf("Take(e+s, cost 3) = allowed %t, cost too high %t, shadow denied %v, rules %s, want allowed (e 3/5), s cost too high in its rule only",
			d.Allowed, d.CostTooHigh, d.ShadowDenied, fmtRules(d.Rules))
	}
}

func shadowCases() []testCase {
	return []testCase{
		{name: "NeverDenies", needs: inspector | peeker, run: shadowNeverDenies},
		{name: "CostTooHigh", run: shadowCostTooHigh},
	}
}
