package console

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/sdk"
)

// Page is what the layout of every page needs.
type Page struct {
	Title    string
	Nav      string // the current navigation item
	Who      string // the signed-in identity, for the header
	Role     Role
	SignedIn bool // signed in with a session (can sign out)
	AuthOff  bool
	CSRF     string
	Demo     bool
	DemoURL  string // a demo subject to look at ("": no policy sharded by user alone)
	RefreshM int    // live refresh interval, ms
}

func (s *Server) page(c echo.Context, nav string) Page {
	id := identityOf(c)
	p := Page{
		Nav:      nav,
		Role:     id.Role,
		SignedIn: id.Method == "session",
		AuthOff:  !s.auth.enabled(),
		CSRF:     csrfOf(c),
		Demo:     s.cfg.Demo,
		DemoURL:  s.demoURL,
		RefreshM: int(s.cfg.Refresh / time.Millisecond),
	}
	if id.Role != RoleNone {
		p.Who = id.String()
	}
	return p
}

// Field is one dimension input of the lookup form.
type Field struct {
	Name  string
	Value string
	Shard bool // every rule uses it: required
}

// SubjectView is the subject lookup page.
type SubjectView struct {
	Page
	Policies []string
	Policy   string
	Fields   []Field
	Query    string // policy and dimension values, URL-encoded
	Looked   bool   // some dimension value was given
	Notice   string
	Error    string
	Live     SubjectLive
	CanReset bool
	Given    []Field      // the dimension values looked up
	Audit    []AuditEntry // this subject's recent entries
	AuditURL string       // the audit page for this subject
	// FPDims are the policy's dimensions that take fingerprints
	// (fingerprintDim): the fingerprint helper is shown for them only.
	FPDims []string
	// FPDone names the dimension whose value the helper just computed.
	FPDone string
}

// AuditView is the audit page.
type AuditView struct {
	Page
	Policies []string
	Filter   AuditFilter
	Fields   []Field // the filter policy's dimensions
	Entries  []AuditEntry
	Matched  int // entries matching, before the page's row limit
}

// SubjectLive is the part of the subject page that refreshes itself.
type SubjectLive struct {
	URL      string
	Allowed  bool     // every rule evaluated (Rules) would admit a request now
	Blocking []string // rules that would deny a request now
	RetryIn  string
	Rules    []RuleRow
	Skipped  []string // rules not evaluated: they need dimensions not given
	// Evaluated names the rules in Rules.
	Evaluated []string
	// Missing names the dimensions the skipped rules need and the
	// subject does not give.
	Missing []string
	// Blocked are the values of other dimensions the subject is still
	// blocked for, by skipped rules (from the trail, re-checked live).
	Blocked []Blocked
	// Unrecorded names skipped rules with a denial still in force whose
	// values the trail did not record.
	Unrecorded []string
	Denials    []DenialRow
	TrailNote  string // how far back the trail goes
	TrailKey   string
	HoldKey    string
	Error      string
	// Unavailable: the error is the backend's, not the input's.
	Unavailable bool
	Backend     string
	Refreshed   string
	CanReset    bool
}

// RuleRow is one rule's state for a subject.
type RuleRow struct {
	Rule      string
	Algorithm string
	Detail    string
	Strategy  string
	Reason    string
	Dims      string
	Key       string
	Used      int64
	Limit     int64
	Remaining int64
	ResetIn   string
	RetryIn   string
	Allowed   bool
}

// DenialRow is one entry of a denial trail, or a group of identical
// consecutive ones (Count > 1: At is the newest, First the oldest).
type DenialRow struct {
	At          string
	Ago         string
	Rule        string
	Used        int64
	Limit       int64
	Cost        int64
	RetryAfter  string
	CostTooHigh bool
	Count       int
	First       string
	FirstAgo    string
	Values      []Field // what was blocked: the attempt's other values
	Partial     bool    // some values were left out of the entry
	URL         string  // the subject page of the exact subject ("": no values)
	ResetURL    string  // its reset ("": no values, or not an admin)
}

// OverviewView is the overview page.
type OverviewView struct {
	Page
	Backend  BackendView
	Policies []PolicySummary
	Live     OverviewLive
}

// BackendView is the backend's account of itself.
type BackendView struct {
	Name       string
	Target     string
	Strategies []StrategyRow
	Notes      []string
	Error      string
}

// StrategyRow is how the backend implements one algorithm.
type StrategyRow struct {
	Algorithm, Name, Reason string
}

// PolicySummary is a policy's line on the overview.
type PolicySummary struct {
	Name, Failure, Dims, ShardBy string
	Rules                        []string
	LookupURL                    string
}

// OverviewLive is the part of the overview that refreshes itself.
type OverviewLive struct {
	URL   string
	At    string
	Rates []RateRow
}

// RateRow is a policy's traffic.
type RateRow struct {
	Policy                            string
	AllowedPerSec, DeniedPerSec       string
	Allowed, Denied, Errors, Degraded uint64
	DeniedShare                       string
}

// PoliciesView is the policies page.
type PoliciesView struct {
	Page
	Policies []PolicyDetail
}

// PolicyDetail is one policy as configured.
type PolicyDetail struct {
	Name, Failure, Dims, ShardBy string
	Rules                        []PolicyRuleRow
	TrailKey, HoldKey            string
	LookupURL                    string
}

// PolicyRuleRow is one rule as configured.
type PolicyRuleRow struct {
	Name, Algorithm, Limit, Window, Detail, Dims, Key, Strategy string
}

// ResetView is the reset confirmation page.
type ResetView struct {
	Page
	Policy  string
	Fields  []Field // the given dimension values
	Rules   []string
	Keep    []string // rules left alone (their dimensions are not given)
	Keys    []string
	BackURL string
}

// subjectFrom reads p's dimension values from get (query or form) and
// returns the non-empty ones, and the form fields. Values are taken
// exactly as given, as the API and the SDK take them: " 42" is not "42"
// (the pages show such white space visibly; see idParts).
func subjectFrom(p *sdk.Policy, get func(string) string) (sdk.Subject, []Field) {
	shard := p.ShardBy()
	s := sdk.Subject{}
	var fields []Field
	for _, d := range p.Dimensions() {
		v := get(d)
		fields = append(fields, Field{Name: d, Value: v, Shard: slices.Contains(shard, d)})
		if v != "" {
			s[d] = v
		}
	}
	return s, fields
}

// subjectQuery encodes policy and s as a query string.
func subjectQuery(policy string, s sdk.Subject) string {
	q := url.Values{"policy": {policy}}
	for k, v := range s {
		q.Set(k, v)
	}
	return q.Encode()
}

// algorithmDetail describes a rule's parameters beyond limit and window.
func algorithmDetail(r sdk.Rule) string {
	switch r.Algorithm {
	case sdk.AlgorithmSlidingWindow:
		n := r.SubWindows
		if n == 0 {
			n = sdk.DefaultSubWindows
		}
		return fmt.Sprintf("%d cells of %s", n, fmtWindow(r.Window/time.Duration(n)))
	case sdk.AlgorithmGCRA:
		return fmt.Sprintf("rate %d per %s, burst %d: up to %d at once (the limit shown), then one every %s", r.Limit, fmtWindow(r.Window), r.Burst, r.Burst+1, fmtWindow(r.Window/time.Duration(max(r.Limit, 1))))
	case sdk.AlgorithmFixedWindow:
		if r.Calendar != sdk.NoCalendar {
			loc := "UTC"
			if r.Location != nil {
				loc = r.Location.String()
			}
			return "calendar " + r.Calendar.String() + " in " + loc
		}
		return "epoch-aligned"
	case sdk.AlgorithmSlidingLog:
		return "one entry per unit"
	}
	return ""
}

// ruleWindow is the rule's window as shown: for GCRA, the time the shown
// limit (burst+1 units) takes to accrue at the rule's rate.
func ruleWindow(r sdk.Rule) string {
	if r.Calendar != sdk.NoCalendar {
		return "1 " + r.Calendar.String()
	}
	return fmtWindow(shownWindow(r))
}

// shownLimit is the limit decisions report for r, and what every page
// shows: the configured limit, except for GCRA, where it is Burst+1 (the
// most a subject can use at once; the rate is Limit per Window).
func shownLimit(r sdk.Rule) int64 {
	if r.Algorithm == sdk.AlgorithmGCRA {
		return r.Burst + 1
	}
	return r.Limit
}

// shownWindow is the window shownLimit refills over: r's window, for GCRA
// the time Burst+1 units take to accrue at Limit per Window.
func shownWindow(r sdk.Rule) time.Duration {
	if r.Algorithm == sdk.AlgorithmGCRA && r.Limit > 0 {
		return time.Duration(float64(r.Window) / float64(r.Limit) * float64(r.Burst+1))
	}
	return r.Window
}

// fmtWindow formats a configured length compactly: 1m, 59s, 24h, 1h30m, 250ms.
func fmtWindow(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d%(24*time.Hour) == 0 && d > 24*time.Hour:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0 && d < time.Hour:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0 && d < time.Minute:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	s := d.String() // e.g. 1h30m0s, 5.9s
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtCountdown formats a time to wait, rounded up to the second:
// "—" for none, "12s", "4m 05s", "23h 59m", "2d 3h".
func fmtCountdown(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	s := int64(math.Ceil(d.Seconds()))
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm %02ds", s/60, s%60)
	case s < 2*86400:
		return fmt.Sprintf("%dh %02dm", s/3600, (s%3600)/60)
	}
	return fmt.Sprintf("%dd %dh", s/86400, (s%86400)/3600)
}

// fmtAgo formats how long ago t was, relative to now.
func fmtAgo(t, now time.Time) string {
	d := now.Sub(t)
	if d < time.Second {
		return "just now"
	}
	return fmtCountdown(d) + " ago"
}

func fmtRate(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func i64(v int64) string  { return strconv.FormatInt(v, 10) }
func u64(v uint64) string { return strconv.FormatUint(v, 10) }

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func withTitle(p Page, title string) Page {
	p.Title = title
	return p
}

func statusText(status int) string { return http.StatusText(status) }

func queryEscape(s string) string { return url.QueryEscape(s) }

func joinComma(s []string) string { return strings.Join(s, ", ") }

// subjectPageURL turns a live fragment URL into its page's URL.
func subjectPageURL(live string) string {
	return strings.Replace(live, "/live/subject?", "/subject?", 1)
}

// shownOf says how many of matched entries a page shows, when not all.
func shownOf(matched, shown int) string {
	if shown >= matched {
		return ""
	}
	return ", the newest " + strconv.Itoa(shown) + " shown"
}

// fieldValue returns the value of the field named name.
func fieldValue(fs []Field, name string) string {
	for _, f := range fs {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// plural returns one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
