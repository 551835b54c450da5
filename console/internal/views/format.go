package views

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// FormatTime is how every page shows an instant: UTC, to the second
// ("2026-11-24 04:40:22Z"); "" for the zero time.
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// The helpers the templates call.

func fmtTime(t time.Time) string { return FormatTime(t) }

func i64(v int64) string  { return strconv.FormatInt(v, 10) }
func u64(v uint64) string { return strconv.FormatUint(v, 10) }

func withTitle(p Page, title string) Page {
	p.Title = title
	return p
}

func statusText(status int) string { return http.StatusText(status) }

func queryEscape(s string) string { return url.QueryEscape(s) }

func joinComma(s []string) string { return strings.Join(s, ", ") }

// suffix returns sep and s, or "" when s is empty.
func suffix(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

// joinRules joins rule names as the reset form posts them ("a,b").
func joinRules(s []string) string { return strings.Join(s, ",") }

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

// Blocked is a (values, rule) pair the subject is blocked for: a rule the
// page could not evaluate (it needs dimension values not given) that
// denied the subject with these values, and still would.
type Blocked struct {
	Values  []Field // the other dimensions' values, in policy order
	Rule    string
	Until   string // when the rule admits again, UTC
	RetryIn string
	// Live: re-checked now with a Peek of the exact subject; else only
	// the trail says so (the re-check was skipped or failed).
	Live      bool
	RetryNote string    // why RetryIn is longer than the rule's window (RuleRow.RetryNote)
	URL       string    // the subject page of the exact subject
	ResetURL  string    // the reset of the exact subject ("" for viewers)
	UntilAt   time.Time // Until, for sorting
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

// Count returns n and the noun for it, "1 entry", "2 entries": every
// count the pages print goes through it (or Plural).
func Count[N int | int64 | uint64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Plural returns one when n is 1, else many.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// untilText says when a block ends: "until …", or "no end".
func untilText(until string) string {
	if until == "" {
		return "no end"
	}
	return "until " + until
}

// closeParen returns ")" when s is not empty (after suffix(" (", s)).
func closeParen(s string) string {
	if s == "" {
		return ""
	}
	return ")"
}

// blockEnd says when a block ends, after "denied by block #N".
func blockEnd(o *OverrideNote) string {
	if o.Until == "" {
		return " until it is deleted"
	}
	return " until " + o.Until + " (in " + o.RetryIn + ")"
}

// exemptText describes an exempt override in the verdict.
func exemptText(o *OverrideNote) string {
	s := "exempt"
	if o.Counted {
		s += ", still counted"
	}
	if o.Until != "" {
		s += ", until " + o.Until
	}
	return s
}
