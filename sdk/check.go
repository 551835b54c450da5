package sdk

// Check returns the error Take would return for a under p because of its
// input — an invalid subject (a dimension missing, empty or too long), an
// invalid cost, idempotency key or zone (time.Local), or an idempotency
// key the backend cannot keep — without deciding anything or touching the
// backend; nil when Take would decide it. A server that must refuse a whole request
// when any of its attempts is invalid checks them all first.
func (l *Limiter) Check(p *Policy, a Attempt) error {
	var c call
	return l.prepare(&c, "take", false, opTake, p, a, 0)
}
