package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

// A GCRA rule's key holding anything but a TAT is refused with a
// "freqcap:" error before anything is written and, for the redis-cell
// strategy, before any CL.THROTTLE call: CL.THROTTLE aborts the whole
// server on such a key (docs/PROTOCOL: a Rust panic on "", "abc", "-5",
// 20 digits, a hash, a list).

// foreignState is a value of a GCRA key that no GCRA strategy wrote.
type foreignState struct {
	name string
	set  func(ctx context.Context, c goredis.UniversalClient, key string) error
}

// put writes fs to key and deletes the key when t ends (module servers
// are shared: a foreign key must not outlive its test).
func (fs foreignState) put(t *testing.T, c goredis.UniversalClient, key string) {
	t.Helper()
	t.Cleanup(func() { c.Del(context.Background(), key) })
	if err := fs.set(context.Background(), c, key); err != nil {
		t.Fatalf("writing %s: %v", fs.name, err)
	}
}

func foreignString(v string) foreignState {
	return foreignState{"string " + quoteForName(v), func(ctx context.Context, c goredis.UniversalClient, key string) error {
		return c.Set(ctx, key, v, time.Hour).Err()
	}}
}

func quoteForName(v string) string { return "'" + v + "'" }

// foreignStates: what CL.THROTTLE aborts on (not an unsigned 64-bit
// integer string), what it would read but never writes ("+5", leading
// zeros, beyond 2^63-1 ns), and keys of other types (GET is WRONGTYPE).
var foreignStates = []foreignState{
	foreignString("abc"),
	foreignString(""),
	foreignString("-5"),
	foreignString("+5"),
	foreignString(" 5"),
	foreignString("5.0"),
	foreignString("1e3"),
	foreignString("99999999999999999999"),  // 20 digits, beyond u64
	foreignString("18446744073709551615"),  // u64 max, 20 digits
	foreignString("00000000000000000001"),  // 20 digits
	foreignString("9223372036854775808"),   // 2^63
	foreignString("1795215617870091344\n"), // a TAT and a newline
	{"hash", func(ctx context.Context, c goredis.UniversalClient, key string) error {
		return c.HSet(ctx, key, "f", "1").Err()
	}},
	{"list", func(ctx context.Context, c goredis.UniversalClient, key string) error {
		return c.RPush(ctx, key, "1795215617870091344").Err()
	}},
	{"zset", func(ctx context.Context, c goredis.UniversalClient, key string) error {
		return c.ZAdd(ctx, key, goredis.Z{Score: 1, Member: "1"}).Err()
	}},
}

// dumpKey returns what key holds, to check that a refusal wrote nothing.
func dumpKey(t *testing.T, c goredis.UniversalClient, key string) string {
	t.Helper()
	v, err := c.Dump(context.Background(), key).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		t.Fatalf("DUMP: %v", err)
	}
	return v
}

// gcraOps are the requests every GCRA path serves: each must refuse.
func gcraOps(s subject, r driver.Rule) map[string]request {
	reserve := s.request(opReserve, 1, r)
	reserve.ReservationID, reserve.ReservationTTL = "h", time.Hour
	idem := s.request(opTake, 1, r)
	idem.IdempotencyKey, idem.IdempotencyTTL = s.base+"!i:k", time.Minute
	return map[string]request{
		"take":    s.request(opTake, 1, r),
		"peek":    s.request(opPeek, 1, r),
		"inspect": s.request(opInspect, 0, r),
		"reserve": reserve,
		"idem":    idem,
	}
}

// checkForeignErr fails unless err is take.lua's refusal for redis-cell
// rule name ("x": the rule's own GCRA state key), free of the subject's
// value.
func checkForeignErr(t *testing.T, what string, err error, s subject, name string) {
	t.Helper()
	checkRefusal(t, what, err, s, "freqcap: rule "+name+": the GCRA state key")
}

// checkPackedForeignErr fails unless err is take.lua's refusal for packed
// rule name (its dimension set's packed value is foreign), free of the
// subject's value.
func checkPackedForeignErr(t *testing.T, what string, err error, s subject, name string) {
	t.Helper()
	checkRefusal(t, what, err, s, "freqcap: rule "+name+": its state key holds a value freqcap did not write; not evaluated, nothing written")
}

func checkRefusal(t *testing.T, what string, err error, s subject, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: error = %v, want take.lua's refusal %q", what, err, want)
		return
	}
	if tag := driver.HashTag(s.base); strings.Contains(err.Error(), tag) {
		t.Errorf("%s: error %q leaks the subject value %q", what, err, tag)
	}
}

// cellReport is a report choosing redis-cell for GCRA, whatever the
// server has: take.lua then runs its "x" code, which on a plain server
// fails at the first CL.THROTTLE call.
func cellReport() *capability.Report {
	return &capability.Report{
		Scripting: capability.Count{Have: 1, Of: 1},
		Choices:   []capability.Choice{{Algorithm: driver.GCRA, Strategy: capability.CellLua, Reason: "test"}},
	}
}

// runAs runs req through the real take.lua as the backend would under
// rep.
func runAs(t *testing.T, b *Backend, rep *capability.Report, req request) error {
	t.Helper()
	c, err := b.encode(req.op, req.Request, time.Now(), rep)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	_, err = b.run(context.Background(), takeScript, lua.Take, false, c.keys, c.args)
	return err
}

// isUnknownCommand reports whether err is a script's call of a command the
// server does not have (Redis 7.0/7.4 and Valkey 8 word it differently).
func isUnknownCommand(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown") && strings.Contains(strings.ToLower(err.Error()), "command")
}

// TestCellForeignStateRefusedBeforeThrottle runs take.lua's redis-cell
// code ("x") on a plain server, where the first CL.THROTTLE call fails:
// a foreign value is refused with the freqcap error, so the check runs
// before any CL.THROTTLE call; a TAT (or no key) passes the check and
// reaches CL.THROTTLE. Nothing is written either way.
func TestCellForeignStateRefusedBeforeThrottle(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	rep := cellReport()
	for _, fs := range foreignStates {
		t.Run(fs.name, func(t *testing.T) {
			s := newSubject(t, "cellforeign")
			r := s.gcra("g", 10, time.Minute, 4)
			key := r.Key + suffixCell
			fs.put(t, c, key)
			before := dumpKey(t, c, key)
			for op, req := range gcraOps(s, r) {
				err := runAs(t, b, rep, req)
				checkForeignErr(t, op, err, s, "g")
				if isUnknownCommand(err) {
					t.Errorf("%s: reached CL.THROTTLE with a foreign value: %v", op, err)
				}
			}
			if after := dumpKey(t, c, key); after != before {
				t.Errorf("the key changed on a refusal")
			}
			if n, _ := c.Exists(ctx, s.reservations(), s.trail(), s.base+"!i:k").Result(); n != 0 {
				t.Errorf("%d of the reservations, trail and idempotency keys written on a refusal", n)
			}
		})
	}
	for _, v := range []string{"", "5", "1795215617870091344", "9223372036854775807"} {
		name := "TAT " + v
		if v == "" {
			name = "no key"
		}
		t.Run(name, func(t *testing.T) {
			s := newSubject(t, "cellok")
			r := s.gcra("g", 10, time.Minute, 4)
			if v != "" {
				if err := c.Set(ctx, r.Key+suffixCell, v, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for op, req := range gcraOps(s, r) {
				if err := runAs(t, b, rep, req); !isUnknownCommand(err) {
					t.Errorf("%s: error = %v, want the missing CL.THROTTLE (the check passed)", op, err)
				}
			}
		})
	}
}

// TestGCRAForeignState: plain Lua GCRA ("g"), a packed entry, refuses a
// packed key (here the rule's own key: no Group) holding anything but a
// packed value with the freqcap error, for every op, and writes nothing:
// the values redis-cell must not meet, a TAT as the one-key-per-rule
// layout wrote it, and packed values that are truncated or of another
// format.
func TestGCRAForeignState(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	good := encodePacked([]packedEntry{{Tag: "AbCd", Expiry: 1 << 46, Ints: []int64{5}}})
	states := append([]foreignState{
		foreignString("9007199254740993"),    // beyond 2^53 µs
		foreignString("1795215617870091344"), // a TAT
		foreignString(good[:len(good)-1]),    // truncated payload
		foreignString(good[:5]),              // truncated header
		foreignString("\x02" + good[1:]),     // another format
	}, foreignStates...)
	for _, fs := range states {
		t.Run(fs.name, func(t *testing.T) {
			s := newSubject(t, "gforeign")
			r := s.gcra("g", 10, time.Minute, 4)
			fs.put(t, c, r.Key)
			before := dumpKey(t, c, r.Key)
			for op, req := range gcraOps(s, r) {
				_, err := b.do(ctx, req)
				checkPackedForeignErr(t, op, err, s, "g")
			}
			if after := dumpKey(t, c, r.Key); after != before {
				t.Errorf("the key changed on a refusal")
			}
			if n, _ := c.Exists(ctx, s.reservations(), s.trail(), s.base+"!i:k").Result(); n != 0 {
				t.Errorf("%d of the reservations, trail and idempotency keys written on a refusal", n)
			}
		})
	}
}

// TestGCRARefundLeavesForeignState: a refund (cancel, lapse) of a GCRA
// reservation whose key now holds a foreign value leaves that value alone and
// settles the reservation; a TAT of the same reservation is refunded.
func TestGCRARefundLeavesForeignState(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "refundforeign")
	good := s.gcra("ok", 10, time.Minute, 4)
	req := s.request(opReserve, 2, good)
	req.ReservationID, req.ReservationTTL = "h", time.Hour
	if res := take(t, b, req); !res.Allowed {
		t.Fatalf("reserve = %+v, want allowed", res)
	}
	plan, err := c.HGet(ctx, s.reservations(), "h").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Entries for foreign keys, as a reservation made before the key was
	// overwritten would have left: packed GCRA entries ("G <key> <tag>
	// <µs>"), the one-key-per-rule layout's ("g <key> <µs>") and
	// redis-cell's ("x <key> <ns>").
	keys := map[string]string{"G str": s.key("Gs"), "G hash": s.key("Gh"), "g str": s.key("gs"), "g hash": s.key("gh"),
		"x str": s.key("xs") + suffixCell, "x hash": s.key("xh") + suffixCell}
	for what, k := range keys {
		if strings.HasSuffix(what, "hash") {
			c.HSet(ctx, k, "f", "1")
		} else {
			c.Set(ctx, k, "abcdefghijklmnopqrstu", time.Hour)
		}
		if what[0] == 'G' {
			plan += "\nG " + k + " " + ruleTag(&good) + " 6000000"
		} else {
			plan += "\n" + what[:1] + " " + k + " 6000000"
		}
	}
	if err := c.HSet(ctx, s.reservations(), "h", plan).Err(); err != nil {
		t.Fatal(err)
	}
	dumps := map[string]string{}
	for _, k := range keys {
		dumps[k] = dumpKey(t, c, k)
	}
	if err := b.Cancel(ctx, s.reservations(), "h"); err != nil {
		t.Fatalf("cancel = %v, want nil", err)
	}
	for what, k := range keys {
		if dumpKey(t, c, k) != dumps[k] {
			t.Errorf("%s: the foreign key changed on a refund", what)
		}
	}
	res := take(t, b, s.request(opPeek, 1, good))
	checkRule(t, "peek after cancel", res.Rules[0], true, 0, 5)
}
