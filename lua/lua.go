// Package lua embeds the Redis scripts of the redis backend (the
// benchmark's own scripts are in internal/bench/scripts).
//
// The sources are split by concern and joined here, at build time, into
// complete scripts ready for EVAL/EVALSHA, so a decision stays one
// EVALSHA of one script:
//
//   - prelude.lua: the packed value's codec and small helpers;
//   - alg/*.lua: one fragment per algorithm, each with its evaluate,
//     commit and refund functions (fixed, sliding, gcra, log on plain
//     data types; modsliding and cell on module commands);
//   - holds.lua: reservations: refunds and the hold markers;
//   - take.lua, settle.lua: the frames, whose header comments give their
//     KEYS, ARGV and reply.
//
// Scripts are never read from disk at run time.
package lua

import (
	_ "embed"
	"strings"
)

var (
	//go:embed prelude.lua
	prelude string
	//go:embed alg/fixed.lua
	fixed string
	//go:embed alg/sliding.lua
	sliding string
	//go:embed alg/gcra.lua
	gcra string
	//go:embed alg/log.lua
	log string
	//go:embed alg/modsliding.lua
	modsliding string
	//go:embed alg/cell.lua
	cell string
	//go:embed holds.lua
	holds string
	//go:embed take.lua
	take string
	//go:embed settle.lua
	settle string
)

// library is what both frames start with, in dependency order.
var library = strings.Join([]string{prelude, fixed, sliding, gcra, log, modsliding, cell, holds}, "\n")

// Take decides one or more requests, each over all its rules (take, peek,
// reserve, inspect): see take.lua.
var Take = library + "\n" + take

// Settle commits or cancels one reservation ("hold" in the Lua sources):
// see settle.lua.
var Settle = library + "\n" + settle
