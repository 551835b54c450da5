package conformance

import (
	"errors"
	"slices"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The override cases: every kind (block, exempt counted or not, limits),
// their precedence, expiry, IDs, deletion and trail entries.

// ovPolicy is policy "p" of rules reading overrides.
func (e *env) ovPolicy(rules ...sdk.Rule) *sdk.Policy {
	e.t.Helper()
	return e.policyWith([]sdk.PolicyOption{sdk.WithOverrides()}, rules...)
}

// setOverride sets o for the test's subject under p.
func (e *env) setOverride(p *sdk.Policy, o driver.Override) driver.Override {
	e.t.Helper()
	got, err := e.lim.Admin().SetOverride(bg(), p, e.subject(), o)
	if err != nil {
		e.t.Fatalf("SetOverride(%v) = %v", o.Kind, err)
	}
	if got.ID <= 0 || got.Kind != o.Kind || got.Created.IsZero() || got.Reason != o.Reason || got.By != o.By || !got.Until.Equal(o.Until) {
		e.t.Fatalf("SetOverride(%+v) = %+v, want it as given with an ID and Created", o, got)
	}
	return got
}

// takeOv takes cost for the test's subject under p.
func (e *env) takeOv(label string, p *sdk.Policy, cost int64) sdk.Decision {
	e.t.Helper()
	return e.takeP(label, p, "", cost)
}

func overrideBlock(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	r := e.fixed("r", 5, w)
	p := e.ovPolicy(r)
	e.takeOv("Take before the block", p, 1)
	hold := e.pick(time.Minute, e.slow*time.Second)
	until := e.now().Add(hold)
	b := e.setOverride(p, driver.Override{Kind: driver.Block, Until: until, Reason: "abuse", By: "ops"})
	d := e.takeOv("Take under a block", p, 1)
	e.before(d, until, "Take under a block")
	if d.Allowed || len(d.Denied) != 0 || d.Override.ID != b.ID || d.Override.Kind != driver.Block ||
		!nearDur(d.RetryAfter, until.Sub(d.At), e.tol) || len(d.Rules) != 1 || d.Rules[0].Used != 1 {
		e.t.Errorf("Take under block #%d = allowed %t, denied %v, override #%d, retry %v, rules %s, want denied by the block (no rule), retry %v, r reported at 1",
			b.ID, d.Allowed, d.Denied, d.Override.ID, d.RetryAfter, fmtRules(d.Rules), until.Sub(d.At))
	}
	in, err := e.lim.Admin().Inspect(bg(), p, e.subject())
	e.stillBefore(until, "Inspect under a block")
	if err != nil {
		e.t.Fatalf("Inspect = %v", err)
	}
	if len(in.Denials) != 1 || in.Denials[0].Override != b.ID || in.Denials[0].Rule != "" || in.Denials[0].Shadow ||
		!near(in.Denials[0].Until(), until, e.tol) {
		e.t.Errorf("Inspect trail = %+v, want one entry of block #%d without rule, until %v", in.Denials, b.ID, until)
	}
	if len(in.Rules) != 1 || in.Rules[0].Used != 1 {
		e.t.Errorf("Inspect under a block = rules %s, want r at 1 (the block consumed nothing)", fmtRules(in.Rules))
	}
	e.advanceTo(until.Add(e.pick(time.Millisecond, 20*time.Millisecond)))
	d = e.takeOv("Take after the block ended", p, 1)
	if !d.Allowed || d.Override.ID != 0 || d.Rules[0].Used != 2 {
		e.t.Errorf("Take after the block ended = allowed %t, override #%d, rules %s, want allowed at 2 without override", d.Allowed, d.Override.ID, fmtRules(d.Rules))
	}
	if list, err := e.lim.Admin().Overrides(bg(), p, e.subject()); err != nil || len(list) != 0 {
		e.t.Errorf("Overrides after the block ended = %+v, %v, want none (ended overrides are not listed)", list, err)
	}
	if err := e.lim.Admin().DeleteOverride(bg(), p, e.subject(), b.ID); !errors.Is(err, sdk.ErrOverrideNotFound) {
		e.t.Errorf("DeleteOverride(ended #%d) = %v, want ErrOverrideNotFound", b.ID, err)
	}
}

func overrideBlockForever(e *env) {
	r := e.fixed("r", 5, time.Hour)
	p := e.ovPolicy(r)
	b := e.setOverride(p, driver.Override{Kind: driver.Block, Reason: "fraud"})
	d := e.takeOv("Take under a block without end", p, 1)
	if d.Allowed || d.RetryAfter != 0 || d.Override.ID != b.ID || len(d.Denied) != 0 {
		e.t.Errorf("Take under a block without end = allowed %t, retry %v, override #%d, denied %v, want denied by #%d with no retry", d.Allowed, d.RetryAfter, d.Override.ID, d.Denied, b.ID)
	}
	if err := e.lim.Admin().DeleteOverride(bg(), p, e.subject(), b.ID); err != nil {
		e.t.Fatalf("DeleteOverride(#%d) = %v", b.ID, err)
	}
	if d = e.takeOv("Take after the block was deleted", p, 1); !d.Allowed || d.Override.ID != 0 {
		e.t.Errorf("Take after the block was deleted = allowed %t, override #%d, want allowed", d.Allowed, d.Override.ID)
	}
	if err := e.lim.Admin().DeleteOverride(bg(), p, e.subject(), b.ID); !errors.Is(err, sdk.ErrOverrideNotFound) {
		e.t.Errorf("DeleteOverride(deleted #%d) = %v, want ErrOverrideNotFound", b.ID, err)
	}
}

func overrideExempt(counted bool) func(e *env) {
	return func(e *env) {
		w := time.Hour
		e.ensureRoom(w, 10*time.Second)
		r := e.fixed("r", 1, w)
		p := e.ovPolicy(r)
		e.takeOv("Take #1", p, 1)
		if d := e.takeOv("Take #2", p, 1); d.Allowed {
			e.t.Fatalf("Take #2 = allowed, want denied (1/1)")
		}
		x := e.setOverride(p, driver.Override{Kind: driver.Exempt, Counted: counted, Reason: "vip"})
		for i := int64(1); i <= 2; i++ {
			d := e.takeOv("Take under an exempt", p, 1)
			wantUsed := int64(1)
			if counted {
				wantUsed = 1 + i
			}
			if !d.Allowed || len(d.Denied) != 0 || d.RetryAfter != 0 || d.Override.ID != x.ID || d.Override.Kind != driver.Exempt ||
				d.Rules[0].Allowed || d.Rules[0].Used != wantUsed || d.Rules[0].Remaining != 0 {
				e.t.Errorf("Take #%d under exempt (counted %t) = allowed %t, denied %v, override #%d, rules %s, want allowed by #%d, r not admitting and at %d",
					i, counted, d.Allowed, d.Denied, d.Override.ID, fmtRules(d.Rules), x.ID, wantUsed)
			}
		}
		if _, tr := e.inspect(r); len(tr) != 1 {
			e.t.Errorf("Inspect trail = %+v, want only the denial before the exempt (exempted attempts are allowed)", tr)
		}
	}
}

func overrideLimit(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	r := e.fixed("r", 2, w)
	other := e.fixed("o", 100, w)
	p := e.ovPolicy(r, other)
	hold := e.pick(time.Minute, e.slow*time.Second)
	until := e.now().Add(hold)
	a := e.setOverride(p, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"r": 3}, Until: until, Reason: "partner"})
	b := e.setOverride(p, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"r": 4}, Until: until, Reason: "partner+"})
	if b.ID <= a.ID {
		e.t.Fatalf("SetOverride IDs = %d then %d, want increasing", a.ID, b.ID)
	}
	for i := int64(1); i <= 4; i++ {
		d := e.takeOv("Take under limit overrides", p, 1)
		e.before(d, until, "Take under limit overrides")
		if !d.Allowed || d.Rules[0].Limit != 4 || d.Rules[0].Used != i || d.Rules[1].Limit != 100 || d.Override.ID != b.ID || d.Override.Kind != driver.Limit {
			e.t.Errorf("Take #%d under limit overrides = allowed %t, override #%d, rules %s, want allowed with r's limit 4 (the latest, #%d) and o's unchanged",
				i, d.Allowed, d.Override.ID, fmtRules(d.Rules), b.ID)
		}
	}
	d := e.takeOv("Take #5 under limit overrides", p, 1)
	e.before(d, until, "Take #5 under limit overrides")
	if d.Allowed || !slices.Equal(d.Denied, []string{"r"}) || d.Rules[0].Limit != 4 || d.Override.ID != b.ID {
		e.t.Errorf("Take #5 under limit overrides = allowed %t, denied %v, rules %s, want denied by r at 4/4, override #%d", d.Allowed, d.Denied, fmtRules(d.Rules), b.ID)
	}
	in, err := e.lim.Admin().Inspect(bg(), p, e.subject())
	if err != nil || len(in.Rules) != 2 || in.Rules[0].Limit != 4 {
		e.t.Errorf("Inspect under limit overrides = %+v, %v, want r's limit 4", in.Rules, err)
	}
	list, err := e.lim.Admin().Overrides(bg(), p, e.subject())
	e.stillBefore(until, "Inspect and Overrides under limit overrides")
	if err != nil || len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID || list[1].Limits["r"] != 4 {
		e.t.Errorf("Overrides = %+v, %v, want #%d and #%d by ID", list, err, a.ID, b.ID)
	}
	e.advanceTo(until.Add(e.pick(time.Millisecond, 20*time.Millisecond)))
	d = e.peekP(p, "")
	if d.Allowed || d.Rules[0].Limit != 2 || d.Override.ID != 0 {
		e.t.Errorf("Peek after the overrides ended = allowed %t, override #%d, rules %s, want denied at 4/2 without override", d.Allowed, d.Override.ID, fmtRules(d.Rules))
	}
}

// overridePrecedence: a block before an exempt before limits.
func overridePrecedence(e *env) {
	r := e.fixed("r", 1, time.Hour)
	p := e.ovPolicy(r)
	lim := e.setOverride(p, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"r": 10}})
	ex := e.setOverride(p, driver.Override{Kind: driver.Exempt})
	blk := e.setOverride(p, driver.Override{Kind: driver.Block})
	if d := e.takeOv("Take under limit+exempt+block", p, 1); d.Allowed || d.Override.ID != blk.ID || d.Rules[0].Limit != 10 {
		e.t.Errorf("Take under limit+exempt+block = allowed %t, override #%d, rules %s, want denied by block #%d (limits still applied: 10)", d.Allowed, d.Override.ID, fmtRules(d.Rules), blk.ID)
	}
	if err := e.lim.Admin().DeleteOverride(bg(), p, e.subject(), blk.ID); err != nil {
		e.t.Fatal(err)
	}
	if d := e.takeOv("Take under limit+exempt", p, 1); !d.Allowed || d.Override.ID != ex.ID || d.Rules[0].Used != 0 {
		e.t.Errorf("Take under limit+exempt = allowed %t, override #%d, rules %s, want allowed by exempt #%d, uncounted", d.Allowed, d.Override.ID, fmtRules(d.Rules), ex.ID)
	}
	if err := e.lim.Admin().DeleteOverride(bg(), p, e.subject(), ex.ID); err != nil {
		e.t.Fatal(err)
	}
	if d := e.takeOv("Take under limit", p, 1); !d.Allowed || d.Override.ID != lim.ID || d.Rules[0].Used != 1 || d.Rules[0].Limit != 10 {
		e.t.Errorf("Take under limit = allowed %t, override #%d, rules %s, want allowed under limit #%d at 1/10", d.Allowed, d.Override.ID, fmtRules(d.Rules), lim.ID)
	}
	// Another subject has none of them.
	if d := e.takeP("Take for another subject", p, "other", 1); d.Override.ID != 0 || d.Rules[0].Limit != 1 {
		e.t.Errorf("Take for another subject = override #%d, rules %s, want no override", d.Override.ID, fmtRules(d.Rules))
	}
	// A policy without WithOverrides reads none.
	if d := e.take(1, r); d.Override.ID != 0 || d.Rules[0].Limit != 1 {
		e.t.Errorf("Take under a policy without overrides = override #%d, rules %s, want none read", d.Override.ID, fmtRules(d.Rules))
	}
}

// overrideIDs: IDs are unique across subjects, the list holds the live
// ones by ID, unknown IDs are not found.
func overrideIDs(e *env) {
	p := e.ovPolicy(e.fixed("r", 1, time.Hour))
	a := e.setOverride(p, driver.Override{Kind: driver.Exempt, Counted: true})
	o, err := e.lim.Admin().SetOverride(bg(), p, e.subject("x"), driver.Override{Kind: driver.Exempt})
	if err != nil {
		e.t.Fatal(err)
	}
	c := e.setOverride(p, driver.Override{Kind: driver.Block, Reason: "r", By: "b"})
	if !(a.ID < o.ID && o.ID < c.ID) {
		e.t.Errorf("SetOverride IDs = %d, %d (another subject), %d, want increasing", a.ID, o.ID, c.ID)
	}
	list, err := e.lim.Admin().Overrides(bg(), p, e.subject())
	if err != nil || len(list) != 2 || list[0].ID != a.ID || !list[0].Counted || list[1].ID != c.ID || list[1].Reason != "r" || list[1].By != "b" {
		e.t.Errorf("Overrides = %+v, %v, want #%d (counted) and #%d by ID", list, err, a.ID, c.ID)
	}
	if err := e.lim.Admin().DeleteOverride(bg(), p, e.subject(), o.ID); !errors.Is(err, sdk.ErrOverrideNotFound) {
		e.t.Errorf("DeleteOverride(another subject's #%d) = %v, want ErrOverrideNotFound", o.ID, err)
	}
	if err := e.lim.Admin().DeleteOverride(bg(), p, e.subject(), c.ID+1000); !errors.Is(err, sdk.ErrOverrideNotFound) {
		e.t.Errorf("DeleteOverride(unknown) = %v, want ErrOverrideNotFound", err)
	}
	if _, err := e.lim.Admin().SetOverride(bg(), p, e.subject(), driver.Override{Kind: driver.Block, Until: e.now().Add(-time.Second)}); !errors.Is(err, sdk.ErrInvalidOverride) {
		e.t.Errorf("SetOverride(until past) = %v, want ErrInvalidOverride", err)
	}
}

func overrideCases() []testCase {
	return []testCase{
		{name: "Block", needs: overrider | inspector, run: overrideBlock},
		{name: "BlockWithoutEnd", needs: overrider, run: overrideBlockForever},
		{name: "ExemptUncounted", needs: overrider | inspector, run: overrideExempt(false)},
		{name: "ExemptCounted", needs: overrider | inspector, run: overrideExempt(true)},
		{name: "Limit", needs: overrider | inspector | peeker, run: overrideLimit},
		{name: "Precedence", needs: overrider, run: overridePrecedence},
		{name: "IDs", needs: overrider, run: overrideIDs},
	}
}
