package driver

import (
	"context"
	"time"
)

// StatsStore is implemented by backends that keep the decision statistics
// an sdk.Recorder flushes, where every process using the same storage adds
// to them and any process reads them (optional; sdk discovers it with a
// type assertion).
//
// The sdk builds every key and field; a backend stores plain counters:
// hashes of int64 fields and sorted sets of members by score, each key
// expiring at the instant given. Keys of one StatsHash or StatsTop never
// span hash tags; a batch may (one pipeline per cluster node).
type StatsStore interface {
	// FlushStats applies every update of b. It need not be atomic: on an
	// error some updates may have been applied. An update must not be
	// applied twice (a Redis backend marks its commands not retryable).
	FlushStats(ctx context.Context, b StatsBatch) error
	// ReadStats reads the keys q names; a missing or expired key reads as
	// empty.
	ReadStats(ctx context.Context, q StatsQuery) (StatsData, error)
}

// StatsBatch is one flush: updates of hashes and of sorted sets.
type StatsBatch struct {
	Hashes []StatsHash
	Tops   []StatsTop
}

// StatsField is a hash field or sorted-set member and its value or score.
type StatsField struct {
	Name  string
	Value int64
}

// StatsHash updates one hash of counters: Incr adds to fields (Redis:
// HINCRBY), Set replaces them (HSET), and the key expires at ExpireAt
// (PEXPIREAT; each update sets it again).
type StatsHash struct {
	Key      string
	Incr     []StatsField
	Set      []StatsField
	ExpireAt time.Time
}

// StatsTop updates one sorted set: Incr adds to members' scores (ZINCRBY),
// then only the Keep highest-scored members are kept (ZREMRANGEBYRANK;
// Keep 0 keeps all), and the key expires at ExpireAt.
type StatsTop struct {
	Key      string
	Incr     []StatsField
	Keep     int
	ExpireAt time.Time
}

// StatsQuery names what ReadStats reads: whole hashes, and the TopN
// highest-scored members of sorted sets.
type StatsQuery struct {
	Hashes []string
	Tops   []string
	TopN   int
}

// StatsData answers a StatsQuery: one entry per key asked, in the same
// order (nil for a missing key). Hash fields come in any order; sorted-set
// members highest score first. A hash field whose value is not an
// integer (something other than the sdk wrote it) is left out of Hashes
// and listed in Malformed, so that one bad field spoils nothing else.
type StatsData struct {
	Hashes    [][]StatsField
	Tops      [][]StatsField
	Malformed []StatsMalformed
}

// StatsMalformed is a hash field ReadStats left out: its value is not an
// integer.
type StatsMalformed struct {
	Key, Field string
}
