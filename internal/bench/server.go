package bench

import (
	goredis "github.com/redis/go-redis/v9"

	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// roundTrips counts the requests the client sends to servers: each
// command sent alone and each pipeline (one per server it reaches), but
// not connection set-up or the bench's own INFO calls.
type roundTrips struct{ n atomic.Int64 }

func countRoundTrips(c goredis.UniversalClient) *roundTrips {
	rt := &roundTrips{}
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		// Node clients see what reaches each server: a cluster pipeline
		// is one pipeline per node.
		cc.OnNewNode(func(n *goredis.Client) { n.AddHook(rt) })
	case *goredis.Client:
		cc.AddHook(rt)
	}
	return rt
}

func (rt *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (rt *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() != "info" {
			rt.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (rt *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() != "hello" && cmds[0].Name() != "client" {
			rt.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// commandStats sums the calls of each command over every master (INFO
// commandstats). Commands called by scripts are counted too.
type cmdStat struct{ calls, usec int64 }

func commandStats(ctx context.Context, c goredis.UniversalClient) (map[string]cmdStat, error) {
	out := map[string]cmdStat{}
	var mu sync.Mutex
	collect := func(ctx context.Context, n *goredis.Client) error {
		s, err := n.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, l := range strings.Split(s, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_")
			if !ok {
				continue
			}
			name, fields, ok := strings.Cut(rest, ":")
			if !ok {
				continue
			}
			st := out[name]
			for _, f := range strings.Split(fields, ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					st.calls += n
				case "usec":
					st.usec += n
				}
			}
			out[name] = st
		}
		return nil
	}
	if err := forEachMaster(ctx, c, collect); err != nil {
		return nil, fmt.Errorf("bench: INFO commandstats: %w", err)
	}
	return out, nil
}

func forEachMaster(ctx context.Context, c goredis.UniversalClient, f func(context.Context, *goredis.Client) error) error {
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		return cc.ForEachMaster(ctx, f)
	case *goredis.Client:
		return f(ctx, cc)
	}
	return fmt.Errorf("unsupported client %T", c)
}

// serverCPU sums used_cpu_sys and used_cpu_user (seconds: the server
// process's CPU time, every thread) over every master (INFO cpu), and
// returns that sum and its used_cpu_sys part (the kernel's: a round trip
// costs the server a read and a write there, whatever the script does).
func serverCPU(ctx context.Context, c goredis.UniversalClient) (total, sys float64, err error) {
	var mu sync.Mutex
	err = forEachMaster(ctx, c, func(ctx context.Context, n *goredis.Client) error {
		s, err := n.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(s, "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(l), ":")
			if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return err
			}
			mu.Lock()
			total += f
			if name == "used_cpu_sys" {
				sys += f
			}
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("bench: INFO cpu: %w", err)
	}
	return total, sys, nil
}

func usedMemory(ctx context.Context, c goredis.UniversalClient) (int64, error) {
	used, _, err := memoryInfo(ctx, c)
	return used, err
}

// settledMemory is usedMemory once no master has objects left to free in
// the background (lazyfree_pending_objects 0: the UNLINKs of an earlier
// run's cleanup done), polled for at most a minute.
func settledMemory(ctx context.Context, c goredis.UniversalClient) (int64, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		used, pending, err := memoryInfo(ctx, c)
		if err != nil || pending == 0 {
			return used, err
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("bench: %d objects still pending lazy free after a minute", pending)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// memoryInfo sums used_memory and lazyfree_pending_objects over the
// masters.
func memoryInfo(ctx context.Context, c goredis.UniversalClient) (used, pending int64, err error) {
	var tu, tp atomic.Int64
	err = forEachMaster(ctx, c, func(ctx context.Context, n *goredis.Client) error {
		s, err := n.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(s, "\n") {
			for name, total := range map[string]*atomic.Int64{"used_memory:": &tu, "lazyfree_pending_objects:": &tp} {
				if v, ok := strings.CutPrefix(strings.TrimSpace(l), name); ok {
					m, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						return err
					}
					total.Add(m)
				}
			}
		}
		return nil
	})
	return tu.Load(), tp.Load(), err
}

// deleteKeys deletes every key matching one of patterns on every master
// (SCAN MATCH, COUNT 1000, then UNLINK of each batch) and returns how many
// it deleted.
func deleteKeys(ctx context.Context, c goredis.UniversalClient, patterns []string) (int64, error) {
	var total atomic.Int64
	err := forEachMaster(ctx, c, func(ctx context.Context, n *goredis.Client) error {
		for _, pat := range patterns {
			var cursor uint64
			for {
				keys, next, err := n.Scan(ctx, cursor, pat, 1000).Result()
				if err != nil {
					return err
				}
				if len(keys) > 0 {
					d, err := n.Unlink(ctx, keys...).Result()
					if err != nil {
						return err
					}
					total.Add(d)
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("bench: deleting the runs' keys: %w", err)
	}
	return total.Load(), err
}

// globQuote escapes the glob characters of SCAN MATCH in s.
func globQuote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
