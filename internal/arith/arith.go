// Package arith holds the integer arithmetic the sdk, the driver contract
// and the backends share.
package arith

// FloorDiv is floor(a/b) for b > 0, also for a negative a (where Go's /
// truncates toward zero): the index of the window or cell of size b
// holding instant a.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
