package capability

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// probeScript is the scripting probe; probeSHA is its SHA1, for EVALSHA.
const (
	probeScript = "return 1"
	probeSHA    = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
)

// probeCommands returns the commands sent to one node, in pipeline order:
// COMMAND INFO, EVAL, EVALSHA, MODULE LIST, INFO modules, INFO
// replication, then memoryCommands (INFO memory, INFO stats). key is the key the scripting probe names ("" for none:
// cluster masters).
func probeCommands(key string) [][]string {
	info := append([]string{"COMMAND", "INFO"}, probedCommands...)
	keys := []string{"0"}
	if key != "" {
		keys = []string{"1", key}
	}
	return append([][]string{
		info,
		append([]string{"EVAL", probeScript}, keys...),
		append([]string{"EVALSHA", probeSHA}, keys...),
		{"MODULE", "LIST"},
		{"INFO", "modules"},
		{"INFO", "replication"},
	}, memoryCommands...)
}

// Probe asks every master of c what it can do — one pipelined round trip
// per master — and chooses strategies with cfg (see Choose). It also asks
// each node whether it is a replica (INFO replication): a client pointed
// at a replica gets a report saying so, with no strategy (Report.Writable).
// And it reads each node's memory (INFO memory, INFO stats: Node.Memory):
// a node that may evict freqcap's keys is a warning (Report.Warnings).
//
// c may be a *redis.Client (a server, a proxy, or a failover client), a
// *redis.ClusterClient (every master is probed) or a *redis.Ring (every
// shard). A refused probe (unknown or renamed command, ACL, proxy
// restriction) is a finding; any other failure — network, LOADING, an
// unexpected reply — is an error, and no report is made.
func Probe(ctx context.Context, c goredis.UniversalClient, cfg Config) (*Report, error) {
	var (
		mu    sync.Mutex
		nodes []Node
	)
	probe := func(ctx context.Context, nc *goredis.Client, key string) error {
		addr := nc.Options().Addr
		n, err := probeNode(ctx, nc, addr, key)
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	}
	cluster := false
	var err error
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		cluster = true
		err = cc.ForEachMaster(ctx, func(ctx context.Context, nc *goredis.Client) error {
			return probe(ctx, nc, "")
		})
	case *goredis.Ring:
		err = cc.ForEachShard(ctx, func(ctx context.Context, nc *goredis.Client) error {
			return probe(ctx, nc, cfg.probeKey())
		})
	case *goredis.Client:
		err = probe(ctx, cc, cfg.probeKey())
	default:
		return nil, fmt.Errorf("capability: probe: unsupported client %T", c)
	}
	if err != nil {
		return nil, fmt.Errorf("capability: probe: %w", err)
	}
	r := Choose(nodes, cfg)
	r.Cluster = cluster
	return &r, nil
}

// probeNode sends the probe pipeline to one node and reads its replies.
func probeNode(ctx context.Context, nc *goredis.Client, addr, key string) (Node, error) {
	cmds := probeCommands(key)
	pipe := nc.Pipeline()
	res := make([]*goredis.Cmd, len(cmds))
	for i, args := range cmds {
		a := make([]any, len(args))
		for j, s := range args {
			a[j] = s
		}
		res[i] = pipe.Do(ctx, a...)
	}
	// Errors are judged per command below; Exec's error is the first of
	// them, unless the connection failed before any command ran (dial,
	// AUTH with a wrong password, HELLO): then no command has an error,
	// and that failure is the answer.
	if _, err := pipe.Exec(ctx); err != nil {
		ran := false
		for _, c := range res {
			ran = ran || c.Err() != nil || c.Val() != nil
		}
		if !ran {
			return Node{}, fmt.Errorf("connecting: %w", err)
		}
	}
	n, err := parseNode(addr, res[0], res[1], res[2], res[3], res[4], res[5])
	if err != nil {
		return n, err
	}
	n.Memory, err = parseMemory(addr, res[6], res[7])
	return n, err
}

// reply is a command's value, or the server's refusal of it. Any other
// error is returned.
func reply(cmd *goredis.Cmd) (val any, refused string, err error) {
	err = cmd.Err()
	switch {
	case err == nil:
		return cmd.Val(), "", nil
	case errors.Is(err, goredis.Nil):
		return nil, "", nil
	case isRefusal(err):
		return nil, err.Error(), nil
	case strings.HasPrefix(err.Error(), "MOVED "):
		return nil, "", fmt.Errorf("%s: the server is in cluster mode: probe it with a cluster client: %w", strings.ToUpper(fmt.Sprint(cmd.Args()[0])), err)
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return nil, "", err // network or context: not about this command
	}
	return nil, "", fmt.Errorf("%s: %w", strings.ToUpper(fmt.Sprint(cmd.Args()[0])), err)
}

func parseNode(addr string, info, eval, evalsha, modList, infoMods, infoRepl *goredis.Cmd) (Node, error) {
	n := Node{Addr: addr}

	v, refused, err := reply(info)
	if err != nil {
		return n, err
	}
	if refused != "" {
		n.CommandInfoRefused = refused
	} else if n.Commands, err = parseCommandInfo(v, probedCommands); err != nil {
		return n, err
	}

	if isKeyDenied(eval.Err()) {
		return n, fmt.Errorf("EVAL: the ACL user may not access the probe key (set Config.ProbeKey to a key it may access): %w", eval.Err())
	}
	v, refused, err = reply(eval)
	if err != nil {
		return n, err
	}
	if refused != "" {
		n.ScriptingRefused = refused
	} else if i, ok := v.(int64); !ok || i != 1 {
		return n, fmt.Errorf("EVAL %q: unexpected reply %#v", probeScript, v)
	} else {
		n.Scripting = true
	}

	if err := evalsha.Err(); err != nil && n.Scripting {
		switch {
		case strings.HasPrefix(err.Error(), "NOSCRIPT "):
			// Routed to a server without the script cached: EVALSHA works.
		case isRefusal(err):
			n.EvalSHARefused = err.Error()
		default:
			return n, fmt.Errorf("EVALSHA: %w", err)
		}
	}

	// MODULE LIST and INFO modules are extra evidence: any error reply
	// (NOPERM, unknown command, proxy refusal) only leaves them out.
	var rerr goredis.Error
	if err := modList.Err(); err == nil {
		mods, err := parseModuleList(modList.Val())
		if err != nil {
			return n, err
		}
		n.Modules = mods
	} else if errors.As(err, &rerr) {
		n.ModuleListRefused = err.Error()
	} else {
		return n, fmt.Errorf("MODULE LIST: %w", err)
	}
	if err := infoMods.Err(); err == nil {
		s, ok := infoMods.Val().(string)
		if !ok {
			return n, fmt.Errorf("INFO modules: unexpected reply %T", infoMods.Val())
		}
		mods, index := parseInfoModules(s)
		n.InfoModules, n.TairHashIndex = true, index
		for _, m := range mods {
			if _, dup := n.module(m.Name); !dup {
				n.Modules = append(n.Modules, m)
			}
		}
	} else if !errors.As(err, &rerr) {
		return n, fmt.Errorf("INFO modules: %w", err)
	}
	slices.SortFunc(n.Modules, func(a, b Module) int { return strings.Compare(a.Name, b.Name) })

	// INFO replication: whether the node is a replica, and of what. Any
	// error reply (a proxy or an ACL refusing INFO) leaves the role
	// unknown, taken as a master: writes then say what they meet.
	if err := infoRepl.Err(); err == nil {
		s, ok := infoRepl.Val().(string)
		if !ok {
			return n, fmt.Errorf("INFO replication: unexpected reply %T", infoRepl.Val())
		}
		n.Replica, n.Master = parseInfoReplication(s)
	} else if !errors.As(err, &rerr) {
		return n, fmt.Errorf("INFO replication: %w", err)
	}
	return n, nil
}

// parseInfoReplication reads INFO replication: whether role is "slave"
// (the word Redis and Valkey use for a replica), and then its master's
// address from master_host and master_port ("" when they are missing).
func parseInfoReplication(s string) (replica bool, master string) {
	var host, port string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "role":
			replica = v == "slave"
		case "master_host":
			host = v
		case "master_port":
			port = v
		}
	}
	if replica && host != "" && port != "" {
		master = net.JoinHostPort(host, port)
	}
	return replica, master
}

// isRefusal reports whether err is a server's (or a proxy's) outright
// refusal of a command, as opposed to a failure worth retrying or
// reporting. It is the one place that reads error texts; each case is an
// exact reply seen from a real server or documented by its vendor:
//
//   - NOPERM …: Redis ACL ("NOPERM User u has no permissions to run the
//     'eval' command", Redis 6: "NOPERM this user has no permissions …").
//   - ERR unknown command …: the command does not exist or was renamed
//     away (Redis 7, Valkey: 'name'; Redis 6: `name`).
//   - ERR unknown subcommand …: e.g. COMMAND INFO or MODULE LIST on a
//     server or proxy that has the command but not the subcommand.
//   - ERR command eval not support for normal user: older Alibaba Cloud
//     (ApsaraDB for Redis) minor versions.
func isRefusal(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	switch {
	case strings.HasPrefix(msg, "NOPERM "):
		return true
	case strings.HasPrefix(msg, "ERR unknown command "),
		strings.HasPrefix(msg, "ERR unknown subcommand "),
		strings.HasPrefix(msg, "ERR Unknown subcommand "):
		return true
	case strings.HasPrefix(msg, "ERR command ") && strings.HasSuffix(msg, " not support for normal user"):
		return true
	}
	return false
}

// isKeyDenied reports whether err is an ACL denial of a key rather than
// of the command (Redis 7.0: "NOPERM this user has no permissions to
// access one of the keys used as arguments"; Redis 7.2+: "NOPERM No
// permissions to access a key"). Probing scripting with such a key says
// nothing about scripting.
func isKeyDenied(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "NOPERM this user has no permissions to access one of the keys") ||
		strings.HasPrefix(msg, "NOPERM No permissions to access a key")
}

// parseCommandInfo returns which of asked COMMAND INFO found, lower case,
// in asked order. The reply has one entry per asked name: nil when the
// server does not know it, else an array whose first element is the name.
func parseCommandInfo(v any, asked []string) ([]string, error) {
	entries, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("COMMAND INFO: unexpected reply %T", v)
	}
	if len(entries) != len(asked) {
		return nil, fmt.Errorf("COMMAND INFO: %d entries for %d commands", len(entries), len(asked))
	}
	var found []string
	for i, e := range entries {
		if e == nil {
			continue
		}
		fields, ok := e.([]any)
		if !ok || len(fields) == 0 {
			return nil, fmt.Errorf("COMMAND INFO: entry %d: unexpected reply %T", i, e)
		}
		name, ok := fields[0].(string)
		if !ok {
			return nil, fmt.Errorf("COMMAND INFO: entry %d: name is %T", i, fields[0])
		}
		if !strings.EqualFold(name, asked[i]) {
			return nil, fmt.Errorf("COMMAND INFO: entry %d names %q, asked %q", i, name, asked[i])
		}
		found = append(found, asked[i])
	}
	return found, nil
}

// parseModuleList reads MODULE LIST: an array of entries, each a map
// (RESP3) or a flat array of name/value pairs (RESP2) with "name" and "ver".
func parseModuleList(v any) ([]Module, error) {
	entries, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("MODULE LIST: unexpected reply %T", v)
	}
	mods := make([]Module, 0, len(entries))
	for i, e := range entries {
		fields := map[string]any{}
		switch e := e.(type) {
		case map[any]any:
			for k, v := range e {
				if ks, ok := k.(string); ok {
					fields[ks] = v
				}
			}
		case []any:
			if len(e)%2 != 0 {
				return nil, fmt.Errorf("MODULE LIST: entry %d has %d fields", i, len(e))
			}
			for j := 0; j < len(e); j += 2 {
				if ks, ok := e[j].(string); ok {
					fields[ks] = e[j+1]
				}
			}
		default:
			return nil, fmt.Errorf("MODULE LIST: entry %d: unexpected reply %T", i, e)
		}
		name, ok := fields["name"].(string)
		if !ok {
			return nil, fmt.Errorf("MODULE LIST: entry %d: name is %T", i, fields["name"])
		}
		ver, ok := fields["ver"].(int64)
		if !ok {
			return nil, fmt.Errorf("MODULE LIST: entry %d: ver is %T", i, fields["ver"])
		}
		mods = append(mods, Module{Name: name, Version: ver})
	}
	return mods, nil
}

// parseInfoModules reads INFO modules: "module:name=tairhash,ver=1,…"
// lines, and whether the tairhash_ sections (SORT_MODE and SLAB_MODE builds
// only) are present. Unparseable lines are skipped: this is evidence only.
func parseInfoModules(s string) (mods []Module, tairHashIndex bool) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "# tairhash_") {
			tairHashIndex = true
			continue
		}
		rest, ok := strings.CutPrefix(line, "module:")
		if !ok {
			continue
		}
		var m Module
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "name":
				m.Name = v
			case "ver":
				m.Version, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if m.Name != "" {
			mods = append(mods, m)
		}
	}
	return mods, tairHashIndex
}
