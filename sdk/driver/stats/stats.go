// Package stats is the contract of storage that keeps the fleet's
// decision statistics: optional interfaces a backend implements beside
// package driver's (package fleet's Recorder writes the statistics, its
// Reader reads them). It imports only the standard library, so that a
// backend implements it without importing sdk or fleet: storage does not
// depend on telemetry.
package stats

import (
	"context"
	"time"
)

// Counters is implemented by backends that keep the decision statistics
// a fleet.Recorder flushes, where every process using the same storage
// adds to them and any process reads them (optional: package fleet
// discovers it with a type assertion; the memory and Redis backends
// implement it).
//
// Package fleet builds every key and field; a backend stores plain counters:
// hashes of int64 fields, sorted sets of members by score, distinct-member
// counters (HyperLogLogs) and bounded lists of strings, each key expiring
// at the instant given. A batch may span hash tags (one pipeline per
// cluster node); the keys of one Query.Uniques group share one.
type Counters interface {
	// FlushStats applies every update of b. It need not be atomic: on an
	// error some updates may have been applied. An update must not be
	// applied twice (a Redis backend marks its commands not retryable).
	FlushStats(ctx context.Context, b Batch) error
	// ReadStats reads the keys q names; a missing or expired key reads as
	// empty.
	ReadStats(ctx context.Context, q Query) (Data, error)
}

// Batch is one flush: updates of hashes, sorted sets, distinct-member
// counters and lists.
type Batch struct {
	Hashes  []Hash
	Tops    []Top
	Uniques []Unique
	Logs    []Log
}

// Empty reports whether b updates nothing.
func (b Batch) Empty() bool {
	return len(b.Hashes) == 0 && len(b.Tops) == 0 && len(b.Uniques) == 0 && len(b.Logs) == 0
}

// Field is a hash field or sorted-set member and its value or score.
type Field struct {
	Name  string
	Value int64
}

// Hash updates one hash of counters: Incr adds to fields (Redis:
// HINCRBY), Set replaces them (HSET), and the key expires at ExpireAt
// (PEXPIREAT; each update sets it again).
type Hash struct {
	Key      string
	Incr     []Field
	Set      []Field
	ExpireAt time.Time
}

// Top updates one sorted set: Incr adds to members' scores (ZINCRBY),
// then only the Keep highest-scored members are kept (ZREMRANGEBYRANK;
// Keep 0 keeps all), and the key expires at ExpireAt.
type Top struct {
	Key      string
	Incr     []Field
	Keep     int
	ExpireAt time.Time
}

// Unique adds members to a distinct-member counter (Redis: PFADD on a
// HyperLogLog), and the key expires at ExpireAt. Counting a member twice
// counts it once.
type Unique struct {
	Key      string
	Add      []string
	ExpireAt time.Time
}

// Log appends entries to a list (RPUSH), then keeps only its Keep newest
// entries (LTRIM; Keep 0 keeps all), and the key expires at ExpireAt.
type Log struct {
	Key      string
	Append   []string
	Keep     int
	ExpireAt time.Time
}

// Query names what ReadStats reads: whole hashes, the TopN
// highest-scored members of sorted sets, the distinct members of groups
// of Unique keys (each group counted as the union of its keys: Redis
// PFCOUNT k1 k2 …; the keys of a group share a hash tag), and whole lists.
type Query struct {
	Hashes  []string
	Tops    []string
	TopN    int
	Uniques [][]string
	Logs    []string
}

// Data answers a Query: one entry per key asked, in the same
// order (nil for a missing key). Hash fields come in any order; sorted-set
// members highest score first. A hash field whose value is not an
// integer (something other than package fleet wrote it) is left out of Hashes
// and listed in Malformed, so that one bad field spoils nothing else.
//
// Uniques holds one count per group asked: the distinct members added to
// its keys (an estimate: Redis's HyperLogLog has a standard error of
// 0.81%, and counts small sets nearly exactly; the memory backend counts
// exactly up to 4096 members). Logs holds each list's entries, oldest
// first (nil for a missing key).
type Data struct {
	Hashes    [][]Field
	Tops      [][]Field
	Uniques   []int64
	Logs      [][]string
	Malformed []Malformed
}

// Malformed is a hash field ReadStats left out: its value is not an
// integer.
type Malformed struct {
	Key, Field string
}
