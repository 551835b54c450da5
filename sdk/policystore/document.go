package policystore

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// This file owns the format of a store version's document
// (driver.PolicyVersion.Document): a JSON envelope
//
//	{"format": "freqcap.policies/v1",
//	 "source": "<the policy file as applied>",
//	 "lineage": {"<policy>": {"<rule>": {"epoch": 4, "changes": [
//	     {"version": 4, "at": "<RFC 3339; absent: this version's At>",
//	      "from": {"name": "daily", "algorithm": "fixed_window", "limit": 50,
//	               "window": "24h0m0s", "sub_windows": 0, "burst": 0,
//	               "calendar": "", "timezone": "", "by": ["user"],
//	               "shadow": false, "epoch": 0}}]}}}}
//
// Rules absent from the lineage have epoch 0 and no changes. A change's
// "from" holds what identifies and limits the rule as it was, not its
// headroom: a rule's former self is enforced with its own limit alone
// (the successor's headroom is the successor's). A change
// made by the version itself has no "at": the store sets the version's
// At when it is applied, and decode fills it in.

// documentFormat names the one format this package writes and reads.
const documentFormat = "freqcap.policies/v1"

// ErrUnknownFormat is returned for a stored document this package cannot
// read: written by another program, or by a later freqcap.
var ErrUnknownFormat = errors.New("policystore: unknown policy document format")

type document struct {
	Format  string                               `json:"format"`
	Source  string                               `json:"source"`
	Lineage map[string]map[string]docRuleLineage `json:"lineage,omitempty"`
}

type docRuleLineage struct {
	Epoch   int64       `json:"epoch,omitempty"`
	Changes []docChange `json:"changes,omitempty"`
}

type docChange struct {
	Version int64      `json:"version"`
	At      *time.Time `json:"at,omitempty"`
	From    docRule    `json:"from"`
}

type docRule struct {
	Name       string   `json:"name"`
	Algorithm  string   `json:"algorithm"`
	Limit      int64    `json:"limit"`
	Window     string   `json:"window"`
	SubWindows int      `json:"sub_windows,omitempty"`
	Burst      int64    `json:"burst,omitempty"`
	Calendar   string   `json:"calendar,omitempty"`
	Timezone   string   `json:"timezone,omitempty"`
	By         []string `json:"by"`
	Shadow     bool     `json:"shadow,omitempty"`
	Epoch      int64    `json:"epoch,omitempty"`
}

// A lineage is what a store version derived from its source, per policy
// and rule name: the rule's epoch and its identity changes still in reach.
type lineage map[string]map[string]ruleLineage

// ruleLineage is one rule's part of a lineage.
type ruleLineage struct {
	// Epoch is the version that gave the rule its current identity (0: the
	// first version, or a rule unchanged since a policy file).
	Epoch int64
	// Changes are the rule's identity changes, newest first, as
	// sdk.WithChange takes them. A zero At is the version's own At.
	Changes []sdk.Change
}

func (l lineage) rule(policy, rule string) ruleLineage {
	return l[policy][rule]
}

func (l lineage) set(policy, rule string, rl ruleLineage) {
	if rl.Epoch == 0 && len(rl.Changes) == 0 {
		return
	}
	if l[policy] == nil {
		l[policy] = map[string]ruleLineage{}
	}
	l[policy][rule] = rl
}

// encodeDocument returns the document of a version: source, verbatim,
// and lin.
func encodeDocument(source []byte, lin lineage) ([]byte, error) {
	doc := document{Format: documentFormat, Source: string(source)}
	if len(lin) > 0 {
		doc.Lineage = make(map[string]map[string]docRuleLineage, len(lin))
		for pn, rules := range lin {
			m := make(map[string]docRuleLineage, len(rules))
			for rn, rl := range rules {
				d := docRuleLineage{Epoch: rl.Epoch}
				for _, c := range rl.Changes {
					dc := docChange{Version: c.Version, From: encodeRule(c.From)}
					if !c.At.IsZero() {
						at := c.At.UTC()
						dc.At = &at
					}
					d.Changes = append(d.Changes, dc)
				}
				m[rn] = d
			}
			doc.Lineage[pn] = m
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("policystore: encode document: %w", err)
	}
	return b, nil
}

// decodeDocument reads a version's document; changes without At get at
// (the version's At).
func decodeDocument(b []byte, at time.Time) ([]byte, lineage, error) {
	var head struct {
		Format *string `json:"format"`
	}
	if err := json.Unmarshal(b, &head); err != nil || head.Format == nil {
		return nil, nil, fmt.Errorf("%w: not a freqcap policy document (want a JSON object with \"format\": %q)", ErrUnknownFormat, documentFormat)
	}
	if *head.Format != documentFormat {
		return nil, nil, fmt.Errorf("%w: %q (this freqcap reads %q only; is a newer freqcap applying?)", ErrUnknownFormat, truncate(*head.Format, 64), documentFormat)
	}
	var doc document
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrUnknownFormat, documentFormat, err)
	}
	lin := lineage{}
	for pn, rules := range doc.Lineage {
		for rn, d := range rules {
			rl := ruleLineage{Epoch: d.Epoch}
			for _, dc := range d.Changes {
				from, err := decodeRule(dc.From)
				if err != nil {
					return nil, nil, fmt.Errorf("%w: %s: policy %q rule %q: change of version %d: %v", ErrUnknownFormat, documentFormat, pn, rn, dc.Version, err)
				}
				c := sdk.Change{From: from, At: at, Version: dc.Version}
				if dc.At != nil {
					c.At = *dc.At
				}
				rl.Changes = append(rl.Changes, c)
			}
			lin.set(pn, rn, rl)
		}
	}
	return []byte(doc.Source), lin, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

var algorithmNames = map[driver.Algorithm]string{
	driver.FixedWindow:   "fixed_window",
	driver.SlidingWindow: "sliding_window",
	driver.SlidingLog:    "sliding_log",
	driver.GCRA:          "gcra",
}

var calendarNames = map[driver.CalendarUnit]string{driver.NoCalendar: "", driver.Day: "day", driver.Hour: "hour", driver.Week: "week", driver.Month: "month"}

func encodeRule(r sdk.Rule) docRule {
	d := docRule{
		Name:       r.Name,
		Algorithm:  algorithmNames[r.Algorithm],
		Limit:      r.Limit,
		Window:     r.Window.String(),
		SubWindows: r.SubWindows,
		Burst:      r.Burst,
		Calendar:   calendarNames[r.Calendar],
		By:         slices.Clone(r.Dimensions),
		Shadow:     r.Shadow,
		Epoch:      r.Epoch,
	}
	if r.Calendar != driver.NoCalendar && r.Location != nil {
		d.Timezone = r.Location.String()
	}
	return d
}

func decodeRule(d docRule) (sdk.Rule, error) {
	r := sdk.Rule{
		Name:       d.Name,
		Limit:      d.Limit,
		SubWindows: d.SubWindows,
		Burst:      d.Burst,
		Dimensions: d.By,
		Shadow:     d.Shadow,
		Epoch:      d.Epoch,
	}
	found := false
	for a, n := range algorithmNames {
		if n == d.Algorithm {
			r.Algorithm, found = a, true
		}
	}
	if !found {
		return sdk.Rule{}, fmt.Errorf("unknown algorithm %q", d.Algorithm)
	}
	w, err := time.ParseDuration(d.Window)
	if err != nil {
		return sdk.Rule{}, fmt.Errorf("window: %v", err)
	}
	r.Window = w
	found = false
	for c, n := range calendarNames {
		if n == d.Calendar {
			r.Calendar, found = c, true
		}
	}
	if !found {
		return sdk.Rule{}, fmt.Errorf("unknown calendar %q", d.Calendar)
	}
	if d.Timezone != "" {
		loc, err := time.LoadLocation(d.Timezone)
		if err != nil {
			return sdk.Rule{}, fmt.Errorf("timezone: %v", err)
		}
		r.Location = loc
	}
	return r, nil
}
