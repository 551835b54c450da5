package conformance

import (
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// The values case: a person's live values of a nested dimension set
// (Admin.Values, driver.ValueLister).

// valueDim is the nested set's dimension beyond dim.
const valueDim = "v"

// valuesAll lists every page of the person's values under p at limit; it
// returns them and the backend's clock at the first page.
func (e *env) valuesAll(p *sdk.Policy, limit int) ([]sdk.Value, time.Time) {
	e.t.Helper()
	var out []sdk.Value
	var at time.Time
	for cur, k := "", 0; ; k++ {
		pg, err := e.lim.Admin().Values(bg(), p, e.subject(), valueDim, sdk.ValuesOptions{Limit: limit, Cursor: cur})
		if err != nil {
			e.t.Fatalf("Values(page %d) = %v", k, err)
		}
		if pg.Set != valueDim || (k == 0) != (pg.Prev == "") || pg.Next != "" && len(pg.Values) != limit {
			e.t.Fatalf("Values(page %d) = set %q, %d values, prev %q, next %q; want set %q, full pages but the last, a prev on all but the first",
				k, pg.Set, len(pg.Values), pg.Prev, pg.Next, valueDim)
		}
		if k == 0 {
			at = pg.At
		}
		out = append(out, pg.Values...)
		if pg.Next == "" {
			return out, at
		}
		cur = pg.Next
	}
}

// valuesCase: a person takes n values, then the later half again. Values
// lists each live value once over its pages; those it names (a backend
// may list some by ID alone: the Redis backend those it keeps without
// their name) most recently written first, with Inspect's counters; once
// the first half's state has ended it lists the second half alone, and
// nothing once every value's has.
func valuesCase(e *env) {
	const n = 80
	ws := e.pick(time.Minute, e.slow*2*time.Second)
	p := e.policy(e.fixed("person", 100000, time.Hour), sdk.SlidingLog("value", 2, ws).By(dim, valueDim))
	value := func(i int) string { return fmt.Sprintf("v%02d:%%", i) } // escaped in keys
	order := map[string]int{}                                         // value -> its last take's place
	seq := 0
	take := func(i int) sdk.Decision {
		e.t.Helper()
		s := e.subject()
		s[valueDim] = value(i)
		d, err := e.lim.Take(bg(), p, sdk.Attempt{Subject: s})
		if err != nil || !d.Allowed {
			e.t.Fatalf("Take(value %d) = %v, %v; want allowed", i, d.Denied, err)
		}
		order[value(i)] = seq
		seq++
		if e.fake != nil {
			e.fake.Advance(time.Millisecond) // distinct writes, in order
		}
		return d
	}
	var first, half, again, last sdk.Decision
	for i := range n {
		d := take(i)
		switch i {
		case 0:
			first = d
		case n/2 - 1:
			half = d
		}
	}
	e.advanceTo(first.At.Add(ws / 2))
	for i := n / 2; i < n; i++ {
		d := take(i)
		if i == n/2 {
			again = d
		}
		last = d
	}
	vals, at := e.valuesAll(p, 7)
	e.before(sdk.Decision{At: at}, first.At.Add(ws), "Values of every value")
	e.checkValues(p, vals, order, n, at)

	// Once the first half's state has ended, the second half alone.
	e.advanceTo(half.At.Add(ws + e.tol + time.Millisecond))
	pg, err := e.lim.Admin().Values(bg(), p, e.subject(), valueDim, sdk.ValuesOptions{Limit: sdk.MaxValuesLimit})
	if err != nil {
		e.t.Fatalf("Values = %v", err)
	}
	e.before(sdk.Decision{At: pg.At}, again.At.Add(ws), "Values after the first half ended")
	if pg.Total != n/2 || len(pg.Values) != n/2 {
		e.t.Errorf("Values after the first half ended = %d values (total %d), want the %d taken again", len(pg.Values), pg.Total, n/2)
	}
	for _, v := range pg.Values {
		if v.Subject != nil && order[v.Subject[valueDim]] < n {
			e.t.Errorf("value %q listed after its state ended", v.Subject[valueDim])
		}
	}
	e.advanceTo(last.At.Add(ws + e.tol + time.Millisecond))
	pg, err = e.lim.Admin().Values(bg(), p, e.subject(), valueDim, sdk.ValuesOptions{})
	if err != nil || pg.Total != 0 || len(pg.Values) != 0 {
		e.t.Errorf("Values after every value ended = %d values (total %d), %v; want none", len(pg.Values), pg.Total, err)
	}
}

// checkValues checks a listing of every value (n, order: each one's last
// take's place, later greater) read from at on: each once (by subject, or
// by ID when unnamed), the named first and most recently written first
// (in take order where a fake clock made every write's instant distinct),
// with the counters Inspect reports for them.
func (e *env) checkValues(p *sdk.Policy, vals []sdk.Value, order map[string]int, n int, at time.Time) {
	e.t.Helper()
	seen := map[string]bool{}
	named := 0
	for i, v := range vals {
		key := "id " + v.ID
		if v.Subject != nil {
			named++
			key = v.Subject[valueDim]
			if _, ok := order[key]; !ok || len(v.Subject) != 2 || v.Subject[dim] != e.subject()[dim] {
				e.t.Errorf("value %d: subject %q, not one taken", i, v.Subject)
			}
		} else if v.ID == "" || v.Rules != nil {
			e.t.Errorf("value %d: no subject, id %q, rules %v: want an ID and no rules", i, v.ID, v.Rules)
		}
		if seen[key] {
			e.t.Errorf("value %s listed twice", key)
		}
		seen[key] = true
		if i == 0 {
			continue
		}
		prev := vals[i-1]
		switch {
		case prev.Subject == nil && v.Subject != nil:
			e.t.Errorf("value %d (%s) listed after an unnamed one", i, key)
		case v.Subject != nil && prev.Written.Before(v.Written):
			e.t.Errorf("value %d (%s) written %v, after value %d (%v)", i, key, v.Written, i-1, prev.Written)
		case v.Subject != nil && e.fake != nil && order[prev.Subject[valueDim]] < order[key]:
			e.t.Errorf("value %s listed after %s, taken before it", key, prev.Subject[valueDim])
		}
	}
	if len(vals) != n || named == 0 {
		e.t.Fatalf("Values = %d values, %d of them named; want %d, some named", len(vals), named, n)
	}
	for _, v := range vals {
		if v.Subject == nil {
			continue
		}
		in, err := e.lim.Admin().Inspect(bg(), p, v.Subject)
		if err != nil {
			e.t.Fatalf("Inspect(%q) = %v", v.Subject[valueDim], err)
		}
		tol := in.At.Sub(at) + e.tol // Values read earlier: its durations are longer
		if len(v.Rules) != 1 || len(in.Rules) != 2 || v.Rules[0].Rule != "value" ||
			!sameRule(v.Rules[0], in.Rules[1], tol) || v.Rules[0].ResetAfter < in.Rules[1].ResetAfter-e.tol {
			e.t.Errorf("value %q: rules %s, want Inspect's %s", v.Subject[valueDim], fmtRules(v.Rules), fmtRules(in.Rules[1:]))
		}
	}
}
