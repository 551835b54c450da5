package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/sdk/driver/stats"
)

var _ stats.Counters = (*Backend)(nil)

// FlushStats applies a recorder's batch in one pipeline (on a Redis
// Cluster, the client's pipeline sends one per master, in parallel): per
// hash HINCRBY for each increment, one HSET for the values set and
// PEXPIREAT; per sorted set ZINCRBY for each member, ZREMRANGEBYRANK to
// keep the Keep highest and PEXPIREAT; per distinct-member counter one
// PFADD and PEXPIREAT; per list one RPUSH, LTRIM to keep the Keep newest
// and PEXPIREAT. The updates are marked not retryable, so a lost reply
// never counts twice (it may count nothing).
func (b *Backend) FlushStats(ctx context.Context, batch stats.Batch) error {
	if batch.Empty() {
		return nil
	}
	pipe := b.c.Pipeline()
	var cmds []noRetryCmd
	do := func(args ...any) {
		c := noRetryCmd{goredis.NewCmd(ctx, args...)}
		cmds = append(cmds, c)
		_ = pipe.Process(ctx, c)
	}
	for _, h := range batch.Hashes {
		for _, f := range h.Incr {
			do("hincrby", h.Key, f.Name, f.Value)
		}
		if len(h.Set) > 0 {
			args := make([]any, 0, 2+2*len(h.Set))
			args = append(args, "hset", h.Key)
			for _, f := range h.Set {
				args = append(args, f.Name, f.Value)
			}
			do(args...)
		}
		do("pexpireat", h.Key, h.ExpireAt.UnixMilli())
	}
	for _, t := range batch.Tops {
		for _, f := range t.Incr {
			do("zincrby", t.Key, f.Value, f.Name)
		}
		if t.Keep > 0 {
			do("zremrangebyrank", t.Key, 0, -(t.Keep + 1))
		}
		do("pexpireat", t.Key, t.ExpireAt.UnixMilli())
	}
	for _, u := range batch.Uniques {
		args := make([]any, 0, 2+len(u.Add))
		args = append(args, "pfadd", u.Key)
		for _, m := range u.Add {
			args = append(args, m)
		}
		do(args...)
		do("pexpireat", u.Key, u.ExpireAt.UnixMilli())
	}
	for _, l := range batch.Logs {
		if len(l.Append) > 0 {
			args := make([]any, 0, 2+len(l.Append))
			args = append(args, "rpush", l.Key)
			for _, e := range l.Append {
				args = append(args, e)
			}
			do(args...)
		}
		if l.Keep > 0 {
			do("ltrim", l.Key, -l.Keep, -1)
		}
		do("pexpireat", l.Key, l.ExpireAt.UnixMilli())
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var errs []error
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			errs = append(errs, err)
			reloadOnNoReply(ctx, b.c, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("redis: flush stats: %d of %d commands failed, the first: %w", len(errs), len(cmds), errs[0])
	}
	return nil
}

// ReadStats reads the hashes (HGETALL), the top members of the sorted
// sets (ZRANGE … REV WITHSCORES), the distinct-member counts (one PFCOUNT
// per group) and the lists (LRANGE 0 -1) of q in one pipeline (one per
// master on a cluster). A hash field whose value is not an integer is
// left out and listed in the answer's Malformed.
func (b *Backend) ReadStats(ctx context.Context, q stats.Query) (stats.Data, error) {
	out := stats.Data{Hashes: make([][]stats.Field, len(q.Hashes)), Tops: make([][]stats.Field, len(q.Tops)),
		Uniques: make([]int64, len(q.Uniques)), Logs: make([][]string, len(q.Logs))}
	if len(q.Hashes) == 0 && len(q.Tops) == 0 && len(q.Uniques) == 0 && len(q.Logs) == 0 {
		return out, nil
	}
	pipe := b.c.Pipeline()
	hs := make([]*goredis.MapStringStringCmd, len(q.Hashes))
	for i, k := range q.Hashes {
		hs[i] = pipe.HGetAll(ctx, k)
	}
	n := int64(q.TopN)
	if n <= 0 {
		n = 1 << 20
	}
	zs := make([]*goredis.ZSliceCmd, len(q.Tops))
	for i, k := range q.Tops {
		zs[i] = pipe.ZRevRangeWithScores(ctx, k, 0, n-1)
	}
	us := make([]*goredis.IntCmd, len(q.Uniques))
	for i, group := range q.Uniques {
		if len(group) > 0 {
			us[i] = pipe.PFCount(ctx, group...)
		}
	}
	ls := make([]*goredis.StringSliceCmd, len(q.Logs))
	for i, k := range q.Logs {
		ls[i] = pipe.LRange(ctx, k, 0, -1)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range us {
		if c == nil {
			continue
		}
		n, err := c.Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return stats.Data{}, fmt.Errorf("redis: read stats: %w", err)
		}
		out.Uniques[i] = n
	}
	for i, c := range ls {
		l, err := c.Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return stats.Data{}, fmt.Errorf("redis: read stats: %w", err)
		}
		if len(l) > 0 {
			out.Logs[i] = l
		}
	}
	for i, c := range hs {
		m, err := c.Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return stats.Data{}, fmt.Errorf("redis: read stats: %w", err)
		}
		for f, v := range m {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				out.Malformed = append(out.Malformed, stats.Malformed{Key: q.Hashes[i], Field: f})
				continue
			}
			out.Hashes[i] = append(out.Hashes[i], stats.Field{Name: f, Value: n})
		}
	}
	for i, c := range zs {
		zz, err := c.Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return stats.Data{}, fmt.Errorf("redis: read stats: %w", err)
		}
		for _, z := range zz {
			m, ok := z.Member.(string)
			if !ok {
				return stats.Data{}, fmt.Errorf("redis: read stats: member of %q is %T", q.Tops[i], z.Member)
			}
			out.Tops[i] = append(out.Tops[i], stats.Field{Name: m, Value: int64(z.Score)})
		}
	}
	return out, nil
}
