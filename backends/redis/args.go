package redis

import (
	"fmt"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
)

// The arguments the backend passes its scripts, and the shape of their
// replies: declared once in internal/lua/tokens.go (ARGV positions, op
// codes, algorithm codes, the reply's record per rule), whose constants
// the Lua sources name as tokens written in when the scripts are built;
// the encoder (encode.go), the reply parser (reply.go) and bare mode
// (bare.go) use the same constants, through the names below.

// EVALSHA's argument list: evalArgs placeholders (command, script, key
// count), the keys, then ARGV: ARGV[1] the number of attempts, then per
// attempt headerArgs values and argsPerRule per rule (take.lua's header
// comment gives each offset).
const (
	evalArgs    = 3
	headerArgs  = lua.HeaderArgs
	argsPerRule = lua.RuleArgs
	// staticArgs is the part of a rule's ARGV that depends neither on the
	// request nor on the clock (all but the two key indices): cached per
	// rule.
	staticArgs = argsPerRule - 2
	// perRuleReply is the numbers per rule in a reply: flags, used,
	// reset-after µs, retry-after µs; perRuleBytes their bytes in the
	// reply's string (struct '<Bi7i7i7').
	perRuleReply = lua.ReplyPerRule
	perRuleBytes = lua.ReplyRuleSize
)

// A fast script's ARGV is each attempt's head (lua.FastHead: its op,
// cost, trail and reservations, nested sets' ids, quiet spans, policy
// and trail values; attemptHead builds it) and its calendar rules'
// boundaries, after the number of attempts in the full form (a batch or
// coalesced group: encoder.addFast) and alone in the short form (a lone
// attempt: fastAttempt.args).
//
// A fast script replies per attempt one string (parseTake): fastHead
// bytes, struct '<Bi7' (1 allowed or 0, now µs), then perRuleBytes per
// rule, then, denied for quiet hours, the quiet span's end µs (struct
// '<i7'); m > 1 attempts get a table of them.
const fastHead = 1 + lua.ReplyInt

// Op codes: take.lua's (and fast scripts') ARGV[a+1].
const (
	opCodeTake    = lua.OpTake
	opCodePeek    = lua.OpPeek
	opCodeReserve = lua.OpReserve
	opCodeInspect = lua.OpInspect
)

// opCode maps an op to its code, boxed for the argument list (a constant
// boxes without allocating).
func opCode(o op) (any, error) {
	switch o {
	case opTake:
		return opCodeTake, nil
	case opPeek:
		return opCodePeek, nil
	case opReserve:
		return opCodeReserve, nil
	case opInspect:
		return opCodeInspect, nil
	}
	return nil, fmt.Errorf("unknown op %d", o)
}

// Algorithm codes: a rule's first ARGV value. Packed codes keep their
// state as one entry of the dimension set's packed value (lua/prelude.lua),
// the log code in the dimension set's sorted set, the module codes in a
// key of the rule's own.
const (
	codeFixed    = lua.CodeFixed    // fixed window, epoch-aligned: p1 = window µs
	codeCalendar = lua.CodeCalendar // calendar window: p1 = consecutive boundaries, ms, comma-separated
	codeSliding  = lua.CodeSliding  // sliding window counters: p1 = K, p2 = cell µs (driver.CellSpan)
	codeGCRA     = lua.CodeGCRA     // GCRA: limit = burst+1, p1 = T µs, p2 = tolerance µs
	codeLog      = lua.CodeLog      // packed sliding log (limit <= driver.LogLine): p1 = window µs, p2 = the set's sorted-set log, or a sliding window's cells (carryCells) (Upgrade)
	codeZLog     = lua.CodeZLog     // sliding log in a sorted set (larger limits): p1 = window µs
	codeTairHash = lua.CodeTairHash // sliding window on TairHash fields: as codeSliding
	codeHFE      = lua.CodeHFE      // sliding window on native hash-field expiry: as codeSliding
	codeCell     = lua.CodeCell     // GCRA on redis-cell: p1 = T µs, p2 = "<count>:<period s>"
)

// packedCode reports whether code keeps its state in the packed value.
func packedCode(code string) bool {
	switch code {
	case codeFixed, codeCalendar, codeSliding, codeGCRA, codeLog:
		return true
	}
	return false
}
