package sdk

import (
	"errors"

	"github.com/freqcap/freqcap/sdk/driver"
)

// Sentinel errors, matched with errors.Is. The errors the package returns
// wrap them and add the operation and the field at fault; they never
// contain subject values.
var (
	// ErrInvalidRule: a rule's fields are out of range or inconsistent.
	ErrInvalidRule = errors.New("invalid rule")
	// ErrInvalidPolicy: a policy (or a policy file) cannot be built: bad
	// name, duplicate rule names, rules sharing no dimension, unknown
	// keys in YAML, a nil policy passed to the Limiter.
	ErrInvalidPolicy = errors.New("invalid policy")
	// ErrInvalidSubject: the subject lacks a dimension a rule needs, or a
	// value is empty or longer than MaxValueLen bytes.
	ErrInvalidSubject = errors.New("invalid subject")
	// ErrInvalidCost: the cost is negative (Attempt.Cost 0 means 1) or
	// more than driver.MaxLimit.
	ErrInvalidCost = errors.New("invalid cost")
	// ErrInvalidIdempotencyKey: an attempt's idempotency key is longer
	// than MaxIdempotencyKeyLen bytes, or was first used by another kind
	// of operation (a Take replaying a reservation, or the reverse), or
	// its IdempotencyTTL is negative.
	ErrInvalidIdempotencyKey = errors.New("invalid idempotency key")
	// ErrInvalidZone: an attempt's time zone (Attempt.Zone) is time.Local,
	// or a zone name LoadZone was given is not an IANA zone it can load.
	ErrInvalidZone = errors.New("invalid zone")
	// ErrInvalidClass: an attempt's message class (Attempt.Class) is not
	// one its policy declares (WithClass).
	ErrInvalidClass = errors.New("invalid message class")
	// ErrClockSkew: a decision under quiet hours (WithQuietHours) met a
	// backend whose clock is outside the stretch of time the quiet hours
	// sent with it cover: at least an hour each way of the Limiter's clock
	// (WithClock; less only when more quiet periods fall in that stretch
	// than a request carries, driver.MaxQuietSpans). It was not made
	// (nothing was consumed). Under a fail-open
	// policy the decision is Degraded instead.
	ErrClockSkew = errors.New("backend clock too far from the limiter's")
	// ErrInvalidPriority: an attempt's priority (Attempt.Priority) is
	// below 0 or above MaxPriority.
	ErrInvalidPriority = errors.New("invalid priority")
	// ErrCostTooHigh is returned by Wait when some rule can never admit
	// the cost (it exceeds the rule's limit), so waiting is pointless.
	ErrCostTooHigh = errors.New("cost exceeds a rule's limit")
	// ErrWaitTooLong is returned by Wait when the request cannot be
	// admitted before the context's deadline. Nothing was consumed.
	ErrWaitTooLong = errors.New("cannot be admitted before the context deadline")
	// ErrReservationNotFound is returned by Reservation.Commit and Cancel
	// when the reservation no longer exists: already settled, or lapsed.
	ErrReservationNotFound = driver.ErrReservationNotFound
)

// ErrOverrideNotFound is returned by Admin.DeleteOverride for an
// unknown, deleted or ended override.
var ErrOverrideNotFound = driver.ErrOverrideNotFound

// ErrInvalidOverride: an override given to Admin.SetOverride is
// malformed: an unknown kind, limits on a kind other than driver.Limit
// or naming no rule of the policy, a limit out of range, an end already
// past, or a reason or author too long or holding a line break.
var ErrInvalidOverride = errors.New("invalid override")
