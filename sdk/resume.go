package sdk

import (
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// ReservationOf returns the reservation id that Reserve made for s under
// p, so that a process other than the one that reserved (a replica of a
// stateless decision server) can Commit or Cancel it. s needs only the
// policy's shard dimensions (ShardBy): a subject's reservations are kept
// by its shard values. id is what Reservation.ID returned: 16 lowercase
// hex characters. Commit and Cancel report ErrReservationNotFound as
// usual when there is no such reservation (settled, lapsed, or never
// made). When s gives every dimension, Cancel also evicts the subject
// from this Limiter's hot-deny cache, as the Reservation Reserve returned
// would. It touches no backend; the backend must support reservations.
func (l *Limiter) ReservationOf(p *Policy, s Subject, id string) (*Reservation, error) {
	if err := l.supports("reservation", opReserve); err != nil {
		return nil, err
	}
	if !validReservationID(id) {
		return nil, fmt.Errorf("sdk: reservation: %w: id must be 16 lowercase hex characters", ErrReservationNotFound)
	}
	res, err := resolve(l.prefix, p, s, true, l.now)
	if err != nil {
		return nil, fmt.Errorf("sdk: reservation: %w", err)
	}
	st, _ := l.b.(driver.Reserver)
	r := &Reservation{l: l, st: st, key: res.reservationKey, id: id, base: res.base}
	if len(res.skipped) == 0 {
		r.hot, r.hotKey = l.hotCacheOf(p), hotKey(res)
	}
	return r, nil
}

// validReservationID reports whether id has newReservationID's form.
func validReservationID(id string) bool {
	if len(id) != 16 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Trail returns the policy's denial trail settings (WithTrail): how many
// denials are kept per subject, and for how long after the last one.
func (p *Policy) Trail() (max int, ttl time.Duration) {
	if p == nil {
		return 0, 0
	}
	return p.trailMax, p.trailTTL
}
