package protoconv

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// Classify returns the code and reason of an error the sdk returned. A
// backend failure (anything it does not recognise) is Unavailable: no
// decision was made. It never looks at the error's text.
func Classify(err error) (connect.Code, freqcapv1.Reason) {
	switch {
	case errors.Is(err, sdk.ErrReservationNotFound):
		return connect.CodeNotFound, freqcapv1.Reason_REASON_RESERVATION_NOT_FOUND
	case errors.Is(err, sdk.ErrOverrideNotFound):
		return connect.CodeNotFound, freqcapv1.Reason_REASON_OVERRIDE_NOT_FOUND
	case errors.Is(err, sdk.ErrInvalidSubject):
		return connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_SUBJECT
	case errors.Is(err, sdk.ErrInvalidCost):
		return connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_COST
	case errors.Is(err, sdk.ErrInvalidIdempotencyKey):
		return connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_IDEMPOTENCY_KEY
	case errors.Is(err, sdk.ErrInvalidZone):
		return connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_ZONE
	case errors.Is(err, sdk.ErrInvalidClass):
		return connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_CLASS
	case errors.Is(err, sdk.ErrInvalidPriority):
		return connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_PRIORITY
	case errors.Is(err, sdk.ErrInvalidOverride):
		return connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_OVERRIDE
	case errors.Is(err, sdk.ErrInvalidRule):
		return connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_RULE
	case errors.Is(err, sdk.ErrInvalidPolicy):
		return connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_POLICY
	case errors.Is(err, sdk.ErrInvalidIdentity):
		return connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_IDENTITY
	case errors.Is(err, driver.ErrLinkNotFound):
		return connect.CodeNotFound, freqcapv1.Reason_REASON_LINK_NOT_FOUND
	case errors.Is(err, driver.ErrIdentityLinked):
		return connect.CodeAlreadyExists, freqcapv1.Reason_REASON_IDENTITY_LINKED
	case errors.Is(err, driver.ErrTooManyLinks):
		return connect.CodeFailedPrecondition, freqcapv1.Reason_REASON_TOO_MANY_LINKS
	case errors.Is(err, driver.ErrRefused):
		return connect.CodeFailedPrecondition, freqcapv1.Reason_REASON_BACKEND_REFUSED
	case errors.Is(err, sdk.ErrClockSkew):
		return connect.CodeFailedPrecondition, freqcapv1.Reason_REASON_CLOCK_SKEW
	case errors.Is(err, errors.ErrUnsupported):
		return connect.CodeUnimplemented, freqcapv1.Reason_REASON_UNSUPPORTED
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded, freqcapv1.Reason_REASON_DEADLINE_EXCEEDED
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled, freqcapv1.Reason_REASON_UNSPECIFIED
	}
	return connect.CodeUnavailable, freqcapv1.Reason_REASON_BACKEND_UNAVAILABLE
}

// NewError is a connect error with its ErrorDetail. msg must hold no
// subject value and no server address.
func NewError(code connect.Code, reason freqcapv1.Reason, msg string) *connect.Error {
	e := connect.NewError(code, errors.New(msg))
	if d, err := connect.NewErrorDetail(&freqcapv1.ErrorDetail{Reason: reason}); err == nil {
		e.AddDetail(d)
	}
	return e
}

// ReasonOf reads the reason of a connect error (REASON_UNSPECIFIED when
// it has none: a transport error, or another server).
func ReasonOf(err error) freqcapv1.Reason {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return freqcapv1.Reason_REASON_UNSPECIFIED
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if ed, ok := v.(*freqcapv1.ErrorDetail); ok {
			return ed.GetReason()
		}
	}
	return freqcapv1.Reason_REASON_UNSPECIFIED
}

// Sentinel is the sdk error a reason stands for (nil when none does), so
// that errors.Is works alike on the in-process and the remote limiter.
func Sentinel(r freqcapv1.Reason) error {
	switch r {
	case freqcapv1.Reason_REASON_INVALID_SUBJECT:
		return sdk.ErrInvalidSubject
	case freqcapv1.Reason_REASON_INVALID_COST:
		return sdk.ErrInvalidCost
	case freqcapv1.Reason_REASON_INVALID_IDEMPOTENCY_KEY:
		return sdk.ErrInvalidIdempotencyKey
	case freqcapv1.Reason_REASON_INVALID_ZONE:
		return sdk.ErrInvalidZone
	case freqcapv1.Reason_REASON_INVALID_CLASS:
		return sdk.ErrInvalidClass
	case freqcapv1.Reason_REASON_INVALID_PRIORITY:
		return sdk.ErrInvalidPriority
	case freqcapv1.Reason_REASON_RESERVATION_NOT_FOUND:
		return sdk.ErrReservationNotFound
	case freqcapv1.Reason_REASON_UNKNOWN_POLICY, freqcapv1.Reason_REASON_INVALID_POLICY:
		return sdk.ErrInvalidPolicy
	case freqcapv1.Reason_REASON_INVALID_RULE:
		return sdk.ErrInvalidRule
	case freqcapv1.Reason_REASON_INVALID_OVERRIDE:
		return sdk.ErrInvalidOverride
	case freqcapv1.Reason_REASON_UNSUPPORTED:
		return errors.ErrUnsupported
	case freqcapv1.Reason_REASON_DEADLINE_EXCEEDED:
		return context.DeadlineExceeded
	case freqcapv1.Reason_REASON_OVERRIDE_NOT_FOUND:
		return sdk.ErrOverrideNotFound
	case freqcapv1.Reason_REASON_VERSION_CONFLICT:
		return driver.ErrVersionConflict
	case freqcapv1.Reason_REASON_NO_POLICY_VERSION:
		return driver.ErrNoPolicyVersion
	case freqcapv1.Reason_REASON_UNREADABLE_POLICY_VERSION:
		return policystore.ErrUnreadableVersion
	case freqcapv1.Reason_REASON_REKEY_UNCONFIRMED:
		return policystore.ErrRekeyNotConfirmed
	case freqcapv1.Reason_REASON_BACKEND_REFUSED:
		return driver.ErrRefused
	case freqcapv1.Reason_REASON_CLOCK_SKEW:
		return sdk.ErrClockSkew
	case freqcapv1.Reason_REASON_INVALID_IDENTITY:
		return sdk.ErrInvalidIdentity
	case freqcapv1.Reason_REASON_LINK_NOT_FOUND:
		return driver.ErrLinkNotFound
	case freqcapv1.Reason_REASON_IDENTITY_LINKED:
		return driver.ErrIdentityLinked
	case freqcapv1.Reason_REASON_TOO_MANY_LINKS:
		return driver.ErrTooManyLinks
	}
	return nil
}

// Faults reads the document faults of a connect error's ErrorDetail (none
// when it has none).
func Faults(err error) []*freqcapv1.DocumentFault {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if ed, ok := v.(*freqcapv1.ErrorDetail); ok {
			return ed.GetFaults()
		}
	}
	return nil
}
