// Package scripts embeds the Lua scripts that only the benchmark runs:
// the references decisions are compared against. The backend's own
// scripts are in package lua.
package scripts

import _ "embed"

// Baseline is the trivial INCRBY+PEXPIRE step the benchmark compares
// decisions against: see baseline.lua.
//
//go:embed baseline.lua
var Baseline string

// Floor is the cheapest conceivable step of a 4-rule policy, with no
// arithmetic, that `freqcap bench -floor` measures: see floor.lua.
//
//go:embed floor.lua
var Floor string

// Raw is raw(R): one counter per rule, INCRBY on each and PEXPIRE on a
// counter's first hit, deciding nothing: see raw.lua.
//
//go:embed raw.lua
var Raw string

// PackedFloor is the floor of the packed layout: R fixed-window counters
// in one packed value per subject, decided all-or-nothing with nothing
// else, that `freqcap bench -raw -floor` runs beside raw(R): see
// packedfloor.lua.
//
//go:embed packedfloor.lua
var PackedFloor string

// LogFloor is the floor of the sliding-log layout: R sliding logs in one
// sorted set per subject, decided all-or-nothing with nothing else, that
// `freqcap bench -raw -floor` runs beside raw(R) for a policy of sliding
// logs: see logfloor.lua.
//
//go:embed logfloor.lua
var LogFloor string

// WideFloor is the floor of a decision on a wide root: per attempt of a
// call, GET of the root, HGET, HSET of its value's field and SET of the
// root, deciding nothing, that `freqcap bench -prefill K -raw -wide-floor`
// runs beside raw(R): see widefloor.lua.
//
//go:embed widefloor.lua
var WideFloor string
