package sdk

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// The page sizes of Admin.Values: ValuesOptions.Limit 0 means
// DefaultValuesLimit, and a larger one than MaxValuesLimit is cut to it.
const (
	DefaultValuesLimit = 20
	MaxValuesLimit     = 100
)

// valuesInFlight bounds the inspections Admin.Values runs at once for
// one page.
const valuesInFlight = 8

// ErrInvalidCursor is returned by Admin.Values for a cursor that no
// ValuesPage of the same backend gave.
var ErrInvalidCursor = driver.ErrInvalidCursor

// ValuesOptions selects a page of Admin.Values.
type ValuesOptions struct {
	// Limit is the most values the page holds: 0 means
	// DefaultValuesLimit; more than MaxValuesLimit means MaxValuesLimit.
	Limit int
	// Cursor is "" for the first page (the most recently written
	// values), else the Next or Prev of a page of the same person and set.
	Cursor string
}

// ValuesPage is one page of a person's live values of a nested dimension
// set (Admin.Values).
type ValuesPage struct {
	Policy string
	// Set is the set's name (Policy.NestedSets) and Dimensions its
	// dimensions beyond the shard ones, sorted.
	Set        string
	Dimensions []string
	// At is the backend's clock when it listed the values.
	At time.Time
	// Values are the page's values: the most recently written first, then
	// those whose last write the backend does not know, the latest expiry
	// first.
	Values []Value
	// Total is how many live values of the set the person holds, as far as
	// the backend looked (Partial).
	Total int
	// Partial reports that the backend stopped before it had read every
	// stored value of the person (the Redis backend reads at most
	// driver.MaxValuesScan of a wide root's): the order, the pages and
	// Total cover those it read.
	Partial bool
	// Next and Prev are the cursors of the pages after and before this
	// one (ValuesOptions.Cursor); "" when there is none.
	Next, Prev string
}

// Value is one value of a person's nested dimension set with live state.
type Value struct {
	// Subject is the value's subject: the person's shard values and the
	// set's dimension values, as a lookup (Inspect) takes it. It is nil
	// when the backend does not store the value's name: the Redis backend
	// keeps a narrow root's values, and those moved into a wide root's hash
	// and not written since, by a hash of their key (docs/DESIGN.md, "Wide
	// subjects"); ID tells them apart.
	Subject Subject
	// ID is the backend's own id of the value's state, stable while it
	// lives (Redis: the section's id, 16 hex digits); "" on the memory
	// backend.
	ID string
	// Written is when the value's state was last written (the backend's
	// clock); zero when the backend does not store it.
	Written time.Time
	// Expires is when the value's state stops mattering.
	Expires time.Time
	// Rules are the set's rules for Subject as Inspect reports them (a
	// cost-1 peek at the backend's clock), each preceded by its former
	// selves still in reach (RuleDecision.Before); nil when Subject is.
	Rules []RuleDecision
}

// NestedSets returns the names of p's dimension sets nested under its
// shard dimensions (ShardBy): for each set of dimensions some rule is
// keyed by beyond the shard ones, those extra dimensions, sorted and
// comma-separated ("campaign"), in policy order of the set's first rule.
// A person may hold state for many values of such a set (Admin.Values
// lists them); nil when every rule is keyed by the shard dimensions alone.
func (p *Policy) NestedSets() []string {
	if p == nil {
		return nil
	}
	var out []string
	for i := range p.rules {
		if p.firstOfGroup[i] == i && len(p.sorted[i]) > 0 {
			out = append(out, strings.Join(p.sorted[i], ","))
		}
	}
	return out
}

// nestedSet returns the index of the first rule of p's nested set named
// set (its dimensions in any order). Errors wrap ErrInvalidRule.
func (p *Policy) nestedSet(set string) (int, error) {
	sets := p.NestedSets()
	if len(sets) == 0 {
		return 0, fmt.Errorf("%w: policy %q has no dimension set nested under its shard dimensions (%s): every rule is keyed by them alone",
			ErrInvalidRule, p.name, strings.Join(p.shardBy, ", "))
	}
	dims := strings.Split(set, ",")
	slices.Sort(dims)
	name := strings.Join(dims, ",")
	for i := range p.rules {
		if p.firstOfGroup[i] == i && len(p.sorted[i]) > 0 && strings.Join(p.sorted[i], ",") == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: policy %q has no nested dimension set %q (its nested sets: %s)", ErrInvalidRule, p.name, set, strings.Join(sets, "; "))
}

// Values lists a page of the values of the nested dimension set named set
// (Policy.NestedSets: "campaign") that the person s holds live state for:
// the most recently written first, each with its subject and the set's
// rules as Inspect reports them for it. s must give the shard dimensions
// (ShardBy), else the error wraps ErrInvalidSubject; its other values are
// ignored. A policy without nested sets, or no set of that name, is an
// error wrapping ErrInvalidRule; a cursor no page gave, ErrInvalidCursor.
//
// The backend must list values (driver.ValueLister) and inspect (the
// memory and Redis backends do), else the error wraps
// errors.ErrUnsupported. The memory backend knows every value's name and
// last write; the Redis backend knows them for the values of a wide root
// written since it went wide (every value of a set the policy declares
// wide, WithWide), and lists the others by ID, after them, without
// Subject or Rules (docs/DESIGN.md, "Wide subjects"). Each named
// value of the page is inspected as Inspect would (at most 8 at once,
// without reading the trail): a backend failure there, as in the listing,
// is returned as an error. Like Inspect, Values consumes nothing.
func (ad *Admin) Values(ctx context.Context, p *Policy, s Subject, set string, opts ValuesOptions) (ValuesPage, error) {
	l := ad.lim()
	if err := l.supports("values", opInspect); err != nil {
		return ValuesPage{}, err
	}
	vl, ok := l.b.(driver.ValueLister)
	if !ok {
		return ValuesPage{}, fmt.Errorf("sdk: values: backend %T cannot list a subject's values: %w", l.b, errors.ErrUnsupported)
	}
	req, person, first, err := ad.valuesRequest(p, s, set, opts)
	if err != nil {
		return ValuesPage{}, fmt.Errorf("sdk: values: %w", err)
	}
	lctx, cancel := l.withTimeout(ctx)
	pg, err := vl.ListValues(lctx, req)
	cancel()
	if err != nil {
		return ValuesPage{}, fmt.Errorf("sdk: values: %w", err)
	}
	out := ValuesPage{
		Policy:     p.name,
		Set:        strings.Join(p.sorted[first], ","),
		Dimensions: slices.Clone(p.sorted[first]),
		At:         pg.Now,
		Values:     make([]Value, len(pg.Values)),
		Total:      pg.Total,
		Partial:    pg.Partial,
		Next:       pg.Next,
		Prev:       pg.Prev,
	}
	groups := make([]string, len(pg.Values))
	for i, v := range pg.Values {
		out.Values[i] = Value{ID: v.ID, Written: v.Written, Expires: v.Expires}
		if v.Group != "" {
			out.Values[i].Subject = valueSubject(person, p.sorted[first], req.Set, v.Group)
			groups[i] = v.Group
		}
	}
	if err := ad.inspectValues(ctx, p, out.Values, groups); err != nil {
		return ValuesPage{}, fmt.Errorf("sdk: values: %w", err)
	}
	return out, nil
}

// valuesRequest returns the driver's request for Values's arguments,
// the person (s's shard values) and the index of the set's first rule.
func (ad *Admin) valuesRequest(p *Policy, s Subject, set string, opts ValuesOptions) (_ driver.ValuesRequest, person Subject, first int, _ error) {
	if err := p.valid(); err != nil {
		return driver.ValuesRequest{}, nil, 0, err
	}
	first, err := p.nestedSet(set)
	if err != nil {
		return driver.ValuesRequest{}, nil, 0, err
	}
	// The person: the shard values alone; a value's subject adds the set's.
	person = make(Subject, len(p.shardBy)+len(p.sorted[first]))
	for _, d := range p.shardBy {
		v, err := s.value(d)
		if err != nil {
			return driver.ValuesRequest{}, nil, 0, err
		}
		person[d] = v
	}
	base, err := appendBase(nil, ad.lim().prefix, p, person)
	if err != nil {
		return driver.ValuesRequest{}, nil, 0, err
	}
	rules, err := ad.setRules(p, first, person)
	if err != nil {
		return driver.ValuesRequest{}, nil, 0, err
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = DefaultValuesLimit
	}
	req := driver.ValuesRequest{
		Root:   string(base) + "=",
		Set:    string(base) + p.groups[first],
		Rules:  rules,
		Limit:  min(limit, MaxValuesLimit),
		Cursor: opts.Cursor,
	}
	return req, person, first, nil
}

// setRules returns the rules of p's nested set whose first rule is first
// (their predecessors in reach included), resolved for person and a
// placeholder value of each of the set's dimensions: what a backend reads
// of them is their identity (driver.ValuesRequest.Rules).
func (ad *Admin) setRules(p *Policy, first int, person Subject) ([]driver.Rule, error) {
	l := ad.lim()
	tmpl := maps.Clone(person)
	for _, d := range p.sorted[first] {
		tmpl[d] = "-"
	}
	res, err := resolve(l.prefix, p, tmpl, true, l.now)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(res.rules, func(r driver.Rule) bool { return r.Name == p.rules[first].Name })
	var out []driver.Rule
	for _, r := range res.rules {
		if r.Group == res.rules[i].Group {
			out = append(out, r)
		}
	}
	return out, nil
}

// valueSubject returns the subject of the value whose set key is group
// (setKey, ':', each of dims' escaped values): person and those values;
// nil when group is not of that shape.
func valueSubject(person Subject, dims []string, setKey, group string) Subject {
	rest, ok := strings.CutPrefix(group, setKey+":")
	if !ok {
		return nil
	}
	vals := strings.Split(rest, ":")
	if len(vals) != len(dims) {
		return nil
	}
	out := maps.Clone(person)
	for i, d := range dims {
		v, ok := unescape(vals[i])
		if !ok || v == "" {
			return nil
		}
		out[d] = v
	}
	return out
}

// inspectValues sets the Rules of every value of vals with a Subject: the
// rules whose set key is the value's (groups[i]) as Inspect reports them
// (no trail read), at most valuesInFlight at once. A value whose subject
// does not give back its set key (a name the backend stored that this
// version would not build) loses its Subject instead.
func (ad *Admin) inspectValues(ctx context.Context, p *Policy, vals []Value, groups []string) error {
	l := ad.lim()
	errs := make([]error, len(vals))
	sem := make(chan struct{}, valuesInFlight)
	var wg sync.WaitGroup
	for i := range vals {
		if vals[i].Subject == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			v := &vals[i]
			res, err := resolve(l.prefix, p, v.Subject, true, l.now)
			if err != nil {
				v.Subject = nil
				return
			}
			var rules []driver.Rule
			var before []int64
			for j, r := range res.rules {
				if r.Group == groups[i] {
					rules = append(rules, r)
					if res.before != nil {
						before = append(before, res.before[j])
					}
				}
			}
			if len(rules) == 0 {
				v.Subject = nil
				return
			}
			req := l.request(p, res, 1)
			req.Rules, req.TrailKey, req.TrailMax, req.TrailValues = rules, "", 0, ""
			a := l.send(ctx, opInspect, req)
			if a.err != nil {
				errs[i] = a.err
				return
			}
			v.Rules = decide(p.name, rules, before, a.r).Rules
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
