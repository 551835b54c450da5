// Package driver is what a freqcap backend implements.
//
// The sdk package translates its user-facing types (rules, policies,
// subjects) into the plain, fully resolved values of this package — rules
// as specs, storage keys already built — much as database/sql does for
// database/sql/driver. A backend never parses rules or builds key names: it
// evaluates the specs it is given, against its own clock, atomically.
//
// # Required and optional operations
//
// A backend implements [Backend]: Take, the consuming, all-or-nothing
// decision. Every other operation is an optional interface the sdk
// discovers with a type assertion. A Limiter whose backend lacks Peeker,
// Reserver, Inspector, Resetter, Describer, Overrider, PolicyStore or
// ValueLister returns an error wrapping errors.ErrUnsupported from the
// operation that needs it, consuming nothing; without Batcher or Clocked
// it does without (one call per attempt; the system clock):
//
//   - [Peeker]: Peek, a decision that consumes nothing (sdk Peek, PeekBatch).
//   - [Reserver]: Reserve, Commit and Cancel, reservations (sdk Reserve,
//     Reservation.Commit and Cancel).
//   - [Inspector]: Inspect, the state and the denial trail (sdk Inspect).
//   - [Resetter]: Reset, forgetting a subject (sdk Reset).
//   - [Describer]: Describe, the backend's account of itself (sdk Describe).
//   - [Batcher]: TakeBatch and PeekBatch in few round trips (without it,
//     sdk TakeBatch and PeekBatch call Take or Peek once per attempt).
//   - [Clocked]: the backend decides on a clock of the caller's process,
//     which the sdk's Limiter then reads too.
//   - [Overrider]: per-person overrides, read by every decision that
//     carries an OverrideKey (sdk SetOverride, DeleteOverride, Overrides).
//   - [PolicyStore]: versioned policy documents (sdk/policystore's
//     PutPolicies, GetPolicies, PolicyHistory, WatchPolicies).
//   - [ValueLister]: a subject's live values of a nested dimension set,
//     newest first, paged (sdk Admin.Values).
//
// A backend that does not honour Request.IdempotencyKey (sdk idempotency
// keys) refuses a Take or Reserve that carries one with an error wrapping
// errors.ErrUnsupported, consuming nothing: a key is never silently
// ignored.
//
// The arithmetic every backend shares is this package's too: [Rule.Cells]
// and [CellSpan] (sliding windows), [Rule.GCRAParams] and
// [Rule.ReportedLimit] (GCRA), and the number bounds ([MaxLimit] and its
// siblings). The behaviour suite sdk/conformance holds a backend to this
// contract through the sdk's Limiter.
//
// driver imports nothing from sdk.
package driver

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/freqcap/freqcap/internal/arith"
)

// Algorithm names the counting algorithm of a rule.
type Algorithm uint8

const (
	// FixedWindow counts units in windows aligned to the Unix epoch
	// (Window long), or to a calendar (Rule.Calendar).
	FixedWindow Algorithm = iota + 1
	// SlidingWindow is evaluated as an exact sliding log (SlidingLog's
	// semantics and numbers) when its Limit is at most LogLine
	// (Rule.ExactLog), and otherwise counts units in cells of
	// Window/SubWindows (Rule.Cells), at any instant counting every cell a
	// window reaches back into, the partly expired oldest one included
	// (CellSpan). Both are strict: no interval of length Window, closed or
	// half-open, ever holds more than Limit admitted units. The cells'
	// price: a unit counts for up to one cell longer than Window (two when
	// the cells do not divide it), so some requests an exact log would
	// admit are denied. On the seed policy (limits 2 to 50) that is 0
	// attempts over and 0 under an exact log, where cells denied 11.1%
	// (6,456 of 58,133) the log admits; measured in this repository with
	// go test -count=1 -run TestStrictnessCost -v ./sdk/
	// Finer cells (sdk's Rule.WithSubWindows) shorten the extra time a
	// unit counts.
	SlidingWindow
	// SlidingLog keeps one entry per unit and counts those in
	// (now-Window, now]: exact, memory grows with Limit.
	SlidingLog
	// GCRA is the generic cell rate algorithm (leaky bucket as a meter):
	// Limit units per Window, Burst extra units at once.
	GCRA
)

// String returns the algorithm's name as written in policy files.
func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed_window"
	case SlidingWindow:
		return "sliding_window"
	case SlidingLog:
		return "sliding_log"
	case GCRA:
		return "gcra"
	}
	return "unknown"
}

// CalendarUnit aligns a FixedWindow rule to the wall clock of a time zone:
// the zone of the attempt's recipient (Request.Zone) when it gives one,
// else the rule's own (Rule.Location).
//
// A unit's window is the span of instants whose local time (in that zone)
// falls in the same unit, from its first instant to the first instant of
// the next: windows follow local midnights and local hour starts across
// DST changes, so a day is 23 or 25 hours long when the clocks change in
// it, and a week or month holding such a day is an hour shorter or
// longer (half an hour in Australia/Lord_Howe). A boundary a change skips
// (clocks jumping from 23:00 to 01:00, or from 02:45 to 03:45 in an hour
// unit) is the change's instant. internal/alg's CalendarStart and
// CalendarEnd are the arithmetic every backend shares.
type CalendarUnit uint8

const (
	// NoCalendar: windows are Window long and aligned to the Unix epoch.
	NoCalendar CalendarUnit = iota
	// Day: one window per natural day (local midnight to midnight); a
	// DST day is 23 or 25 hours long. Nominal Window: 24h.
	Day
	// Hour: one window per local hour (differs from an epoch-aligned
	// hour only in zones with a fractional offset, and at a change that
	// is not a whole hour). Nominal Window: 1h.
	Hour
	// Week: one window per ISO week, Monday 00:00 local to the next
	// Monday 00:00. Nominal Window: 168h (7 days).
	Week
	// Month: one window per calendar month, the 1st 00:00 local to the
	// next month's 1st 00:00 (28 to 31 days). Nominal Window: 744h (31
	// days, the longest month), so that Reach and the idempotency TTL
	// cover every month.
	Month
)

// String returns the unit as written in policy files: "day", "hour",
// "week", "month" ("" for NoCalendar).
func (u CalendarUnit) String() string {
	switch u {
	case Day:
		return "day"
	case Hour:
		return "hour"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return ""
}

// ParseCalendarUnit returns the unit String writes as s ("day", "hour",
// "week" or "month"); ok is false for anything else ("" included).
func ParseCalendarUnit(s string) (u CalendarUnit, ok bool) {
	for _, u := range []CalendarUnit{Day, Hour, Week, Month} {
		if u.String() == s {
			return u, true
		}
	}
	return NoCalendar, false
}

// Nominal returns the nominal Window of a calendar unit (24h, 1h, 168h,
// 744h); 0 for NoCalendar and unknown units.
func (u CalendarUnit) Nominal() time.Duration {
	switch u {
	case Day:
		return 24 * time.Hour
	case Hour:
		return time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 31 * 24 * time.Hour
	}
	return 0
}

// Rule is one resolved rule of a policy, for one subject.
//
// Semantics per algorithm (cost c, current count u):
//   - FixedWindow, SlidingWindow, SlidingLog: admit iff u+c <= Limit.
//   - GCRA: emission interval T = Window/Limit truncated to the
//     microsecond (at least 1µs), tolerance tol = T*(Burst+1), both exact
//     integers of µs (GCRAParams); the reported limit is Burst+1 (the
//     redis-cell convention: CL.THROTTLE key Burst Limit Window c).
type Rule struct {
	// Name is the rule's name, unique within its policy.
	Name string
	// Key is the storage key of this rule's state for this subject, its
	// own: no other rule, subject or policy has it. All keys of one
	// Request share one Redis hash tag.
	Key string
	// Group is the storage key of the rule's dimension set for this
	// subject: the rules of a Request with the same Group have the same
	// dimensions and the same values, and no other set of dimensions,
	// subject or policy has it. A backend may keep the state of all of
	// them under it (the Redis backend packs them into one value, kept
	// inside the value of the Group that ends in '=' when this one extends
	// it: one key per subject) or use Key (the memory backend).
	//
	// The sdk cuts every key of one Request (Key, Group, TrailKey,
	// ReservationKey) out of one string, so keeping any of them keeps
	// them all: a backend that stores a key beyond the call (as a map
	// key, say) stores strings.Clone of it.
	Group     string
	Algorithm Algorithm
	// Limit is the number of units admitted per Window (GCRA: the rate).
	Limit int64
	// Window is the window length (GCRA: the period of the rate). For a
	// calendar rule it is the unit's nominal length (CalendarUnit.Nominal:
	// 24h, 1h, 168h or 744h): what Reach and the idempotency TTL count,
	// never how long a window actually is.
	Window time.Duration
	// SubWindows is the number of cells of a SlidingWindow rule; 0 means
	// DefaultSubWindows.
	SubWindows int
	// Burst is the number of units a GCRA rule admits at once beyond the
	// steady rate (>= 0).
	Burst int64
	// Calendar and Location align a FixedWindow rule to a time zone:
	// Location is the rule's own zone, part of its identity (its keys),
	// used when the request carries no Request.Zone.
	Calendar CalendarUnit
	Location *time.Location

	// Shadow marks a rule that is evaluated and reported but never
	// denies: the Result's Allowed ignores it. Its RuleResult says what it
	// would have decided. It consumes only when it admits the cost and the
	// request is allowed and consumed (it counts what it would have let
	// through had it been enforced). On a Take or Reserve that it would
	// have denied, the backend writes one trail entry for it with
	// Denial.Shadow set, in the same atomic step, whether the request was
	// allowed or not.
	Shadow bool
	// Wide marks a rule whose dimension set the policy declares wide
	// (sdk.WithWide): a backend with storage layouts keeps the set out of
	// the subject's root value from its first value (the Redis backend:
	// in the root's wide hash at once, rather than once the root passes
	// its measured size). Decisions are the same either way.
	Wide bool
	// Keep, when > 0, is this attempt's headroom on the rule (priority
	// headroom, sdk's Rule.WithHeadroom): the rule's last Keep units are
	// kept for attempts of higher priority, so it admits the cost iff
	// used+cost <= limit-Keep, where limit is Limit or a Limit override's
	// (a limit at or below Keep admits nothing: CostTooHigh). Its
	// RuleResult says so: Allowed, RetryAfter and CostTooHigh are relative
	// to limit-Keep, and Remaining is max(0, limit-Keep-Used) (the room
	// left for this attempt's priority); Limit is still the rule's. Keep
	// changes nothing of the rule's identity or state (its layout follows
	// Limit alone). Never set on a GCRA rule (the sdk refuses it).
	Keep int64
	// Exempt, when set, exempts this attempt from the rule (sdk's message
	// classes: WithClass): the rule never denies it (its RuleResult still
	// says what it would have decided, as a shadow rule's does), and on a
	// Take or Reserve that the rule would have denied the backend writes
	// one trail entry for it with Denial.Exempt set, in the same atomic
	// step, whether the request was allowed or not. ExemptCounted consumes
	// the cost from the rule whenever the request consumes, even past its
	// limit (as a Counted Exempt override does: Used up to MaxUsed);
	// ExemptUncounted consumes nothing from it. Never set with Shadow.
	Exempt Exemption
	// Seed, when > 0, is the 1-based index in Request.Rules of an earlier
	// rule this rule's state starts from: the rule as it was before its
	// identity changed (sdk.WithChange). When the rule has no live state
	// (its entry is absent or expired), the backend first gives it the
	// state a Take of u units at the decision's time would have left on
	// empty state, where u is the Seed rule's Used before this request
	// (what its RuleResult reports for a request that does not consume
	// from it), taken whatever this rule's limit (u may exceed it: all u
	// units are counted, Used may then exceed Limit; a backend may cap
	// them at Limit where it stores one entry per unit, which denies
	// alike). The carried units are thus placed at the latest instant
	// they may have happened, and count as long as they can: a change
	// never admits more than the new rule would with them. The seeded state
	// is stored by any Take or Reserve, allowed or denied (a denied one
	// stores the carried units alone, never its cost), so a subject capped
	// throughout the predecessor's reach still carries its units; a Peek
	// or Inspect stores nothing.
	Seed int
	// Epoch salts the rule's identity: the policy-store version that
	// introduced the rule's current identity (0 outside a store). Keys
	// already hold it (the sdk salts them); a backend deriving an
	// identity of its own from a rule's fields (the Redis backend's
	// packed tag) includes it.
	Epoch int64
}

// Exemption is how an attempt is exempt from a rule (Rule.Exempt).
type Exemption uint8

const (
	// NotExempt: the rule decides as usual.
	NotExempt Exemption = iota
	// ExemptCounted: the rule never denies the attempt and counts it.
	ExemptCounted
	// ExemptUncounted: the rule never denies the attempt nor counts it.
	ExemptUncounted
)

// String returns "counted", "uncounted" or "" (NotExempt).
func (e Exemption) String() string {
	switch e {
	case ExemptCounted:
		return "counted"
	case ExemptUncounted:
		return "uncounted"
	}
	return ""
}

// Span is the interval of instants [Start, End).
type Span struct {
	Start, End time.Time
}

// MaxQuietSpans is the most Request.Quiet spans a request carries, the
// sdk's two framing spans included.
const MaxQuietSpans = 8

// Request asks a backend for one decision on one subject. The same
// Request serves every operation (Take, Peek, Reserve, Inspect); each
// operation's doc says which fields it reads.
type Request struct {
	// Policy is the name recorded in denial trail entries.
	Policy string
	Rules  []Rule
	// Cost is the number of units asked for (>= 1; Inspect ignores it).
	Cost int64
	// Zone, when set, is the time zone of the attempt's recipient: every
	// calendar rule of the request (Rule.Calendar) aligns its window to
	// it instead of its Rule.Location, which stays the rule's identity
	// (the rule's state is the same whatever the zone). Nil: each rule's
	// own Location. Other rules ignore it.
	//
	// A zone that changes between attempts never uncaps anyone: a
	// calendar rule whose stored window has not ended yet (its end ahead
	// of the backend's clock) keeps counting in it, whatever the zone of
	// the window around now, until it ends; the next window is then the
	// one around the backend's clock in the attempt's zone. So no stored
	// window ever admits more than Limit units. (The zone's window around
	// now may end earlier or later than the stored one: a person moving
	// east may wait up to the stored window's end for a new day; one
	// moving west starts a new count once it ends, which the new zone
	// calls the same day.)
	Zone *time.Location

	// TrailKey holds the subject's recent denials under this policy. On a
	// denied Take or Reserve the backend records one Denial per denying
	// rule, and on any Take or Reserve one per shadow rule that would
	// have denied (Rule.Shadow), in the same atomic step (a Block
	// override's one entry instead, see OverrideKey); it keeps at most
	// TrailMax entries (newest first) and expires the trail TrailTTL
	// after the last denial.
	// TrailMax 0 disables the trail.
	TrailKey string
	TrailMax int
	TrailTTL time.Duration
	// TrailValues is what each trail entry this request writes records
	// of the attempt beyond the shard values (Denial.Values): an opaque
	// string the sdk encodes (at most 1 KiB, never holding '|' or a line
	// break), stored and returned verbatim. Empty: none.
	TrailValues string

	// ReservationKey holds the subject's open reservations under this
	// policy. Every operation first gives back the units of the lapsed
	// reservations stored there (those not settled within their TTL).
	ReservationKey string
	// ReservationID and ReservationTTL describe the reservation a Reserve
	// creates (other operations ignore them).
	ReservationID  string
	ReservationTTL time.Duration

	// IdempotencyKey, when set on a Take or Reserve, makes the request
	// idempotent (a backend that cannot refuses it: see the package doc).
	// If a live record is stored under IdempotencyKey, the backend
	// returns that record's Result with Replayed set and does nothing
	// else: it consumes nothing, writes no trail entry
	// and creates no reservation. Otherwise it decides as usual and, in
	// the same atomic step, stores the Result (allowed or denied) under
	// IdempotencyKey for IdempotencyTTL. IdempotencyKey shares the hash
	// tag of the request's other keys. Peek and Inspect ignore it (the
	// sdk never sends it there). IdempotencyTTL is > 0 whenever
	// IdempotencyKey is set.
	IdempotencyKey string
	IdempotencyTTL time.Duration

	// OverrideKey, when set, holds the subject's overrides under this
	// policy (Overrider). Take, Peek, Reserve and Inspect read them in the
	// same atomic step and apply the live ones (Until zero or ahead of the
	// backend's clock), in this order of precedence:
	//   - a Block denies: Result.Allowed is false, nothing is consumed,
	//     every rule is still reported as evaluated, and a Take or Reserve
	//     writes one trail entry with Denial.Override set (Rule empty,
	//     RetryAfter until the block ends, zero for a block without end);
	//   - else an Exempt admits: Result.Allowed is true whatever the
	//     rules say; a Counted exempt consumes the cost from every rule
	//     (Used may exceed Limit, up to MaxUsed: the units beyond are not
	//     counted; a GCRA rule's theoretical arrival time moves at most
	//     MaxDebt ahead of now), an uncounted one consumes nothing;
	//   - Limit overrides replace the limits of the rules they name
	//     (Override.Limits; several: the latest ID wins per rule) before
	//     the rules are evaluated; the RuleResults report the limits used.
	// Result.Override is the override that decided (Block, Exempt) or,
	// failing those, the latest Limit override that changed a rule of the
	// request. Empty: no override is read (the key costs nothing).
	OverrideKey string

	// Quiet, when not empty, holds the quiet hours around now (sdk's
	// WithQuietHours, in the recipient's zone, as instants: at most
	// MaxQuietSpans, sorted, not overlapping). The sdk sends those within
	// an hour or so of its own clock (an hour each way at least, computed
	// once a minute), framed by two spans reaching far before and after
	// them: a backend whose clock is far from the sdk's falls in one of
	// those, and the sdk reads the quiet denial ending at a frame's End as
	// a clock skew (sdk.ErrClockSkew), not a decision. A backend treats
	// every span alike, and only reads them: the sdk shares one slice
	// between the requests of a minute. When the backend's clock
	// at the decision falls in one of them, the request is denied for
	// quiet hours: Result.Allowed is false, Result.Quiet is that span's
	// End, nothing is consumed, every rule is still evaluated and
	// reported, and a Take or Reserve writes one trail entry with
	// Denial.Quiet set (Rule empty, RetryAfter until the span's End).
	// Precedence: a Block override denies first (its own entry); quiet
	// hours come before an Exempt override and the rules. An attempt
	// exempt from quiet hours is sent without Quiet.
	Quiet []Span
}

// OverrideKind is what an Override does.
type OverrideKind uint8

const (
	// Exempt admits every attempt (Override.Counted: consuming).
	Exempt OverrideKind = iota + 1
	// Block denies every attempt until Override.Until.
	Block
	// Limit gives the rules named in Override.Limits other limits.
	Limit
)

// String returns the kind as the CLI, the API and the console write it.
func (k OverrideKind) String() string {
	switch k {
	case Exempt:
		return "exempt"
	case Block:
		return "block"
	case Limit:
		return "limit"
	}
	return "unknown"
}

// ParseOverrideKind returns the kind String writes as s ("exempt",
// "block" or "limit"); ok is false for anything else.
func ParseOverrideKind(s string) (k OverrideKind, ok bool) {
	for _, k := range []OverrideKind{Exempt, Block, Limit} {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// The longest Override.Reason and Override.By, in bytes (sdk's
// Admin.SetOverride refuses longer ones).
const (
	MaxOverrideReasonLen = 256
	MaxOverrideByLen     = 64
)

// Override is one per-person exception to a policy's rules, kept by the
// backend under a subject's Request.OverrideKey.
type Override struct {
	// ID is the override's number, unique in the backend (assigned by
	// SetOverride), so decisions and trail entries can name it
	// ("allowed by override #12").
	ID   int64
	Kind OverrideKind
	// Counted: an Exempt override's attempts are still consumed from the
	// rules (so the counters stay true); without it they are not counted.
	Counted bool
	// Limits maps rule names to the limit that replaces theirs (a GCRA
	// rule's rate, per its Window; Burst is kept). Kind Limit only.
	Limits map[string]int64
	// Until is when the override ends; zero: never (until deleted).
	Until time.Time
	// Reason, By and Created say why, who set it, and when (backend
	// clock); audited with the person.
	Reason  string
	By      string
	Created time.Time
}

// Overrider is implemented by backends that keep per-person overrides.
type Overrider interface {
	// SetOverride stores o under key (a Request.OverrideKey) with a new
	// ID (o.ID is ignored) and Created set to the backend's clock, and
	// returns it as stored. An override whose Until has passed is
	// refused. The key lives until the latest Until of its overrides
	// (forever while one has none).
	SetOverride(ctx context.Context, key string, o Override) (Override, error)
	// DeleteOverride removes override id from key; ErrOverrideNotFound
	// when it is not there (never set, deleted, or ended).
	DeleteOverride(ctx context.Context, key string, id int64) error
	// Overrides returns the live overrides under key, by ID.
	Overrides(ctx context.Context, key string) ([]Override, error)
}

// ErrOverrideNotFound is returned by DeleteOverride for an unknown, deleted
// or ended override.
var ErrOverrideNotFound = errors.New("freqcap: override not found")

// PolicyVersion is one version of a policy store's document.
type PolicyVersion struct {
	// Version numbers the store's versions from 1, one more per apply.
	Version int64
	// Document is what the store stored (sdk/policystore: the policy file
	// as applied and what it derived from it), verbatim.
	Document []byte
	// At is when it was applied (the backend's clock); By and Reason who
	// applied it and why.
	At     time.Time
	By     string
	Reason string
}

// PolicyStore is implemented by backends that keep versioned policy
// documents, applied whole, for every limiter sharing the backend to
// follow.
type PolicyStore interface {
	// PutPolicies stores v as version prev+1, atomically, if the store's
	// current version is prev (0: empty); otherwise it returns an error
	// wrapping ErrVersionConflict and stores nothing. v.Version and v.At
	// are set by the store. It then notifies the watchers of key.
	PutPolicies(ctx context.Context, key string, prev int64, v PolicyVersion) (PolicyVersion, error)
	// GetPolicies returns version n of key's store (0: the current one);
	// ErrNoPolicyVersion when there is none.
	GetPolicies(ctx context.Context, key string, n int64) (PolicyVersion, error)
	// PolicyHistory returns up to max versions of key's store, newest
	// first (max <= 0: all).
	PolicyHistory(ctx context.Context, key string, max int) ([]PolicyVersion, error)
	// WatchPolicies returns a channel that receives the store's current
	// version number soon after each PutPolicies on key (by any process
	// sharing the backend), and is closed when ctx is done. Notifications
	// may be coalesced or, if the backend loses its connection, missed:
	// watchers also poll GetPolicies (sdk/policystore does).
	WatchPolicies(ctx context.Context, key string) (<-chan int64, error)
}

// ErrVersionConflict is returned by PutPolicies when the store's current
// version is not the one the caller read: someone else applied in between.
var ErrVersionConflict = errors.New("freqcap: policy store: version conflict")

// ErrNoPolicyVersion is returned by GetPolicies for a version the store
// does not hold (or an empty store).
var ErrNoPolicyVersion = errors.New("freqcap: policy store: no such version")

// MaxPolicyDocument is the largest PolicyVersion.Document a PolicyStore
// stores (1 MiB): PutPolicies refuses a larger one and stores nothing, and
// GetPolicies refuses to read one written by hand (CheckPolicyDocument).
const MaxPolicyDocument = 1 << 20

// RuleResult is one rule's part of a Result.
type RuleResult struct {
	// Allowed reports whether this rule admits the cost.
	Allowed bool
	// Used is the count after the call: it includes the cost when the
	// request was allowed and consumed, and not otherwise.
	Used int64
	// Limit is the rule's limit as reported (GCRA: Burst+1).
	Limit int64
	// Remaining is Limit-Used, never negative.
	Remaining int64
	// ResetAfter is how long until Used is back to zero if nothing more
	// is taken (fixed window: the window's end).
	ResetAfter time.Duration
	// RetryAfter is, when the rule does not admit the cost, how long until
	// it will; zero when it admits it.
	RetryAfter time.Duration
	// CostTooHigh reports that the cost can never fit (cost > limit);
	// RetryAfter is zero then.
	CostTooHigh bool
	// Strategy names how the backend evaluated this rule (e.g. "cells",
	// "lua-hash", "tairhash"); it matches a Description's strategy names.
	// Empty when the backend does not say.
	Strategy string
}

// Result is a backend's answer to a Request.
type Result struct {
	// Allowed reports whether every enforced rule admitted the cost (and,
	// for Take and Reserve, that the cost was consumed from every rule
	// but the shadow rules that would have denied), or whether an
	// override decided (Request.OverrideKey). Shadow rules never deny
	// (Rule.Shadow).
	Allowed bool
	// Rules holds one result per Request.Rules entry, in the same order.
	Rules []RuleResult
	// Now is the backend's clock at the decision.
	Now time.Time
	// Trail is the subject's recent denials, newest first (Inspect only).
	Trail []Denial
	// NonAtomic reports that the backend could not make this decision
	// all-or-nothing (it compensates instead, e.g. TairHash without Lua;
	// CL.THROTTLE without Lua cannot give units back, so a denied request
	// may leave units consumed in a GCRA rule: under-admission, never
	// over-admission).
	NonAtomic bool
	// Replayed reports that this Result is the one stored under
	// Request.IdempotencyKey by an earlier request, returned unchanged (Now is
	// that request's clock): nothing was consumed this time.
	Replayed bool
	// ReservationID is, for an allowed Reserve, the id of the reservation
	// it created (Request.ReservationID; for a replay, the original
	// request's). It is empty otherwise, and always for Take. Backends
	// honouring IdempotencyKey must set it.
	ReservationID string
	// Override is the override that decided this Result or changed one of
	// its rules' limits (Request.OverrideKey); ID 0 when none applied.
	Override Override
	// Replicas is, for a Take or Reserve (single, batched or coalesced)
	// on a backend asked to wait for replicas after each decision (e.g.
	// the Redis backend's Options.Durability), how many replicas
	// acknowledged this decision's writes before the wait's timeout; and
	// Durable reports that it is at least the number asked for. Both are
	// zero when the backend waits for no replica (the default), for
	// operations that consume nothing (Peek, Inspect) and for a replay
	// (Replayed: the first decision's acknowledgement was its caller's).
	// A decision that is not Durable stands all the same: it was made,
	// and counted on the master.
	Replicas int
	Durable  bool
	// Quiet, when not zero, reports a denial for quiet hours
	// (Request.Quiet): the End of the quiet span the backend's clock fell
	// in.
	Quiet time.Time
}

// Denial is one entry of a denial trail.
type Denial struct {
	At         time.Time
	Policy     string
	Rule       string
	Used       int64
	Limit      int64
	Cost       int64
	RetryAfter time.Duration
	// CostTooHigh: the cost could never fit; RetryAfter is zero.
	CostTooHigh bool
	// Shadow: a shadow rule (Rule.Shadow) would have denied; the attempt
	// itself may have been allowed.
	Shadow bool
	// Exempt: an exempt rule (Rule.Exempt) would have denied; the attempt
	// itself may have been allowed.
	Exempt bool
	// Quiet: the attempt was denied for quiet hours (Request.Quiet); Rule
	// is empty and RetryAfter runs until they end.
	Quiet bool
	// Override, when nonzero, is the Block override that denied (Rule is
	// empty; RetryAfter runs until the block ends, zero without end).
	Override int64
	// Values is the Request.TrailValues of the denied request, verbatim
	// ("" for entries written without).
	Values string
}

// Clock is a source of time that can also wait: the system clock, or a
// fake one in tests whose Sleep advances it (sdk/fakeclock).
type Clock interface {
	Now() time.Time
	// Sleep returns after d, or with ctx's error when ctx is done first.
	Sleep(ctx context.Context, d time.Duration) error
}

// Clocked is implemented by backends that decide on a clock of the
// caller's process (the memory backend) rather than a server's. The sdk's
// Limiter then reads the same clock, so a test injects time once.
type Clocked interface {
	Clock() Clock
}

// SystemClock is the real clock: time.Now, and a timer for Sleep.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Backend is the one interface every backend implements: Take, the
// consuming decision. Everything else is optional (Peeker, Reserver,
// Inspector, Resetter, Describer, Batcher, Clocked, Overrider,
// PolicyStore, ValueLister): the sdk discovers it with a type assertion and, where it
// is missing, does without (Batcher, Clocked) or returns an error
// wrapping errors.ErrUnsupported. Implementations are safe for concurrent
// use.
type Backend interface {
	// Take checks every rule of req for req.Cost and, only if every
	// enforced one admits it, consumes req.Cost from each, atomically:
	// all rules or none (a shadow rule only when it admits it too, see
	// Rule.Shadow; overrides may decide instead, see Request.OverrideKey).
	// It first gives back the units of lapsed reservations under
	// req.ReservationKey; a denial writes the trail (Request.TrailKey).
	// A denial is a Result, not an error; an error means the backend
	// could not decide and nothing was consumed, or — for a timeout —
	// that it cannot tell.
	Take(ctx context.Context, req Request) (Result, error)
}

// Peeker is implemented by backends that can decide without consuming.
type Peeker interface {
	// Peek reports what Take would decide for req, consuming nothing and
	// writing no trail (lapsed reservations are still given back).
	Peek(ctx context.Context, req Request) (Result, error)
}

// Reserver is implemented by backends that support reservations: units
// consumed now and committed or given back later.
type Reserver interface {
	// Reserve is Take that also records a reservation, req.ReservationID
	// under req.ReservationKey, which Commit or Cancel settles. A
	// reservation not settled within req.ReservationTTL lapses and its
	// units are given back (lazily: at the next operation on
	// ReservationKey, or when the rule's state expires, whichever comes
	// first). A give-back never takes from a window or cell that began
	// after the reservation. A denied Reserve records nothing.
	Reserve(ctx context.Context, req Request) (Result, error)
	// Commit keeps the units of the reservation id stored under
	// reservationKey and forgets it, after processing the lapsed ones
	// there. It returns ErrReservationNotFound when the reservation does
	// not exist: never made, already settled, or lapsed.
	Commit(ctx context.Context, reservationKey, id string) error
	// Cancel is Commit that gives the units back.
	Cancel(ctx context.Context, reservationKey, id string) error
}

// Inspector is implemented by backends that can show a subject's state
// and its denial trail.
type Inspector interface {
	// Inspect is Peek with cost 1 that also returns the denial trail
	// (Result.Trail) stored under req.TrailKey. Rules may be left out of
	// req (the caller cannot name their keys); every rule given is
	// reported.
	Inspect(ctx context.Context, req Request) (Result, error)
}

// Resetter is implemented by backends that can forget a subject.
type Resetter interface {
	// Reset deletes the state of every rule in req.Rules and every
	// reservation under req.ReservationKey (without giving anything back;
	// an empty ReservationKey keeps them). The denial trail, idempotency
	// records and overrides (req.OverrideKey) are kept. req.Rules may hold
	// a changed rule's predecessors (Rule.Seed): their state is deleted
	// too. The sdk names either every rule of a set of dimensions
	// (Rule.Group) or none of it, so a backend keeping
	// a set's state under one key may delete that key whole.
	Reset(ctx context.Context, req Request) error
}

// Describer is implemented by backends that can say what they are and
// which strategy they use for each algorithm (shown by the console).
type Describer interface {
	Describe(ctx context.Context) (Description, error)
}

// Description is a backend's account of itself.
type Description struct {
	// Name is the backend's kind, e.g. "memory" or "redis".
	Name string
	// Target says where it stores state, e.g. "127.0.0.1:6379".
	Target string
	// Strategies maps an algorithm to the strategy in use and why.
	Strategies map[Algorithm]Strategy
	// Notes are further findings, one sentence each.
	Notes []string
	// Memory is, for a backend whose servers keep state in memory under a
	// limit (Redis: every master's INFO memory and INFO stats), what each
	// says of its memory, in node order; empty where the backend does not
	// say.
	Memory []NodeMemory
	// Warnings are findings that put enforcement at risk — a person may be
	// admitted uncapped, or the backend refuses to decide — one sentence
	// each. The console shows them on its overview, `freqcap detect` and
	// serve's /readyz print them.
	Warnings []string
}

// ErrRefused is wrapped by the errors of a backend that answers but, as
// configured, refuses to decide on a server it judges unsafe (the Redis
// backend's redis.ErrEvictionPolicy): retrying does not help until the
// server or the configuration changes.
var ErrRefused = errors.New("freqcap: the backend refuses to decide")

// NodeMemory is what one server says of its memory.
type NodeMemory struct {
	// Node is the server's address.
	Node string
	// Known reports that the server answered; when false, Unknown says
	// why (e.g. INFO refused by an ACL or a proxy) and the other fields
	// are zero.
	Known   bool
	Unknown string
	// MaxMemory is the server's memory limit in bytes (0: none).
	MaxMemory int64
	// Policy is its eviction policy (Redis' maxmemory-policy, e.g.
	// "noeviction", "volatile-lru").
	Policy string
	// UsedMemory is the memory it uses, in bytes.
	UsedMemory int64
	// EvictedKeys counts the keys it evicted since it started.
	EvictedKeys int64
	// Evicts reports that the server may evict keys under memory
	// pressure: a limit and a policy other than noeviction.
	Evicts bool
}

// Strategy is how a backend implements one algorithm.
type Strategy struct {
	Name   string // e.g. "lua-hash", "tairhash", "redis-cell"
	Reason string // e.g. "EXHINCRBY on 3/3 masters"
}

// Batcher is implemented by backends that can carry out many requests in
// few round trips (e.g. one pipeline per Redis Cluster node).
type Batcher interface {
	// TakeBatch carries out each of reqs as Take would and returns one
	// BatchResult per request, in input order (len(reqs) of them, even
	// when ctx is done). Each request is atomic by itself; there is no
	// atomicity across requests. Requests sharing a hash tag are carried
	// out in input order (so a later request sees an earlier one's
	// effect); others in any order. A failure, including an invalid
	// request, is reported in that request's Err alone.
	TakeBatch(ctx context.Context, reqs []Request) []BatchResult
	// PeekBatch is TakeBatch with Peek for Take. The sdk calls it only on
	// a backend that is also a Peeker.
	PeekBatch(ctx context.Context, reqs []Request) []BatchResult
}

// BatchResult is one request's answer in a TakeBatch or PeekBatch: a
// Result, or the error Take (Peek) would have returned (then Result is the
// zero value).
type BatchResult struct {
	Result Result
	Err    error
}

// ErrReservationNotFound is returned by Commit and Cancel for an unknown, settled or
// lapsed reservation.
var ErrReservationNotFound = errors.New("freqcap: reservation not found (settled or lapsed)")

// HashTag returns what Redis Cluster hashes of key: the text between the
// first '{' and the next '}' when non-empty, else the whole key. Keys with
// the same hash tag are in the same slot (and the same memory shard).
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// DefaultSubWindows is the number of cells of a SlidingWindow rule whose
// SubWindows is 0.
const DefaultSubWindows = 10

// The largest numbers a rule may hold, the same for every backend. sdk
// refuses a rule or a cost beyond them, so
// a backend sees only numbers that neither overflow an int64 nor lose
// precision as a double:
//
//   - counts in Lua are doubles, exact below 2^53: a count plus a cost,
//     each at most MaxLimit, stays far below;
//   - instants on Redis are µs since the epoch (about 1.8e15 in 2027) and
//     a backend adds up to two windows to one (a cell's end and its key's
//     expiry): with windows of at most MaxWindow that stays below 2^53 µs
//     until 2112, and below 2^63 ns (the memory backend) until 2119;
//   - a GCRA rule's tolerance, T*(Burst+1) with T = Window/Limit, and its
//     emission interval T, are sent as ns and reckoned in ns by the memory
//     backend, with a float64 quotient for Used: at most MaxTolerance
//     (2^53 ns), both are exact as doubles.
const (
	// MaxLimit is the largest Limit, Burst+1 and cost: 2^50.
	MaxLimit = 1 << 50
	// MaxWindow is the longest Window: 2^51 µs, about 71 years.
	MaxWindow = (1 << 51) * time.Microsecond
	// MaxTolerance is the longest tolerance of a GCRA rule,
	// Window/Limit*(Burst+1): 2^53 ns, about 104 days (the time a full
	// burst takes to come back).
	MaxTolerance = time.Duration(1 << 53)
	// MinInterval is the shortest emission interval of a GCRA rule,
	// Window/Limit: 1µs, the unit of the Redis backend's instants (there a
	// shorter one would round, for one unit, to 0 or to a whole µs).
	MinInterval = time.Microsecond
	// MaxUsed is the most units a rule counts: 2^52, 4 × MaxLimit. Only a
	// counted exempt (Request.OverrideKey) takes a count past its limit;
	// it adds min(cost, MaxUsed-used) units, so Used saturates at MaxUsed
	// instead of wrapping: a count plus a cost stays exact as a double
	// (below 2^53) and within what every backend stores and reports.
	// Once a rule is at MaxUsed, the exempt's attempts leave it as it is.
	MaxUsed = 4 * MaxLimit
	// MaxDebt is how far ahead of now a counted exempt may move a GCRA
	// rule's theoretical arrival time: 2^45 µs, about 407 days, beyond
	// twice any tolerance (MaxTolerance, what a seed can carry). A GCRA
	// rule's Used is at most Burst+1 whatever its debt; the debt is how
	// long the rule stays spent.
	MaxDebt = (1 << 45) * time.Microsecond
)

// Cells returns a SlidingWindow rule's cell layout, the same for every
// backend: n cells (SubWindows, or DefaultSubWindows) of size
// Window/n truncated to the millisecond, at least 1 ms.
func (r Rule) Cells() (size time.Duration, n int64) {
	n = int64(r.SubWindows)
	if n <= 0 {
		n = DefaultSubWindows
	}
	size = (r.Window / time.Duration(n)).Truncate(time.Millisecond)
	return max(size, time.Millisecond), n
}

// GCRAParams returns a GCRA rule's parameters, the same for every backend:
// the emission interval t = Window/Limit truncated to the microsecond, at
// least 1µs; the tolerance tol = t*(Burst+1) (saturating at the largest
// whole-µs Duration instead of overflowing); and the limit a GCRA rule
// reports, Burst+1. Both durations are whole microseconds, so backends
// counting in integer µs (Redis' TIME) and in time.Time compute the same
// answers exactly.
func (r Rule) GCRAParams() (t, tol time.Duration, limit int64) {
	t = time.Microsecond
	if r.Limit > 0 {
		t = max((r.Window / time.Duration(r.Limit)).Truncate(time.Microsecond), time.Microsecond)
	}
	limit = r.Burst + 1
	if r.Burst >= math.MaxInt64/int64(t) {
		tol = time.Duration(math.MaxInt64).Truncate(time.Microsecond)
	} else {
		tol = t * time.Duration(limit)
	}
	return t, tol, limit
}

// ReportedLimit is the limit r's results report: Burst+1 for a GCRA rule
// (see GCRAParams), Limit otherwise.
func (r Rule) ReportedLimit() int64 {
	if r.Algorithm == GCRA {
		return r.Burst + 1
	}
	return r.Limit
}

// CellSpan is a SlidingWindow rule's counting arithmetic, in one integer
// time unit (nanoseconds in memory, microseconds on Redis), the same for
// every backend. At time t, in cell i = Index(t), the rule counts the
// cells j >= Oldest(i) = i-Back: the current cell and the Back cells
// before it, the partly expired oldest one included. Back is the number
// of cells a window can reach behind the current one, ceil(Window/Size)
// (SubWindows when cells divide the window), so any unit within Window
// (closed) before t lies in a counted cell: no interval of length Window
// ever holds more than Limit admitted units. Cell j stops counting at
// Leaves(j) = (j+Back+1)*Size.
type CellSpan struct {
	Size int64 // cell length
	Back int64 // cells counted behind the current one
}

// Span returns r's CellSpan in unit (time.Nanosecond or
// time.Microsecond: cells are whole milliseconds).
func (r Rule) Span(unit time.Duration) CellSpan {
	size, _ := r.Cells()
	return CellSpan{Size: int64(size / unit), Back: int64((r.Window + size - 1) / size)}
}

// Index returns the cell holding t: floor(t/Size).
func (c CellSpan) Index(t int64) int64 { return arith.FloorDiv(t, c.Size) }

// Oldest returns the oldest cell counted at cell i: i-Back.
func (c CellSpan) Oldest(i int64) int64 { return i - c.Back }

// Leaves returns when cell j stops counting: (j+Back+1)*Size.
func (c CellSpan) Leaves(j int64) int64 { return (j + c.Back + 1) * c.Size }

// LogLine is the largest Limit of a SlidingWindow rule evaluated as an
// exact sliding log (Rule.ExactLog), and the largest limit of the sliding
// logs the Redis backend keeps packed in the dimension set's value (a
// record per admission in the longest window: at most about LogLine
// records, 14 bytes each, read and rewritten by every decision; larger
// logs keep a sorted set there). docs/DESIGN.md, "Sliding logs", gives the
// measurements behind it.
const LogLine = 100

// ExactLog reports whether r is evaluated as an exact sliding log: a
// SlidingLog rule, or a SlidingWindow rule whose Limit is at most LogLine
// (the cells' under-admission costs more than a log that short). The
// Limit is the rule's own: a limit override does not switch a rule
// between the two.
func (r Rule) ExactLog() bool {
	return r.Algorithm == SlidingLog || r.Algorithm == SlidingWindow && r.Limit <= LogLine
}

// Reach is how long r's state can prove anything after its last write:
// the longest a unit admitted at an instant t still counts, measured from
// t. A rule replaced at At (sdk.Change) is still enforced, and seeds its
// successor, until At+Reach. Per algorithm:
//   - FixedWindow: Window (the window holding At ends at most Window
//     later); a calendar rule: its nominal window (CalendarUnit.Nominal,
//     a month's being its longest, 31 days) plus one hour, for a 25-hour
//     DST day (or a week, month or hour that a zone shift lengthens);
//   - SlidingWindow: (Back+1) cells (CellSpan): a unit added in cell i
//     counts until Leaves(i), at most (Back+1)*Size after it; Window
//     for one evaluated as a log (ExactLog);
//   - SlidingLog: Window;
//   - GCRA: the tolerance (GCRAParams): a stored theoretical arrival time
//     is at most tol ahead of the instant it was admitted at.
func (r Rule) Reach() time.Duration {
	switch r.Algorithm {
	case FixedWindow:
		if r.Calendar != NoCalendar {
			return r.Window + time.Hour
		}
		return r.Window
	case SlidingWindow:
		if r.ExactLog() {
			return r.Window
		}
		size, _ := r.Cells()
		back := (r.Window + size - 1) / size
		return (back + 1) * size
	case GCRA:
		_, tol, _ := r.GCRAParams()
		return tol
	}
	return r.Window
}
