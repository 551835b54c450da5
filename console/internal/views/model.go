// Package views holds the console's templ components and the view models
// they render. Package console's handlers build the models; nothing here
// reads a request or calls the SDK.
package views

import "time"

// Page is what the layout of every page needs.
type Page struct {
	Title    string
	Nav      string // the current navigation item
	Who      string // the signed-in identity, for the header
	Role     string // the identity's role; "" when not signed in
	SignedIn bool   // signed in with a session (can sign out)
	AuthOff  bool
	CSRF     string
	Demo     bool
	DemoURL  string // a demo subject to look at ("": no policy sharded by user alone)
	DemoUser string // the user DemoURL shows
	RefreshM int    // live refresh interval, ms
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
	// FPDims are the policy's dimensions that take fingerprints: the
	// fingerprint helper is shown for them only.
	FPDims []string
	// FPDone names the dimension whose value the helper just computed.
	FPDone string
	// Overrides are the person's per-person overrides under the policy.
	Overrides OverridesView
	// Values are, per nested dimension set of the policy, a page of the
	// person's live values (sdk.Admin.Values).
	Values []ValuesView
	// Person is the person of the policy's one shard value (an identity).
	Person PersonView
}

// ValuesView is one nested dimension set's section of the subject page:
// a page of the person's live values of the set, most recently written
// first.
type ValuesView struct {
	Set    string   // the set's name, e.g. "campaign"
	Dims   []string // its dimensions beyond the shard ones
	Anchor string   // the section's element id
	// Total is how many live values the person holds in the set; Partial
	// that the backend stopped at its bound before reading them all.
	Total   int
	Partial bool
	At      string // the backend's clock when it listed them
	Rows    []ValueRow
	// Unnamed counts the page's values whose name the backend does not
	// store.
	Unnamed int
	// FirstURL, PrevURL and NextURL page through the values ("": none).
	FirstURL, PrevURL, NextURL string
	Error                      string
}

// ValueRow is one value of a ValuesView.
type ValueRow struct {
	// Values are the set's dimension values; nil when the backend does not
	// store the value's name (ID then tells it apart).
	Values []Field
	ID     string
	URL    string // the value's own lookup ("" when unnamed)
	// Written and WrittenAgo say when the value was last written ("" when
	// the backend does not store it); EndsIn when its state ends.
	Written, WrittenAgo string
	EndsIn              string
	Rules               []ValueRule
}

// ValueRule is one rule's counters for a value.
type ValueRule struct {
	Rule                   string
	Used, Limit, Remaining int64
	ResetIn, RetryIn       string
	Allowed, Shadow        bool
	Before                 int64
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
	// RetryNote explains RetryIn when it is longer than the window of the
	// sliding-window rule it waits for (RuleRow.RetryNote).
	RetryNote string
	// CellsNote, when some rule's reset or retry has a note, explains
	// them at length under the rules.
	CellsNote string
	Rules     []RuleRow
	Skipped   []string // rules not evaluated: they need dimensions not given
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
	Unrecorded     []string
	Denials        []DenialRow
	TrailNote      string // how far back the trail goes
	TrailKey       string
	ReservationKey string
	Error          string
	// Unavailable: the error is the backend's, not the input's.
	Unavailable bool
	Backend     string
	Refreshed   string
	CanReset    bool
	// Override, when set, is the override deciding a request now: a
	// block denies whatever the rules say, an exempt admits.
	Override *OverrideNote
	// Shadow names the shadow rules that would deny a request now (they
	// never deny).
	Shadow []string
	// Messaging explains the policy's quiet hours and message classes;
	// nil when it has neither.
	Messaging *MessagingNote
}

// MessagingNote is what a policy's messaging caps mean for the subject
// now: its quiet hours (in the policy's zone: an attempt's own zone, or
// the person's stored one, wins) and its message classes.
type MessagingNote struct {
	// Quiet describes the quiet periods ("21:00–08:00 every day"), Zone
	// their zone; QuietNow, when not empty, says they are on now and when
	// they end.
	Quiet    []string
	Zone     string
	QuietNow string
	// Classes describe each class ("otp: exempt from every rule, counted;
	// may send in quiet hours").
	Classes []string
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
	// GroupKey is the key of the rule's set of dimensions, where the
	// Redis backend keeps its state (sdk.KeySet.Key).
	GroupKey  string
	Used      int64
	Limit     int64
	Remaining int64
	ResetIn   string
	RetryIn   string
	// ResetNote and RetryNote explain a sliding window's reset or retry
	// longer than its window (its cells); "" when there is none to explain.
	ResetNote, RetryNote string
	Allowed              bool
	// Shadow: a shadow rule (never denies; Allowed says what it would
	// decide). Before, when nonzero: the rule as it was before policy
	// version Before, still enforced beside its successor.
	Shadow bool
	Before int64
	// LimitBy, when nonzero: Limit is the one limit override #LimitBy
	// gives this person, not the rule's own.
	LimitBy int64
	// Headroom describes the units the rule keeps for higher priorities
	// ("keeps 10 for priority ≥ 1"), "" when none.
	Headroom string
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
	RetryNote   string // why RetryAfter is longer than the rule's window (RuleRow.RetryNote)
	CostTooHigh bool
	Count       int
	First       string
	FirstAgo    string
	Values      []Field // what was blocked: the attempt's other values
	Partial     bool    // some values were left out of the entry
	URL         string  // the subject page of the exact subject ("": no values)
	ResetURL    string  // its reset ("": no values, or not an admin)
	// Shadow: a shadow rule would have denied (the attempt may have been
	// allowed). Override, when nonzero: a block override denied (Rule is
	// empty; Until is when the block ends, "" without end).
	Shadow   bool
	Override int64
	Until    string
	// Exempt: an exempt rule would have denied and the attempt's class
	// passed it. Quiet: denied for quiet hours (Rule empty; Until is when
	// they end). Class, Priority, Identity: the attempt's, when given.
	// Headroom, when not "": the rule denied within its limit, for units
	// it keeps for higher priorities (what they are).
	Headroom string
	Exempt   bool
	Quiet    bool
	Class    string
	Priority int
	Identity string
}

// OverviewView is the overview page.
type OverviewView struct {
	Page
	Backend  BackendView
	Policies []PolicySummary
	Live     OverviewLive
	Fleet    FleetView // the services' recorded traffic (console/stats.go)
	// Version is the policy-store version this console runs (0: a
	// policy file); VersionNote when, by whom and why it was applied.
	Version     int64
	VersionNote string
}

// BackendView is the backend's account of itself.
type BackendView struct {
	Name       string
	Target     string
	Strategies []StrategyRow
	Notes      []string
	Error      string
	// Memory is each master's memory (maxmemory, maxmemory-policy,
	// evicted_keys); Warnings the findings that put enforcement at risk,
	// shown as banners atop the overview.
	Memory   []MemoryRow
	Warnings []string
}

// MemoryRow is one master's memory, as the backend describes it.
type MemoryRow struct {
	Node, MaxMemory, Policy, EvictedKeys string
	// Verdict says whether the master may evict freqcap's keys; Evicts
	// marks it red.
	Verdict string
	Evicts  bool
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
	// Version is the policy-store version in force (0: a policy file);
	// VersionNote says when, by whom and why it was applied.
	Version     int64
	VersionNote string
	// Editor: the console follows a store it can edit (links to the
	// editor and the history).
	Editor bool
}

// PolicyDetail is one policy as configured.
type PolicyDetail struct {
	Name, Failure, Dims, ShardBy string
	Rules                        []PolicyRuleRow
	TrailKey, ReservationKey     string
	LookupURL                    string
	// Shadow is what the policy's shadow rules would have denied, beside
	// what its enforced rules denied (empty: no shadow rule).
	Shadow      []ShadowRow
	Enforced    []ShadowRow
	ShadowError string
}

// ShadowRow is what one rule denied (enforced) or would have denied
// (shadow) over the last hour and 24 h. People are distinct subjects (-1:
// not counted).
type ShadowRow struct {
	Rule                    string
	Attempts1h, Attempts24h int64
	Allowed1h, Allowed24h   int64 // shadow: of the attempts, those allowed
	People1h, People24h     int64
}

// PolicyRuleRow is one rule as configured.
type PolicyRuleRow struct {
	Name, Algorithm, Limit, Window, Detail, Dims, Key, Strategy string
	// GroupKey is the key of the rule's set of dimensions (Redis).
	GroupKey string
	Shadow   bool
}

// ResetView is the reset confirmation page.
type ResetView struct {
	Page
	Policy string
	Fields []Field // the given dimension values
	// Rules are the rules a whole reset deletes (every rule whose
	// dimensions are given), with the open reservations; Keys its keys.
	Rules []string
	Keep  []string // rules left alone (their dimensions are not given)
	Keys  []string
	// Exact, when not empty, are the rules keyed by exactly the given
	// dimensions (a pair's own), fewer than Rules: the page offers to
	// reset only them (ExactKeys), keeping ExactKeeps and the rest.
	Exact, ExactKeys, ExactKeeps []string
	// Wider says what a whole reset does beyond Exact, one sentence per
	// set of dimensions ("recv-1m and recv-24h are keyed by user only …");
	// empty when Rules are all keyed by exactly the given dimensions.
	Wider   []string
	BackURL string
}

// AuditEntry is one audit log entry as the audit table shows it.
type AuditEntry struct {
	At      time.Time
	Actor   string // who, for display: name, role and how they signed in
	Action  string // "reset" or "check"
	Policy  string
	Subject map[string]string
	Rules   []string
	Cost    int64
	Outcome string
	// Reason and Detail: why (overrides, policy applies) and what.
	Reason, Detail string
}

// AuditFilter is the audit page's filter form.
type AuditFilter struct {
	Policy, Value, Name, Action string
}

// OverrideRow is one per-person override as the subject page lists it.
type OverrideRow struct {
	ID      int64
	Kind    string // exempt, block or limit
	Counted bool   // an exempt whose attempts are still counted
	Limits  string // "rule=N, rule=N" (limit)
	Until   string // when it ends, or "no end"
	Reason  string
	By      string
	Created string
	// DeleteURL asks to delete it ("" for viewers).
	DeleteURL string
}

// OverridesView is the subject page's overrides section: the person's
// overrides under the policy, and the form adding one (admins).
type OverridesView struct {
	Policy  string
	Shard   []Field // the person: the policy's shard values
	Rows    []OverrideRow
	Rules   []Field // the policy's rules (Value: the limit), for the form
	CanEdit bool
	// Off: the policy does not read overrides (no overrides: true).
	Off   bool
	Error string
}

// OverrideDeleteView asks an admin to confirm deleting an override.
type OverrideDeleteView struct {
	Page
	Policy  string
	Shard   []Field
	Row     OverrideRow
	BackURL string
	// Others is how many other overrides of the person stay in force.
	Others int
}

// OverrideNote is what the live verdict says of an override deciding a
// request now.
type OverrideNote struct {
	ID      int64
	Kind    string // block or exempt
	Until   string // "" without end
	RetryIn string // a block's time left ("" without end)
	Reason  string
	Counted bool
}

// PlanView is a policy plan as the preview and the rollback show it.
type PlanView struct {
	Base      int64 // the version the plan was made against
	Changes   []PlanChangeRow
	Warnings  []string
	Rekey     bool // the apply needs the re-keying confirmed
	Unchanged bool
	Text      string // the plan in words
	// WhatIf is the estimate in words; WhatIfNote why there is none.
	WhatIf, WhatIfNote string
}

// PlanChangeRow is what a plan does to one rule.
type PlanChangeRow struct {
	Policy, Rule, Kind, Carries, Detail string
}

// VersionRow is one policy-store version as the history lists it.
type VersionRow struct {
	Version int64
	At, By  string
	Reason  string
	Current bool   // the store's current version
	URL     string // its page
}

// EditorView is the policy editor: the current version's source, the
// edit box (admins), and after a preview its plan or its errors.
type EditorView struct {
	Page
	Current VersionRow // Version 0: the store is empty
	// Unloadable, when set, says why the store's current version
	// (StoreVersion) does not load: Current is then the newest version
	// that loads (Version 0: none does).
	Unloadable   string
	StoreVersion int64
	Running      int64 // the version this console runs
	Source       string
	CanEdit      bool
	// Previewed: a preview was asked; Invalid holds the document's
	// errors (line and key), else Plan what it would do.
	Previewed bool
	Invalid   string
	Plan      PlanView
}

// HistoryView is the policy store's history.
type HistoryView struct {
	Page
	Versions []VersionRow // newest first
	Running  int64
	CanEdit  bool
	Notice   string
}

// VersionView is one version's source.
type VersionView struct {
	Page
	Row         VersionRow
	Source      string
	DiffURL     string // the diff with the version before ("" for 1)
	RollbackURL string // "" for the current version
	CanEdit     bool
}

// DiffView is the line diff of two versions' sources.
type DiffView struct {
	Page
	A, B  VersionRow
	Lines []DiffLine
}

// DiffLine is one line of a diff: Op " ", "-" or "+".
type DiffLine struct{ Op, Text string }

// RollbackView asks an admin to confirm a rollback to a version.
type RollbackView struct {
	Page
	Row  VersionRow // the version restored
	Plan PlanView   // what applying its document again does
}
