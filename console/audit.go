package console

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// AuditEntry records one action that changed state: a reset (form or
// API) or a consuming check through the API.
type AuditEntry struct {
	At time.Time `json:"at"`
	// Actor is who did it, for display: name, role and how they signed in.
	Actor string `json:"actor"`
	// Name is the credential's name: the person or service ("alice",
	// "billing"; "shared-admin-token" for --admin-token, "local" with
	// authentication off).
	Name string `json:"name,omitempty"`
	Role string `json:"role"`
	// Via is how they authenticated: token, basic, session or none.
	Via string `json:"via,omitempty"`
	// Action is "reset", "override-set", "override-delete",
	// "person-link", "person-unlink", "person-zone", "policy-apply" or
	// "policy-rollback"; "check" in files written before POST
	// /api/v1/check was retired.
	Action  string      `json:"action"`
	Policy  string      `json:"policy"`
	Subject sdk.Subject `json:"subject"`
	// Rules are the rules whose state was deleted (reset), or that denied
	// (check).
	Rules []string `json:"rules,omitempty"`
	// Cost is a check's cost.
	Cost int64 `json:"cost,omitempty"`
	// Outcome is "ok", "allowed" (perhaps "(degraded …)"), "denied", or
	// "failed: …" (never a
	// backend's address: the details are in the console's log).
	Outcome string `json:"outcome"`
	// Remote is the client's address.
	Remote string `json:"remote,omitempty"`
	// Override is the override set or deleted (its ID).
	Override int64 `json:"override,omitempty"`
	// Version is the policy-store version an apply or rollback made (or,
	// for a rollback, see Detail for the version restored).
	Version int64 `json:"version,omitempty"`
	// Reason is why, as the person gave it (overrides, policy applies).
	Reason string `json:"reason,omitempty"`
	// Detail describes what was done (the override; the version rolled
	// back to).
	Detail string `json:"detail,omitempty"`
}

// admin reports whether e is an administrative action (kept apart from
// the far more numerous checks).
func (e AuditEntry) admin() bool { return e.Action != "check" }

// AuditLog keeps the most recent entries in memory (the console's audit
// page) and, when given a writer, appends every entry to it as one JSON
// line. Administrative actions and checks are kept apart, max of each, so
// a busy service's checks never push a reset out. Load reads back the
// file written before a restart. It is safe for concurrent use.
type AuditLog struct {
	mu     sync.Mutex
	w      io.Writer
	max    int
	admin  []AuditEntry // oldest first
	checks []AuditEntry // oldest first
}

// NewAuditLog returns a log that keeps the last max entries of each kind
// (0 means 200) and writes each entry to w when w is not nil.
func NewAuditLog(w io.Writer, max int) *AuditLog {
	if max <= 0 {
		max = 200
	}
	return &AuditLog{w: w, max: max}
}

func (a *AuditLog) keep(e AuditEntry) {
	l := &a.checks
	if e.admin() {
		l = &a.admin
	}
	*l = append(*l, e)
	if len(*l) > a.max {
		*l = append((*l)[:0:0], (*l)[len(*l)-a.max:]...)
	}
}

// Record adds e. The entry is kept in memory even when writing it to the
// log's writer fails; the write error is returned.
func (a *AuditLog) Record(e AuditEntry) error {
	e.Subject = copySubject(e.Subject)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keep(e)
	if a.w == nil {
		return nil
	}
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("console: audit: %w", err)
	}
	if _, err := a.w.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("console: audit: %w", err)
	}
	return nil
}

// Load reads entries written by Record (JSON lines) from r into memory,
// keeping the last max of each kind: the audit page survives a restart.
// Lines that are not entries are skipped and counted; the error is for
// reading only.
func (a *AuditLog) Load(r io.Reader) (loaded, skipped int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	a.mu.Lock()
	defer a.mu.Unlock()
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var e AuditEntry
		if json.Unmarshal(line, &e) != nil || e.At.IsZero() || e.Action == "" {
			skipped++
			continue
		}
		a.keep(e)
		loaded++
	}
	if err := sc.Err(); err != nil {
		return loaded, skipped, fmt.Errorf("console: audit: reading: %w", err)
	}
	return loaded, skipped, nil
}

// Entries returns the kept entries, newest first.
func (a *AuditLog) Entries() []AuditEntry {
	return a.Filter(AuditFilter{})
}

// AuditFilter selects audit entries. Zero fields match everything.
type AuditFilter struct {
	Policy string
	// Subject: every dimension given must have exactly this value.
	Subject sdk.Subject
	// Value: some dimension has exactly this value (the audit page's
	// "subject" box: a user id, a fingerprint).
	Value string
	// Name is the person or service.
	Name string
	// Action is "reset" or "check".
	Action string
}

func (f AuditFilter) match(e AuditEntry) bool {
	if (f.Policy != "" && e.Policy != f.Policy) || (f.Name != "" && e.Name != f.Name) || (f.Action != "" && e.Action != f.Action) {
		return false
	}
	for k, v := range f.Subject {
		if e.Subject[k] != v {
			return false
		}
	}
	if f.Value != "" {
		found := false
		for _, v := range e.Subject {
			if v == f.Value {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Filter returns the kept entries f matches, newest first.
func (a *AuditLog) Filter(f AuditFilter) []AuditEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]AuditEntry, 0, len(a.admin)+len(a.checks))
	for _, l := range [][]AuditEntry{a.admin, a.checks} {
		for i := len(l) - 1; i >= 0; i-- { // newest first, also among equal times
			if f.match(l[i]) {
				out = append(out, l[i])
			}
		}
	}
	slices.SortStableFunc(out, func(x, y AuditEntry) int { return y.At.Compare(x.At) })
	return out
}

func copySubject(s sdk.Subject) sdk.Subject {
	if s == nil {
		return nil
	}
	c := make(sdk.Subject, len(s))
	for k, v := range s {
		c[k] = v
	}
	return c
}
