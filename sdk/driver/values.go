package driver

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ValueLister is implemented by backends that can list the values a
// subject holds live state for in one dimension set nested under its root
// (a set over more than the shard dimensions: the campaigns, contents or
// devices of one person), for support staff (sdk's Admin.Values). It
// reads only: it writes nothing, and gives no lapsed reservation back.
type ValueLister interface {
	// ListValues returns one page of the live values of req.Set, in
	// SortValues's order (most recently written first), with how many are
	// live. A value is live while some state of it is (Value.Expires).
	ListValues(ctx context.Context, req ValuesRequest) (ValuesPage, error)
}

// ValuesRequest asks a ValueLister for one page of a subject's values of
// one dimension set.
type ValuesRequest struct {
	// Root is the key of the subject's set of the shard dimensions alone:
	// the Rule.Group of its rules keyed by those dimensions, ending in '='
	// (the sdk's key layout), whether or not the policy has such rules.
	// The Redis backend keeps the nested sets' state there.
	Root string
	// Set starts the key of every value of the set: Root, then the set's
	// dimensions beyond the shard ones, sorted and comma-separated. A
	// value's set key (its rules' Rule.Group) is Set, ':', then each of
	// those dimensions' escaped values, ':'-separated.
	Set string
	// Rules are the set's rules, a changed rule's predecessors included,
	// as resolved for any one value of it: a backend reads their identity
	// (name, algorithm, window, …) to tell the set's state from another
	// set's where its storage does not say, never their keys.
	Rules []Rule
	// Limit is the most values one page holds (> 0).
	Limit int
	// Cursor is "" for the first page, else a ValuesPage.Next or
	// ValuesPage.Prev of the same backend and set.
	Cursor string
}

// Value is one value of a subject's dimension set with live state.
type Value struct {
	// Group is the value's set key (its rules' Rule.Group:
	// ValuesRequest.Set, ':', its escaped values); "" when the backend does
	// not store it (the Redis backend, for a value kept in a narrow root
	// or moved into a wide root's hash and not written since:
	// docs/DESIGN.md, "Wide subjects").
	Group string
	// ID is the backend's own id of the value's state, stable while it
	// lives (Redis: its section's 8-byte id, in hex); "" where Group
	// serves (the memory backend).
	ID string
	// Written is when the value's state was last written, by the backend's
	// clock; zero when the backend does not store it.
	Written time.Time
	// Expires is when the value's state stops mattering (the latest of its
	// rules'): it is not listed from then on.
	Expires time.Time
}

// ValuesPage is one page of a ValueLister's answer.
type ValuesPage struct {
	// Values are the page's values, in SortValues's order.
	Values []Value
	// Total is how many live values the set holds, as far as the backend
	// looked (Partial).
	Total int
	// Partial reports that the backend stopped at its bound before it had
	// seen every stored value (the Redis backend: MaxValuesScan fields of
	// a wide root): the order, the pages and Total cover the values it saw.
	Partial bool
	// Next and Prev are the cursors of the pages after and before this
	// one (ValuesRequest.Cursor); "" when there is none.
	Next, Prev string
	// Now is the backend's clock when it listed.
	Now time.Time
}

// MaxValuesScan bounds the work of one ListValues on a backend that must
// read a subject's stored values to order them (the Redis backend: the
// fields of a wide root's hash): at most this many per call, in rounds of
// a bounded size. Past it the page says Partial.
const MaxValuesScan = 10000

// ErrInvalidCursor is returned by ListValues for a cursor that no
// ValuesPage of this version gave.
var ErrInvalidCursor = errors.New("freqcap: values: invalid cursor")

// SortValues sorts vals in the order ValueLister lists them: values
// whose last write is known first, the most recently written first; then
// the others, the latest expiry first; ties by ID, then by Group. The
// order depends on the values alone, so a cursor names a place in it
// (PageValues) whatever was written since.
func SortValues(vals []Value) {
	slices.SortFunc(vals, func(a, b Value) int { return placeOf(a).cmp(placeOf(b)) })
}

// PageValues returns the page of vals (sorted with SortValues first) that
// cursor and limit select, and the cursors of the pages after and before
// it: the limit values after the cursor's place for a Next cursor (the
// first ones for ""), the limit values before it for a Prev cursor (the
// first page when fewer are left before it). A cursor's place needs no
// value to be there still: a value written since moves to the front,
// and the pages after the place never show it twice. Backends share it,
// so every one pages alike. A cursor PageValues did not write is
// ErrInvalidCursor; a limit below 1 means 1.
func PageValues(vals []Value, cursor string, limit int) (page []Value, next, prev string, err error) {
	SortValues(vals)
	limit = max(limit, 1)
	lo := 0
	if cursor != "" {
		after, at, end, err := parseCursor(cursor)
		if err != nil {
			return nil, "", "", err
		}
		i := len(vals)
		if !end {
			i, _ = slices.BinarySearchFunc(vals, at, func(v Value, at place) int { return placeOf(v).cmp(at) })
		}
		switch {
		case after:
			// Past the cursor's own value, if still there.
			if i < len(vals) && placeOf(vals[i]).cmp(at) == 0 {
				i++
			}
			lo = i
		default:
			lo = max(i-limit, 0)
		}
	}
	hi := min(lo+limit, len(vals))
	page = vals[lo:hi:hi]
	if hi < len(vals) {
		next = writeCursor(true, placeOf(vals[hi-1]))
	}
	switch {
	case lo > 0 && lo < len(vals):
		prev = writeCursor(false, placeOf(vals[lo]))
	case lo > 0:
		prev = endCursor // an empty page past the end: the last page before it
	}
	return page, next, prev, nil
}

// place is where a value stands in SortValues's order.
type place struct {
	written int64 // Unix ns; stamped false: unknown
	stamped bool
	expires int64 // Unix ns
	id      string
	group   string
}

func placeOf(v Value) place {
	p := place{expires: v.Expires.UnixNano(), id: v.ID, group: v.Group}
	if !v.Written.IsZero() {
		p.written, p.stamped = v.Written.UnixNano(), true
	}
	return p
}

// cmp orders places: stamped first, newest first; then the latest
// expiry; then by id and group.
func (p place) cmp(q place) int {
	switch {
	case p.stamped != q.stamped:
		if p.stamped {
			return -1
		}
		return 1
	case p.written != q.written:
		if p.written > q.written {
			return -1
		}
		return 1
	case p.expires != q.expires:
		if p.expires > q.expires {
			return -1
		}
		return 1
	}
	if c := strings.Compare(p.id, q.id); c != 0 {
		return c
	}
	return strings.Compare(p.group, q.group)
}

// Cursors: 'n' (next: the values after the place) or 'p' (prev: before
// it), then, base64url without padding, a version byte, a flags byte
// (1: stamped), the written and expires ns as varints, the id's length
// as a uvarint, the id, then the group. endCursor, 'p' alone, is the
// place after the last value.
const (
	cursorVersion = 1
	endCursor     = "p"
)

// writeCursor writes the cursor of the values after (or before) p.
func writeCursor(after bool, p place) string {
	b := []byte{cursorVersion, 0}
	if p.stamped {
		b[1] = 1
	}
	b = binary.AppendVarint(b, p.written)
	b = binary.AppendVarint(b, p.expires)
	b = binary.AppendUvarint(b, uint64(len(p.id)))
	b = append(append(b, p.id...), p.group...)
	dir := "p"
	if after {
		dir = "n"
	}
	return dir + base64.RawURLEncoding.EncodeToString(b)
}

// parseCursor reads a cursor writeCursor wrote (end: endCursor).
func parseCursor(c string) (after bool, p place, end bool, err error) {
	bad := func(why string) (bool, place, bool, error) {
		return false, place{}, false, fmt.Errorf("%w: %s", ErrInvalidCursor, why)
	}
	if c == endCursor {
		return false, place{}, true, nil
	}
	if c[0] != 'n' && c[0] != 'p' {
		return bad("unknown direction")
	}
	b, err := base64.RawURLEncoding.DecodeString(c[1:])
	if err != nil {
		return bad("not base64url")
	}
	if len(b) < 2 || b[0] != cursorVersion || b[1] > 1 {
		return bad("unknown version")
	}
	p.stamped = b[1] == 1
	b = b[2:]
	var n int
	if p.written, n = binary.Varint(b); n <= 0 {
		return bad("truncated")
	}
	b = b[n:]
	if p.expires, n = binary.Varint(b); n <= 0 {
		return bad("truncated")
	}
	b = b[n:]
	idLen, n := binary.Uvarint(b)
	if n <= 0 || idLen > uint64(len(b)-n) {
		return bad("truncated")
	}
	b = b[n:]
	p.id, p.group = string(b[:idLen]), string(b[idLen:])
	return c[0] == 'n', p, false, nil
}
