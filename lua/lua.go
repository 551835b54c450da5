// Package lua holds the Lua that freqcap runs inside Redis, as source
// files an operator can read before running it: every script the redis
// backend runs (EVALSHA or EVAL) is built from these files (a fast
// script with its rules' numbers, names and tags written in), and none is
// read from disk at run time (they are embedded in the binary: FS).
// freqcap bench's own comparison scripts are apart, in
// internal/bench/scripts.
//
// What each file does:
//
//   - take.lua: the decision. One script call decides one or more
//     attempts (take, peek, reserve, inspect), each over all its rules,
//     all-or-nothing; it writes the rules' state, the denial trail and
//     the idempotency record. Its header gives its KEYS, ARGV and reply.
//   - fast.lua.tmpl: take.lua specialised to one policy's rules (the
//     "fast scripts"): Lua text with holes that the backend fills in with
//     the rules' constants; same decisions and writes as take.lua.
//   - settle.lua: commits or cancels one reservation.
//   - reset.lua: forgets a subject's state where its dimension sets nest.
//   - overrides.lua: sets, deletes and lists per-person overrides (not on
//     the decision path).
//   - people.lua: links identities to persons, unlinks them, stores a
//     person's zone, with the person's audit (not on the decision path).
//   - prelude.lua: helpers take.lua, the fast scripts, settle.lua and
//     reset.lua start with: the packed value's codec, wide roots (a
//     root's nested sets in a hash beside it), the trail writer.
//   - holds.lua: reservations (refunds, hold markers), built on demand.
//   - upgrade.lua: reads state kept in the layouts of older versions (one
//     key per rule; sorted-set logs; a sliding window's cells before it
//     was an exact log), read only.
//   - alg/*.lua: one fragment per algorithm, pasted into take.lua, the
//     fast scripts and holds.lua: fixed (fixed and calendar windows),
//     sliding (sliding window counters), gcra, log (exact sliding logs,
//     packed), zlog (larger sliding logs in a sorted set), and on Redis
//     modules modsliding (TairHash or native hash-field expiry) and cell
//     (redis-cell's CL.THROTTLE).
//
// The sources name the values they share with Go (ARGV positions, codes,
// formats, flags) with upper-case tokens (A_COST, OP_TAKE, HDR,
// TRAIL_SHADOW, …), declared once in Go and written in when a script is
// built. The builder (backends/redis/internal/lua) joins the files into
// scripts: prelude.lua, holds.lua and upgrade.lua first, then the frame
// (take.lua, settle.lua, reset.lua) with the algorithm fragments pasted
// where it names them.
package lua

import "embed"

// FS holds the sources: *.lua, alg/*.lua and fast.lua.tmpl.
//
//go:embed *.lua alg/*.lua fast.lua.tmpl
var FS embed.FS
