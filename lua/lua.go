// Package lua embeds the Redis scripts of the redis backend (the
// benchmark's own scripts are in internal/bench/scripts).
//
// Each exported string is a complete script, ready for EVAL/EVALSHA; the
// header comment of each *.lua file gives its KEYS, ARGV and reply.
// Scripts are never read from disk at run time.
package lua

import _ "embed"

//go:embed refund.lua
var refund string

//go:embed take.lua
var take string

//go:embed settle.lua
var settle string

// Take decides one request over all its rules (take, peek, reserve,
// inspect): see take.lua. It starts with the shared refund.lua prelude.
var Take = refund + "\n" + take

// Settle commits or cancels one reservation ("hold" in the Lua sources):
// see settle.lua. It starts with the shared refund.lua prelude.
var Settle = refund + "\n" + settle
