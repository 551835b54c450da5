package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/alg"
)

// GCRA in bare mode: where scripting is refused and redis-cell is loaded,
// GCRA rules run as bare CL.THROTTLE commands, alone or next to bare
// TairHash sliding windows in one request (bare.go), on the key and with
// the count and period of the lua+redis-cell strategy ("x": <key>%x,
// cellArgs). Rules CL.THROTTLE cannot express exactly are refused (no
// other strategy is left to take them).
//
//  1. The snapshot pipeline reads each rule's TAT with GET, and the rule
//     is evaluated on it with internal/alg's GCRA (GCRAStep, GCRAReport:
//     redis-cell's own arithmetic, with the same emission interval and
//     tolerance) at the snapshot's TIME. It does not peek with
//     CL.THROTTLE k … 0: a value CL.THROTTLE did not write makes it abort
//     the server, and in one pipeline the peek would run before the value
//     could be checked; here it is checked first, and refused as take.lua
//     refuses it. A peek, an inspection or a denial never calls
//     CL.THROTTLE, so it consumes nothing and creates no key.
//  2. If every rule admits, the TairHash rules consume first (they can be
//     given back), then each CL.THROTTLE rule in turn, the enforced rules
//     with the least headroom in the snapshot first, shadow rules last
//     (throttleOrder): MULTI, CL.THROTTLE k burst count period c, GET k,
//     EXEC. CL.THROTTLE decides again, on its own clock.
//  3. When an enforced rule's CL.THROTTLE refuses (concurrent takers
//     since the snapshot, or a boundary between the snapshot's clock and
//     CL.THROTTLE's), the TairHash rules get their compensating decrement,
//     but the CL.THROTTLE rules already consumed keep their units: a
//     TAT cannot be given back without a script (reading and rewriting
//     it would erase concurrent consumptions, which over-admits). Such a
//     request is denied while some of its GCRA rules counted it: bare
//     mode under-admits there, never over-admits, and the Result says
//     NonAtomic, as every bare decision does.
//
// The cell key is checked only at the snapshot: without a script nothing
// keeps another client from writing a foreign value between the check and
// the CL.THROTTLE call.

// errCellRefused is why the TairHash rules are given back when an
// enforced CL.THROTTLE rule refuses at consumption.
var errCellRefused = errors.New("CL.THROTTLE refused")

// evalCell evaluates a CL.THROTTLE rule on the TAT GET read (cmd) at now
// (µs): the same flags, used, reset and retry as take.lua's "x" code, from
// internal/alg's GCRA.
func (br *bareRule) evalCell(cmd *goredis.Cmd, now, c int64) error {
	tat, err := cellTAT(br.r.Name, cmd)
	if err != nil {
		return err
	}
	at := time.UnixMicro(now)
	_, v := alg.GCRAStep(tat, *br.r, c, at)
	used, reset := alg.GCRAReport(tat, *br.r, at)
	flags, retry := replyFlags(v)
	br.res = []int64{flags, used, ceilMicros(reset), retry}
	return nil
}

// throttleAll consumes c from every admitting CL.THROTTLE rule in turn
// (throttleOrder). When an enforced rule refuses, the TairHash rules are
// given back and allowed is false; the CL.THROTTLE rules consumed before
// it stay consumed (see above).
func (b *Backend) throttleAll(ctx context.Context, rules []bareRule, now, c int64) (allowed bool, err error) {
	for _, k := range throttleOrder(rules) {
		br := &rules[k]
		limited, err := br.throttle(ctx, b.c, now, c)
		if err == nil && (!limited || br.r.Shadow) {
			continue // consumed, or a shadow rule reported denied
		}
		failed := err
		if failed == nil {
			failed = errCellRefused
		}
		if cerr := b.compensate(ctx, rules, br, c, failed); cerr != nil {
			return false, cerr
		}
		return false, err
	}
	return true, nil
}

// throttleOrder is the order in which the admitting CL.THROTTLE rules
// consume: enforced rules by their headroom in the snapshot (limit − used),
// least first, as the likeliest to refuse: a refusal then comes before
// other rules have consumed, and only a rule that had more headroom can
// leave units consumed; then shadow rules, whose refusal never denies, so
// they consume only once the request is admitted.
func throttleOrder(rules []bareRule) []int {
	var order []int
	for k := range rules {
		if rules[k].cell && rules[k].res[0] == 1 {
			order = append(order, k)
		}
	}
	headroom := func(k int) int64 { return rules[k].r.Burst + 1 - rules[k].res[1] }
	slices.SortStableFunc(order, func(a, b int) int {
		if sa, sb := rules[a].r.Shadow, rules[b].r.Shadow; sa != sb {
			if sa {
				return 1
			}
			return -1
		}
		return cmp.Compare(headroom(a), headroom(b))
	})
	return order
}

// throttle consumes c from br with CL.THROTTLE and reads the TAT after it,
// in one MULTI/EXEC: limited when CL.THROTTLE refused (nothing consumed).
// br.res becomes the rule's state: used from CL.THROTTLE's remaining (what
// it decided on, on its own clock), reset and retry from the TAT at now,
// rounded up (CL.THROTTLE's clock reads after now: never shorter than the
// truth).
func (br *bareRule) throttle(ctx context.Context, cl goredis.UniversalClient, now, c int64) (limited bool, err error) {
	var th, get *goredis.Cmd
	_, err = cl.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		th = p.Do(ctx, "cl.throttle", br.key, br.r.Burst, br.count, br.period, c)
		get = p.Do(ctx, "get", br.key)
		return nil
	})
	if err != nil && th.Err() == nil && get.Err() == nil {
		return false, fmt.Errorf("rule %q: CL.THROTTLE: %w", br.r.Name, err)
	}
	v, err := th.Int64Slice() // errors are read per command
	if err != nil {
		return false, fmt.Errorf("rule %q: CL.THROTTLE: %w", br.r.Name, err)
	}
	if len(v) != 5 {
		return false, fmt.Errorf("rule %q: CL.THROTTLE: want 5 integers, got %d", br.r.Name, len(v))
	}
	tat, err := cellTAT(br.r.Name, get)
	if err != nil {
		return false, err
	}
	limit := br.r.Burst + 1
	used := limit - min(max(v[2], 0), limit)
	at := time.UnixMicro(now)
	reset := ceilMicros(max(tat.Sub(at), 0))
	if v[0] == 0 {
		br.res = []int64{1, used, reset, 0}
		return false, nil
	}
	_, vd := alg.GCRAStep(tat, *br.r, c, at)
	br.res = []int64{0, used, reset, max(1, ceilMicros(vd.RetryAfter))}
	return true, nil
}

// cellTAT reads a CL.THROTTLE rule's key as GET returned it (cmd): its TAT
// (ns since the epoch; the zero time when there is no key), or take.lua's
// refusal (cell.lua, "read") of a value CL.THROTTLE did not write or of a
// key of another type, on which CL.THROTTLE would abort the server. The
// error names the rule, never the key (keys hold subject values).
func cellTAT(name string, cmd *goredis.Cmd) (time.Time, error) {
	v, err := cmd.Text()
	var bad string
	switch {
	case errors.Is(err, goredis.Nil):
		return time.Time{}, nil
	case err != nil && goredis.HasErrorPrefix(err, "WRONGTYPE"):
		bad = lua.CellWrongType
	case err != nil:
		return time.Time{}, fmt.Errorf("rule %q: GET: %w", name, err)
	default:
		ns, ok := parseTAT(v)
		if ok {
			return time.Unix(0, ns), nil
		}
		bad = lua.CellForeign
	}
	return time.Time{}, fmt.Errorf("freqcap: rule %s: %s %s%s", name, lua.CellKey, bad, lua.Untouched)
}

// parseTAT parses a TAT as take.lua's tatok accepts it (prelude.lua): 1 to
// 19 decimal digits, no sign, at most 2^63-1.
func parseTAT(v string) (int64, bool) {
	if len(v) < 1 || len(v) > 19 {
		return 0, false
	}
	for _, ch := range []byte(v) {
		if ch < '0' || ch > '9' {
			return 0, false
		}
	}
	ns, err := strconv.ParseInt(v, 10, 64)
	return ns, err == nil
}

// ceilMicros is d in µs, rounded up.
func ceilMicros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond > 0 {
		us++
	}
	return us
}
