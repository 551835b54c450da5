package console

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// AuditEntry records one administrative action.
type AuditEntry struct {
	At time.Time `json:"at"`
	// Actor is who did it: name, role and how they signed in.
	Actor string `json:"actor"`
	Role  string `json:"role"`
	// Action is "reset".
	Action  string      `json:"action"`
	Policy  string      `json:"policy"`
	Subject sdk.Subject `json:"subject"`
	// Rules are the rules whose state was deleted.
	Rules []string `json:"rules,omitempty"`
	// Outcome is "ok" or the error.
	Outcome string `json:"outcome"`
	// Remote is the client's address.
	Remote string `json:"remote,omitempty"`
}

// AuditLog keeps the most recent entries in memory (shown by the console)
// and, when given a writer, appends every entry to it as one JSON line.
// It is safe for concurrent use.
type AuditLog struct {
	mu      sync.Mutex
	w       io.Writer
	max     int
	entries []AuditEntry // oldest first
}

// NewAuditLog returns a log that keeps the last max entries (0 means 200)
// and writes each entry to w when w is not nil.
func NewAuditLog(w io.Writer, max int) *AuditLog {
	if max <= 0 {
		max = 200
	}
	return &AuditLog{w: w, max: max}
}

// Record adds e. The entry is kept in memory even when writing it to the
// log's writer fails; the write error is returned.
func (a *AuditLog) Record(e AuditEntry) error {
	e.Subject = copySubject(e.Subject)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries = append(a.entries, e)
	if len(a.entries) > a.max {
		a.entries = append(a.entries[:0:0], a.entries[len(a.entries)-a.max:]...)
	}
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

// Entries returns the kept entries, newest first.
func (a *AuditLog) Entries() []AuditEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]AuditEntry, len(a.entries))
	for i, e := range a.entries {
		out[len(a.entries)-1-i] = e
	}
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
