package capability

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/sdk/driver"
)

// NoEviction is the maxmemory-policy under which a server never evicts a
// key: at its memory limit it refuses writes (OOM) instead.
const NoEviction = "noeviction"

// Memory is what one node says of its memory: INFO memory's maxmemory,
// maxmemory_policy and used_memory, and INFO stats' evicted_keys. INFO is
// read rather than CONFIG GET, which managed services (ElastiCache,
// Alibaba Cloud, Tair) often disable.
//
// Every freqcap key has a TTL, so every policy but noeviction —
// volatile-lru, volatile-ttl and the other volatile-* policies included —
// evicts freqcap's counters first under memory pressure, and the people
// they counted are uncapped without trace. A server without a limit
// (maxmemory 0) never evicts: its writes grow until the host runs out of
// memory.
type Memory struct {
	// Addr is the node's address.
	Addr string `json:"addr"`
	// Refused is the node's refusal of INFO memory or INFO stats (an ACL,
	// a proxy): then nothing is known of its memory and the other fields
	// are zero.
	Refused string `json:"refused,omitempty"`
	// MaxMemory is the node's maxmemory in bytes (0: no limit).
	MaxMemory int64 `json:"maxmemory"`
	// Policy is its maxmemory_policy.
	Policy string `json:"maxmemory_policy"`
	// UsedMemory is its used_memory in bytes.
	UsedMemory int64 `json:"used_memory"`
	// EvictedKeys is its evicted_keys: keys evicted since it started.
	EvictedKeys int64 `json:"evicted_keys"`
}

// Known reports that the node answered INFO memory and INFO stats.
func (m Memory) Known() bool { return m.Refused == "" }

// Evicts reports that the node may evict keys under memory pressure: it
// has a limit and a policy other than noeviction.
func (m Memory) Evicts() bool { return m.Known() && m.MaxMemory > 0 && m.Policy != NoEviction }

// Safe reports that the node is known never to evict: no limit, or
// noeviction.
func (m Memory) Safe() bool { return m.Known() && !m.Evicts() }

// String renders the node's memory as `freqcap detect` prints it:
// "maxmemory 3.0 MiB, maxmemory-policy allkeys-lru, evicted_keys 42".
func (m Memory) String() string {
	if !m.Known() {
		return "memory unknown (" + m.Refused + ")"
	}
	limit := "0 (no limit)"
	if m.MaxMemory > 0 {
		limit = Bytes(m.MaxMemory)
	}
	return fmt.Sprintf("maxmemory %s, maxmemory-policy %s, evicted_keys %d", limit, m.Policy, m.EvictedKeys)
}

// Risk is the warning about the node's memory: "" where it never evicts,
// else one sentence saying what may happen and the fix.
func (m Memory) Risk() string {
	switch {
	case !m.Known():
		return fmt.Sprintf("%s refused INFO memory or INFO stats (%s): whether it evicts freqcap's keys under memory pressure is unknown; make sure its maxmemory-policy is %s", m.Addr, m.Refused, NoEviction)
	case m.Evicts():
		return fmt.Sprintf("%s may evict freqcap's keys: maxmemory %s with maxmemory-policy %s (every freqcap key has a TTL, so volatile-* policies evict them too); under memory pressure counters vanish and the people they counted are uncapped without trace (evicted_keys %d so far); run CONFIG SET maxmemory-policy %s there (and persist it in its configuration)",
			m.Addr, Bytes(m.MaxMemory), m.Policy, m.EvictedKeys, NoEviction)
	}
	return ""
}

// Driver converts m to the driver's account of a node's memory.
func (m Memory) Driver() driver.NodeMemory {
	return driver.NodeMemory{
		Node: m.Addr, Known: m.Known(), Unknown: m.Refused,
		MaxMemory: m.MaxMemory, Policy: m.Policy, UsedMemory: m.UsedMemory,
		EvictedKeys: m.EvictedKeys, Evicts: m.Evicts(),
	}
}

// Risks returns the warnings (Memory.Risk) of ms, in order.
func Risks(ms []Memory) []string {
	var out []string
	for _, m := range ms {
		if r := m.Risk(); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// Bytes renders n bytes for people: "3.0 MiB (3145728 B)".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for q := n / unit; q >= unit && exp < 4; q /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB (%d B)", float64(n)/float64(div), "KMGTP"[exp], n)
}

// memoryCommands are the commands that read a node's memory, in pipeline
// order.
var memoryCommands = [][]string{{"INFO", "memory"}, {"INFO", "stats"}}

// ProbeMemory reads the memory of every master of c (every shard of a
// Ring; the one server of a *goredis.Client), in one pipelined round trip
// each, sorted by address. A refused INFO is a finding (Memory.Refused);
// any other failure is an error.
func ProbeMemory(ctx context.Context, c goredis.UniversalClient) ([]Memory, error) {
	var (
		mu  sync.Mutex
		out []Memory
	)
	probe := func(ctx context.Context, nc *goredis.Client) error {
		addr := nc.Options().Addr
		pipe := nc.Pipeline()
		cmds := make([]*goredis.Cmd, len(memoryCommands))
		for i, args := range memoryCommands {
			cmds[i] = pipe.Do(ctx, args[0], args[1])
		}
		_, _ = pipe.Exec(ctx) // judged per command
		m, err := parseMemory(addr, cmds[0], cmds[1])
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		mu.Lock()
		out = append(out, m)
		mu.Unlock()
		return nil
	}
	var err error
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		err = cc.ForEachMaster(ctx, probe)
	case *goredis.Ring:
		err = cc.ForEachShard(ctx, probe)
	case *goredis.Client:
		err = probe(ctx, cc)
	default:
		return nil, fmt.Errorf("capability: memory: unsupported client %T", c)
	}
	if err != nil {
		return nil, fmt.Errorf("capability: memory: %w", err)
	}
	slices.SortFunc(out, func(a, b Memory) int { return strings.Compare(a.Addr, b.Addr) })
	return out, nil
}

// parseMemory reads a node's replies to INFO memory and INFO stats. Any
// error reply leaves the memory unknown (Refused); a failure without a
// reply (network, context) is returned.
func parseMemory(addr string, mem, stats *goredis.Cmd) (Memory, error) {
	m := Memory{Addr: addr}
	var texts [2]string
	for i, cmd := range []*goredis.Cmd{mem, stats} {
		err := cmd.Err()
		var rerr goredis.Error
		switch {
		case err == nil:
		case errors.As(err, &rerr):
			return Memory{Addr: addr, Refused: err.Error()}, nil
		default:
			return m, fmt.Errorf("%s: %w", strings.Join(memoryCommands[i], " "), err)
		}
		s, ok := cmd.Val().(string)
		if !ok {
			return m, fmt.Errorf("%s: unexpected reply %T", strings.Join(memoryCommands[i], " "), cmd.Val())
		}
		texts[i] = s
	}
	f := infoFields(texts[0] + "\n" + texts[1])
	var err error
	num := func(name string) int64 {
		v, ok := f[name]
		if !ok {
			if err == nil {
				err = fmt.Errorf("INFO: no %s field", name)
			}
			return 0
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("INFO: %s: %w", name, perr)
		}
		return n
	}
	m.MaxMemory, m.UsedMemory, m.EvictedKeys = num("maxmemory"), num("used_memory"), num("evicted_keys")
	m.Policy = f["maxmemory_policy"]
	if m.Policy == "" && err == nil {
		err = errors.New("INFO: no maxmemory_policy field")
	}
	if err != nil {
		return m, err
	}
	return m, nil
}

// infoFields reads "name:value" lines of an INFO reply.
func infoFields(s string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}
