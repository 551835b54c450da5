package sdk

import (
	"fmt"
	"time"

	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk/driver"
)

// ExactLog reports whether r is evaluated as an exact sliding log: a
// SlidingLog rule, or a SlidingWindow rule whose Limit is at most driver.LogLine
// (driver.Rule.ExactLog). A limit change that crosses driver.LogLine moves the
// rule's state between a log and cells (a sliding log's, on Redis, between
// its packed log and its set's sorted set): the policy store
// (sdk/policystore) makes it a transition, whose old rule stays enforced
// and seeds the new one (SameState).
func (r Rule) ExactLog() bool {
	return driver.Rule{Algorithm: driver.Algorithm(r.Algorithm), Limit: r.Limit}.ExactLog()
}

// SameState reports whether rule b reads the state rule a left with the
// same meaning, so that changing a into b (the same rule, by name)
// carries every count exactly. It is the one test of that, for the policy
// store's plans (sdk/policystore: Modified, carries exactly, or a
// transition carried conservatively) and for WithChange. The state keeps
// its meaning when a and b have:
//   - the same identity (RuleIDs: algorithm, window, cells, calendar,
//     zone, dimensions, Epoch), which names the keys;
//   - the same evaluation: both or neither an exact log (ExactLog: a
//     sliding window's limit crossing driver.LogLine moves its state between a
//     log and cells), and for a sliding log both or neither above
//     driver.LogLine (the Redis backend keeps a log up to the line packed
//     in its dimension set's value, a larger one in the set's sorted set:
//     a limit crossing the line would leave the count behind);
//   - for GCRA, the same emission interval (Window/Limit as
//     driver.Rule.GCRAParams truncates it): the state is a theoretical
//     arrival time, the units held times the interval, so read at another
//     interval it holds another number of units (10 per 2h to 5 per 2h
//     would halve everyone's count).
//
// So only the limit (GCRA: at the same interval, which a window changed
// in proportion is not, being an identity change), the burst and the
// shadow flag may differ. A change that does not keep the state carries
// only as a Change (WithChange): the rule under a new Epoch, the former
// rule enforced beside it and seeding it. A rule that is invalid (see
// NewPolicy) keeps no state: SameState reports false.
func SameState(a, b Rule) bool {
	na, err := a.normalize()
	if err != nil {
		return false
	}
	nb, err := b.normalize()
	if err != nil {
		return false
	}
	if ruleID(na) != ruleID(nb) || na.ExactLog() != nb.ExactLog() || packedLog(na) != packedLog(nb) {
		return false
	}
	if na.Algorithm == driver.GCRA {
		ta, _, _ := driverRule(na).GCRAParams()
		tb, _, _ := driverRule(nb).GCRAParams()
		return ta == tb
	}
	return true
}

// packedLog reports whether r is a sliding log of limit at most
// driver.LogLine: one the Redis backend keeps packed (SameState).
func packedLog(r Rule) bool {
	return r.Algorithm == driver.SlidingLog && r.Limit <= driver.LogLine
}

// Rule is one cap: at most Limit units per Window for each combination of
// the values of Dimensions. "15 per minute per user" is
// SlidingWindow("recv-1m", 15, time.Minute).By("user").
//
// A Rule is a plain value; build one with FixedWindow, SlidingWindow,
// SlidingLog, GCRA, Daily, Hourly, Weekly, Monthly or Calendar and refine
// it with By and Cells. It is checked when it becomes
// part of a Policy (NewPolicy); the zero Rule is invalid.
type Rule struct {
	// Name identifies the rule in its policy, in decisions and in storage
	// keys: [A-Za-z0-9_.-]{1,64}, unique within the policy. Renaming a
	// rule starts its counts afresh.
	Name string
	// Algorithm is how the rule counts.
	Algorithm driver.Algorithm
	// Limit is the number of units admitted per Window, from 1 to
	// driver.MaxLimit. For GCRA it is the rate: Limit units per Window, one every
	// Window/Limit (the emission interval, at least driver.MinInterval).
	Limit int64
	// Window is the length of the window, from 1ms to driver.MaxWindow. For a
	// calendar rule it is the unit's nominal length, set by the unit
	// (driver.CalendarUnit.Nominal: 24h, 1h, 168h, or 744h for a month, its
	// longest, 31 days) and may be left zero: what the rule's reach and the
	// policy's idempotency TTL count, never how long a window actually is.
	Window time.Duration
	// Dimensions are the subject dimensions the rule is keyed by, e.g.
	// {"user", "content"}: each user may receive the same content at most
	// Limit times per Window. Names follow the rule-name syntax.
	Dimensions []string
	// SubWindows is the number of cells of a SlidingWindow rule; 0 means
	// driver.DefaultSubWindows. Window/SubWindows must be at least 1ms. Only
	// SlidingWindow rules may set it.
	SubWindows int
	// Burst is the number of units a GCRA rule admits at once beyond the
	// steady rate, from 0 to driver.MaxLimit-1; its tolerance,
	// Window/Limit*(Burst+1), may be at most driver.MaxTolerance. Only GCRA rules
	// may set it.
	Burst int64
	// Calendar aligns a FixedWindow rule to local hours, days, ISO weeks
	// or months in Location (which is then required), or in the attempt's
	// zone when it gives one (Attempt.Zone).
	Calendar driver.CalendarUnit
	// Location is the time zone of a calendar rule: its own, part of its
	// identity (its keys), used for attempts that carry no Attempt.Zone.
	Location *time.Location
	// Shadow makes the rule a trial: it is evaluated, counted and recorded
	// (RuleDecision.Shadow, trail entries marked Shadow, the observer's
	// events) but never denies. Turning it on or off keeps the rule's
	// counts: it is not part of the rule's identity. See AsShadow.
	Shadow bool
	// Headroom keeps the rule's last units for attempts of higher
	// priority (WithHeadroom): tiers from the lowest priority up. Not part
	// of the rule's identity.
	Headroom []Headroom
	// Epoch is the policy-store version that gave the rule its current
	// identity (sdk/policystore sets it; 0 for rules built in code). It is
	// part of the rule's identity: a rule whose algorithm, window, cells,
	// calendar or zone changed in a store version, or whose state would
	// change its meaning (a GCRA rate: SameState), starts under new keys,
	// from what its former self proves (WithChange).
	Epoch int64
}

// FixedWindow returns an driver.FixedWindow rule: limit units per
// epoch-aligned window.
func FixedWindow(name string, limit int64, window time.Duration) Rule {
	return Rule{Name: name, Algorithm: driver.FixedWindow, Limit: limit, Window: window}
}

// SlidingWindow returns an driver.SlidingWindow rule with
// driver.DefaultSubWindows cells (change them with Cells; a limit of at most
// driver.LogLine makes it an exact log, and its cells unused).
func SlidingWindow(name string, limit int64, window time.Duration) Rule {
	return Rule{Name: name, Algorithm: driver.SlidingWindow, Limit: limit, Window: window, SubWindows: driver.DefaultSubWindows}
}

// SlidingLog returns an driver.SlidingLog rule: exact, one stored
// entry per unit.
func SlidingLog(name string, limit int64, window time.Duration) Rule {
	return Rule{Name: name, Algorithm: driver.SlidingLog, Limit: limit, Window: window}
}

// GCRA returns an driver.GCRA rule (a token bucket): limit units per
// period, plus burst units at once. GCRA("api", 30, time.Minute, 14)
// admits 15 requests at once, then one every 2 seconds.
func GCRA(name string, limit int64, per time.Duration, burst int64) Rule {
	return Rule{Name: name, Algorithm: driver.GCRA, Limit: limit, Window: per, Burst: burst}
}

// Daily returns a FixedWindow rule counting per natural day (midnight to
// midnight) in loc, or in the zone of the attempt (Attempt.Zone) when it
// gives one: "3 per calendar day in the person's own zone" is
// Daily("daily", 3, time.UTC).By("user") with each attempt's Zone set.
func Daily(name string, limit int64, loc *time.Location) Rule {
	return Calendar(name, limit, driver.Day, loc)
}

// Hourly returns a FixedWindow rule counting per local hour in loc (or in
// the attempt's zone, as Daily).
func Hourly(name string, limit int64, loc *time.Location) Rule {
	return Calendar(name, limit, driver.Hour, loc)
}

// Weekly returns a FixedWindow rule counting per ISO week, Monday 00:00
// to Monday 00:00 local time in loc (or in the attempt's zone, as Daily).
func Weekly(name string, limit int64, loc *time.Location) Rule {
	return Calendar(name, limit, driver.Week, loc)
}

// Monthly returns a FixedWindow rule counting per calendar month, the 1st
// 00:00 to the next 1st 00:00 local time in loc (or in the attempt's
// zone, as Daily).
func Monthly(name string, limit int64, loc *time.Location) Rule {
	return Calendar(name, limit, driver.Month, loc)
}

// Calendar returns a FixedWindow rule counting per unit (driver.Day,
// Hour, Week or Month) of local time in loc, the rule's own zone, or in
// the attempt's zone when it gives one (Attempt.Zone, which wins). Its
// Window is the unit's nominal length (driver.CalendarUnit.Nominal), and
// every window follows the local clock across DST changes (a DST day is
// 23 or 25 hours, a week or month holding one an hour shorter or longer).
func Calendar(name string, limit int64, unit driver.CalendarUnit, loc *time.Location) Rule {
	return Rule{Name: name, Algorithm: driver.FixedWindow, Limit: limit, Window: unit.Nominal(), Calendar: unit, Location: loc}
}

// By returns a copy of r keyed by dims.
func (r Rule) By(dims ...string) Rule {
	r.Dimensions = append([]string(nil), dims...)
	return r
}

// AsShadow returns a copy of r marked Shadow: evaluated and recorded,
// never denying.
func (r Rule) AsShadow() Rule {
	r.Shadow = true
	return r
}

// WithSubWindows returns a copy of r with SubWindows n: the number of
// cells of a SlidingWindow rule.
func (r Rule) WithSubWindows(n int) Rule {
	r.SubWindows = n
	return r
}

// validName reports whether s matches [A-Za-z0-9_.-]{1,64}.
func validName(s string) bool { return keyname.Valid(s, keyname.MaxName) }

// normalize checks r and returns it in canonical form: defaults filled in
// (SubWindows, calendar Window), Dimensions copied. The error wraps
// ErrInvalidRule and reads `rule "name": invalid rule: ...`.
func (r Rule) normalize() (Rule, error) {
	// Each step reports r's first problem of its kind, in this order.
	for _, step := range [...]func(*Rule) error{
		(*Rule).checkKind, (*Rule).fillCalendar, (*Rule).checkSpan,
		(*Rule).fillSubWindows, (*Rule).checkDimensions, (*Rule).checkHeadroom,
	} {
		if err := step(&r); err != nil {
			return Rule{}, fmt.Errorf("rule %q: %w: %v", r.Name, ErrInvalidRule, err)
		}
	}
	r.Dimensions = append([]string(nil), r.Dimensions...)
	return r, nil
}

// checkKind checks r's name, algorithm and limit (normalize's first step).
func (r *Rule) checkKind() error {
	if !validName(r.Name) {
		return fmt.Errorf("name must match [A-Za-z0-9_.-]{1,%d}", keyname.MaxName)
	}
	switch r.Algorithm {
	case driver.FixedWindow, driver.SlidingWindow, driver.SlidingLog, driver.GCRA:
	default:
		return fmt.Errorf("unknown algorithm %d", r.Algorithm)
	}
	if r.Limit <= 0 {
		return fmt.Errorf("limit must be > 0, got %d", r.Limit)
	}
	if r.Limit > driver.MaxLimit {
		return fmt.Errorf("limit must be <= %d (MaxLimit), got %d", driver.MaxLimit, r.Limit)
	}
	return nil
}

// fillCalendar checks r's calendar fields and fills in a calendar rule's
// Window (normalize's second step).
func (r *Rule) fillCalendar() error {
	switch r.Calendar {
	case driver.NoCalendar:
		if r.Location != nil {
			return fmt.Errorf("location is only for calendar rules")
		}
	case driver.Day, driver.Hour, driver.Week, driver.Month:
		if r.Algorithm != driver.FixedWindow {
			return fmt.Errorf("calendar requires algorithm fixed_window, got %v", r.Algorithm)
		}
		if r.Location == nil {
			return fmt.Errorf("calendar %v requires a location (timezone)", r.Calendar)
		}
		if r.Location == time.Local {
			// "Local" differs per machine: two servers would share keys
			// while disagreeing on where the day starts.
			return fmt.Errorf("calendar %v needs a named zone (e.g. Asia/Shanghai), not time.Local", r.Calendar)
		}
		if r.Window == 0 {
			r.Window = r.Calendar.Nominal()
		}
		if r.Window != r.Calendar.Nominal() {
			return fmt.Errorf("window of a calendar %v rule must be %v (its nominal length) or unset, got %v", r.Calendar, r.Calendar.Nominal(), r.Window)
		}
	default:
		return fmt.Errorf("unknown calendar unit %d", r.Calendar)
	}
	return nil
}

// checkSpan checks r's window and burst, and a GCRA rule's emission
// interval and tolerance (normalize's third step).
func (r *Rule) checkSpan() error {
	if r.Window < time.Millisecond {
		return fmt.Errorf("window must be >= 1ms, got %v", r.Window)
	}
	if r.Window > driver.MaxWindow {
		return fmt.Errorf("window must be <= %v (MaxWindow), got %v", driver.MaxWindow, r.Window)
	}
	if r.Burst < 0 {
		return fmt.Errorf("burst must be >= 0, got %d", r.Burst)
	}
	if r.Burst > driver.MaxLimit-1 {
		return fmt.Errorf("burst must be <= %d (MaxLimit-1), got %d", driver.MaxLimit-1, r.Burst)
	}
	if r.Burst != 0 && r.Algorithm != driver.GCRA {
		return fmt.Errorf("burst is only for gcra rules, got algorithm %v", r.Algorithm)
	}
	if r.Algorithm == driver.GCRA {
		// T as every backend computes it: Window/Limit, truncated to the ns.
		t := r.Window / time.Duration(r.Limit)
		if t < driver.MinInterval {
			return fmt.Errorf("emission interval window/limit must be >= %v (MinInterval), got %v", driver.MinInterval, t)
		}
		// T*(Burst+1) <= driver.MaxTolerance, without computing the product.
		if t > driver.MaxTolerance/time.Duration(r.Burst+1) {
			return fmt.Errorf("tolerance window/limit*(burst+1) must be <= %v (MaxTolerance), got %v*%d", driver.MaxTolerance, t, r.Burst+1)
		}
	}
	return nil
}

// fillSubWindows checks r's SubWindows, filling in a sliding window's
// default, and its Epoch (normalize's fourth step).
func (r *Rule) fillSubWindows() error {
	if r.Algorithm == driver.SlidingWindow {
		if r.SubWindows == 0 {
			r.SubWindows = driver.DefaultSubWindows
		}
		if r.SubWindows < 0 {
			return fmt.Errorf("sub_windows must be >= 0, got %d", r.SubWindows)
		}
		if r.Window/time.Duration(r.SubWindows) < time.Millisecond {
			return fmt.Errorf("sub_windows %d makes cells of %v, want >= 1ms", r.SubWindows, r.Window/time.Duration(r.SubWindows))
		}
	} else if r.SubWindows != 0 {
		return fmt.Errorf("sub_windows is only for sliding_window rules, got algorithm %v", r.Algorithm)
	}
	if r.Epoch < 0 {
		return fmt.Errorf("epoch must be >= 0, got %d", r.Epoch)
	}
	return nil
}

// checkDimensions checks r's dimension names: valid, none twice
// (normalize's last step).
func (r *Rule) checkDimensions() error {
	seen := make(map[string]bool, len(r.Dimensions))
	for _, d := range r.Dimensions {
		if !validName(d) {
			return fmt.Errorf("dimension %q must match [A-Za-z0-9_.-]{1,%d}", d, keyname.MaxName)
		}
		if seen[d] {
			return fmt.Errorf("dimension %q given twice", d)
		}
		seen[d] = true
	}
	return nil
}
