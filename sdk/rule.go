package sdk

import (
	"fmt"
	"time"

	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Algorithm names the counting algorithm of a rule.
type Algorithm = driver.Algorithm

// The algorithms.
const (
	// AlgorithmFixedWindow counts units in windows aligned to the Unix
	// epoch, or to a calendar (Rule.Calendar). Cheap; allows up to 2x
	// Limit across a window edge.
	AlgorithmFixedWindow = driver.FixedWindow
	// AlgorithmSlidingWindow is strict: no interval of length Window ever
	// holds more than Limit admitted units. A rule whose Limit is at most
	// LogLine is evaluated as an exact sliding log (AlgorithmSlidingLog's
	// answers: nothing denied that an exact log admits, retry-after and
	// reset-after at most Window); on the seed policy (limits 2 to 50)
	// that is 0 attempts over and 0 under an exact log, where cells denied
	// 11.1% (6,456 of 58,133) the log admits. Measured in this repository
	// with go test -count=1 -run TestStrictnessCost -v ./sdk/
	// Above LogLine it sums cells of Window/SubWindows, the partly expired
	// oldest one included: constant memory, but a unit counts for up to
	// one cell longer than Window (two when the cells do not divide it).
	// Finer cells (Rule.WithSubWindows) shorten that extra time.
	AlgorithmSlidingWindow = driver.SlidingWindow
	// AlgorithmSlidingLog keeps one entry per unit: exact, memory grows
	// with Limit.
	AlgorithmSlidingLog = driver.SlidingLog
	// AlgorithmGCRA is the generic cell rate algorithm (a leaky bucket /
	// token bucket): Limit units per Window with Burst extra units at
	// once.
	AlgorithmGCRA = driver.GCRA
)

// CalendarUnit aligns a FixedWindow rule to the wall clock of a time zone.
type CalendarUnit = driver.CalendarUnit

// The calendar units.
const (
	// NoCalendar: windows are Window long and aligned to the Unix epoch.
	NoCalendar = driver.NoCalendar
	// Day: one window per natural day (local midnight to midnight) in
	// Rule.Location; a DST day is 23 or 25 hours long.
	Day = driver.Day
	// Hour: one window per local hour in Rule.Location.
	Hour = driver.Hour
)

// DefaultSubWindows is the number of cells of a SlidingWindow rule whose
// SubWindows is 0.
const DefaultSubWindows = 10

// MaxNameLen is the longest name a policy, rule or dimension may have.
const MaxNameLen = 64

// LogLine is the largest limit of a SlidingWindow rule that every backend
// evaluates as an exact sliding log (SlidingLog's semantics and numbers:
// no under-admission, retry-after and reset-after at most the window);
// above it a sliding window counts in cells (driver.LogLine).
const LogLine = driver.LogLine

// ExactLog reports whether r is evaluated as an exact sliding log: a
// SlidingLog rule, or a SlidingWindow rule whose Limit is at most LogLine
// (driver.Rule.ExactLog). A limit change that crosses LogLine moves the
// rule's state between a log and cells: the policy store
// (sdk/policystore) makes it a transition, whose old rule stays enforced
// and seeds the new one.
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
//     sliding window's limit crossing LogLine moves its state between a
//     log and cells);
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
	if ruleID(na) != ruleID(nb) || na.ExactLog() != nb.ExactLog() {
		return false
	}
	if na.Algorithm == AlgorithmGCRA {
		ta, _, _ := driverRule(na).GCRAParams()
		tb, _, _ := driverRule(nb).GCRAParams()
		return ta == tb
	}
	return true
}

// The largest numbers a rule or a cost may hold, the same for every
// backend: beyond them some backend could no longer count exactly, so
// NewPolicy (or the call, for a cost) refuses them. They are sdk/driver's (see there for the arithmetic):
// Lua numbers are doubles, exact only to 2^53, and a count plus a cost
// must stay exact; Redis instants are µs since the epoch (about 1.8e15),
// to which a backend adds up to two windows, or a GCRA tolerance.
const (
	// MaxLimit is the largest Limit, Burst+1 and cost: 2^50 (about
	// 1.1e15).
	MaxLimit = driver.MaxLimit
	// MaxWindow is the longest Window: 2^51 µs, about 71 years. Now plus
	// two such windows stays below 2^53 µs until the year 2112.
	MaxWindow = driver.MaxWindow
	// MaxTolerance is the longest tolerance of a GCRA rule,
	// Window/Limit*(Burst+1), the time a spent burst takes to come back:
	// 2^53 ns, about 104 days. Up to it, every count of ns is exact as a
	// double.
	MaxTolerance = driver.MaxTolerance
	// MinInterval is the shortest emission interval of a GCRA rule,
	// Window/Limit: 1µs, the unit of the Redis backend's clock.
	MinInterval = driver.MinInterval
	// MaxUsed is the most units a rule counts, 2^52: only a counted
	// exempt (OverrideExempt, Counted) takes a count past its limit, and
	// Used saturates there instead of wrapping.
	MaxUsed = driver.MaxUsed
	// MaxDebt is how far ahead a counted exempt may push a GCRA rule's
	// theoretical arrival time (how long the rule stays spent): 2^45 µs,
	// about 407 days.
	MaxDebt = driver.MaxDebt
)

// Rule is one cap: at most Limit units per Window for each combination of
// the values of Dimensions. "15 per minute per user" is
// SlidingWindow("recv-1m", 15, time.Minute).By("user").
//
// A Rule is a plain value; build one with FixedWindow, SlidingWindow, SlidingLog, GCRA, Daily
// or Hourly and refine it with By and Cells. It is checked when it becomes
// part of a Policy (NewPolicy); the zero Rule is invalid.
type Rule struct {
	// Name identifies the rule in its policy, in decisions and in storage
	// keys: [A-Za-z0-9_.-]{1,64}, unique within the policy. Renaming a
	// rule starts its counts afresh.
	Name string
	// Algorithm is how the rule counts.
	Algorithm Algorithm
	// Limit is the number of units admitted per Window, from 1 to
	// MaxLimit. For GCRA it is the rate: Limit units per Window, one every
	// Window/Limit (the emission interval, at least MinInterval).
	Limit int64
	// Window is the length of the window, from 1ms to MaxWindow. For a
	// calendar rule it is set by the unit (24h or 1h) and may be left
	// zero.
	Window time.Duration
	// Dimensions are the subject dimensions the rule is keyed by, e.g.
	// {"user", "content"}: each user may receive the same content at most
	// Limit times per Window. Names follow the rule-name syntax.
	Dimensions []string
	// SubWindows is the number of cells of a SlidingWindow rule; 0 means
	// DefaultSubWindows. Window/SubWindows must be at least 1ms. Only
	// SlidingWindow rules may set it.
	SubWindows int
	// Burst is the number of units a GCRA rule admits at once beyond the
	// steady rate, from 0 to MaxLimit-1; its tolerance,
	// Window/Limit*(Burst+1), may be at most MaxTolerance. Only GCRA rules
	// may set it.
	Burst int64
	// Calendar aligns a FixedWindow rule to local days or hours in
	// Location (which is then required).
	Calendar CalendarUnit
	// Location is the time zone of a calendar rule.
	Location *time.Location
	// Shadow makes the rule a trial: it is evaluated, counted and recorded
	// (RuleDecision.Shadow, trail entries marked Shadow, the observer's
	// events) but never denies. Turning it on or off keeps the rule's
	// counts: it is not part of the rule's identity. See AsShadow.
	Shadow bool
	// Epoch is the policy-store version that gave the rule its current
	// identity (sdk/policystore sets it; 0 for rules built in code). It is
	// part of the rule's identity: a rule whose algorithm, window, cells,
	// calendar or zone changed in a store version, or whose state would
	// change its meaning (a GCRA rate: SameState), starts under new keys,
	// from what its former self proves (WithChange).
	Epoch int64
}

// FixedWindow returns an AlgorithmFixedWindow rule: limit units per
// epoch-aligned window.
func FixedWindow(name string, limit int64, window time.Duration) Rule {
	return Rule{Name: name, Algorithm: AlgorithmFixedWindow, Limit: limit, Window: window}
}

// SlidingWindow returns an AlgorithmSlidingWindow rule with
// DefaultSubWindows cells (change them with Cells; a limit of at most
// LogLine makes it an exact log, and its cells unused).
func SlidingWindow(name string, limit int64, window time.Duration) Rule {
	return Rule{Name: name, Algorithm: AlgorithmSlidingWindow, Limit: limit, Window: window, SubWindows: DefaultSubWindows}
}

// SlidingLog returns an AlgorithmSlidingLog rule: exact, one stored
// entry per unit.
func SlidingLog(name string, limit int64, window time.Duration) Rule {
	return Rule{Name: name, Algorithm: AlgorithmSlidingLog, Limit: limit, Window: window}
}

// GCRA returns an AlgorithmGCRA rule (a token bucket): limit units per
// period, plus burst units at once. GCRA("api", 30, time.Minute, 14)
// admits 15 requests at once, then one every 2 seconds.
func GCRA(name string, limit int64, per time.Duration, burst int64) Rule {
	return Rule{Name: name, Algorithm: AlgorithmGCRA, Limit: limit, Window: per, Burst: burst}
}

// Daily returns a FixedWindow rule counting per natural day (midnight to
// midnight) in loc.
func Daily(name string, limit int64, loc *time.Location) Rule {
	return Rule{Name: name, Algorithm: AlgorithmFixedWindow, Limit: limit, Window: 24 * time.Hour, Calendar: Day, Location: loc}
}

// Hourly returns a FixedWindow rule counting per local hour in loc.
func Hourly(name string, limit int64, loc *time.Location) Rule {
	return Rule{Name: name, Algorithm: AlgorithmFixedWindow, Limit: limit, Window: time.Hour, Calendar: Hour, Location: loc}
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
func validName(s string) bool { return keyname.Valid(s, MaxNameLen) }

// nominal returns the nominal window of a calendar unit.
func nominal(u CalendarUnit) time.Duration {
	switch u {
	case Day:
		return 24 * time.Hour
	case Hour:
		return time.Hour
	}
	return 0
}

// normalize checks r and returns it in canonical form: defaults filled in
// (SubWindows, calendar Window), Dimensions copied. The error wraps
// ErrInvalidRule and reads `rule "name": invalid rule: ...`.
func (r Rule) normalize() (Rule, error) {
	// Each step reports r's first problem of its kind, in this order.
	for _, step := range [...]func(*Rule) error{
		(*Rule).checkKind, (*Rule).fillCalendar, (*Rule).checkSpan,
		(*Rule).fillSubWindows, (*Rule).checkDimensions,
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
		return fmt.Errorf("name must match [A-Za-z0-9_.-]{1,%d}", MaxNameLen)
	}
	switch r.Algorithm {
	case AlgorithmFixedWindow, AlgorithmSlidingWindow, AlgorithmSlidingLog, AlgorithmGCRA:
	default:
		return fmt.Errorf("unknown algorithm %d", r.Algorithm)
	}
	if r.Limit <= 0 {
		return fmt.Errorf("limit must be > 0, got %d", r.Limit)
	}
	if r.Limit > MaxLimit {
		return fmt.Errorf("limit must be <= %d (MaxLimit), got %d", MaxLimit, r.Limit)
	}
	return nil
}

// fillCalendar checks r's calendar fields and fills in a calendar rule's
// Window (normalize's second step).
func (r *Rule) fillCalendar() error {
	switch r.Calendar {
	case NoCalendar:
		if r.Location != nil {
			return fmt.Errorf("location is only for calendar rules")
		}
	case Day, Hour:
		if r.Algorithm != AlgorithmFixedWindow {
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
			r.Window = nominal(r.Calendar)
		}
		if r.Window != nominal(r.Calendar) {
			return fmt.Errorf("window of a calendar %v rule must be %v or unset, got %v", r.Calendar, nominal(r.Calendar), r.Window)
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
	if r.Window > MaxWindow {
		return fmt.Errorf("window must be <= %v (MaxWindow), got %v", MaxWindow, r.Window)
	}
	if r.Burst < 0 {
		return fmt.Errorf("burst must be >= 0, got %d", r.Burst)
	}
	if r.Burst > MaxLimit-1 {
		return fmt.Errorf("burst must be <= %d (MaxLimit-1), got %d", MaxLimit-1, r.Burst)
	}
	if r.Burst != 0 && r.Algorithm != AlgorithmGCRA {
		return fmt.Errorf("burst is only for gcra rules, got algorithm %v", r.Algorithm)
	}
	if r.Algorithm == AlgorithmGCRA {
		// T as every backend computes it: Window/Limit, truncated to the ns.
		t := r.Window / time.Duration(r.Limit)
		if t < MinInterval {
			return fmt.Errorf("emission interval window/limit must be >= %v (MinInterval), got %v", MinInterval, t)
		}
		// T*(Burst+1) <= MaxTolerance, without computing the product.
		if t > MaxTolerance/time.Duration(r.Burst+1) {
			return fmt.Errorf("tolerance window/limit*(burst+1) must be <= %v (MaxTolerance), got %v*%d", MaxTolerance, t, r.Burst+1)
		}
	}
	return nil
}

// fillSubWindows checks r's SubWindows, filling in a sliding window's
// default, and its Epoch (normalize's fourth step).
func (r *Rule) fillSubWindows() error {
	if r.Algorithm == AlgorithmSlidingWindow {
		if r.SubWindows == 0 {
			r.SubWindows = DefaultSubWindows
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
			return fmt.Errorf("dimension %q must match [A-Za-z0-9_.-]{1,%d}", d, MaxNameLen)
		}
		if seen[d] {
			return fmt.Errorf("dimension %q given twice", d)
		}
		seen[d] = true
	}
	return nil
}
