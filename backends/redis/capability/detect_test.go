package capability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
	goredis "github.com/redis/go-redis/v9"
)

// clientFor returns a client for the replayed servers: a plain client for
// one, a cluster client (slots split between them) for several.
func clientFor(t *testing.T, addrs []string, proto int) goredis.UniversalClient {
	t.Helper()
	var c goredis.UniversalClient
	if len(addrs) == 1 {
		c = goredis.NewClient(&goredis.Options{Addr: addrs[0], Protocol: proto, MaxRetries: -1, DisableIdentity: true})
	} else {
		c = goredis.NewClusterClient(&goredis.ClusterOptions{
			Protocol:        proto,
			MaxRetries:      -1,
			DisableIdentity: true,
			ClusterSlots: func(context.Context) ([]goredis.ClusterSlot, error) {
				var slots []goredis.ClusterSlot
				per := 16384 / len(addrs)
				for i, a := range addrs {
					end := (i+1)*per - 1
					if i == len(addrs)-1 {
						end = 16383
					}
					slots = append(slots, goredis.ClusterSlot{Start: i * per, End: end, Nodes: []goredis.ClusterNode{{Addr: a}}})
				}
				return slots, nil
			},
		})
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func probeRecorded(t *testing.T, files []string, proto int, cfg Config) *Report {
	t.Helper()
	var addrs []string
	for _, f := range files {
		addrs = append(addrs, replay(t, loadRecording(t, f)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := Probe(ctx, clientFor(t, addrs, proto), cfg)
	if err != nil {
		t.Fatalf("Probe(%v) error: %v", files, err)
	}
	return r
}

type strategies map[driver.Algorithm]Strategy

// allLua is the plain server's outcome.
var allLua = strategies{driver.FixedWindow: PlainLua, driver.SlidingWindow: PlainLua, driver.SlidingLog: PlainLua, driver.GCRA: PlainLua}

func TestProbeRecorded(t *testing.T) {
	cluster := []string{"cluster-a", "cluster-b", "cluster-c"}
	tests := []struct {
		name      string
		files     []string
		cfg       Config
		want      strategies
		reasons   map[driver.Algorithm]string // substrings of the reason
		features  map[Feature]string          // Count.String()
		scripting string
		nonAtomic bool
		notes     []string // substrings, each in some note
	}{
		{
			name: "redis 7.0 has nothing", files: []string{"redis-7.0.15"}, want: allLua,
			reasons:   map[driver.Algorithm]string{driver.SlidingWindow: "no native hash-field expiry (HPEXPIRE on 0/1 master)"},
			features:  map[Feature]string{TairHash: "0/1 master", Cell: "0/1 master", HFE: "0/1 master"},
			scripting: "1/1 master",
		},
		{
			name: "valkey 8 has no HFE", files: []string{"valkey-8.0.1"}, want: allLua,
			features: map[Feature]string{HFE: "0/1 master"}, scripting: "1/1 master",
		},
		{
			name: "tairhash: plain Lua by default", files: []string{"redis-7.0.15-tairhash"}, want: allLua,
			reasons:  map[driver.Algorithm]string{driver.SlidingWindow: "tairhash usable on 1/1 master but not used: "},
			features: map[Feature]string{TairHash: "1/1 master"},
		},
		{
			name: "redis-cell: plain Lua by default", files: []string{"redis-7.0.15-redis-cell"}, want: allLua,
			reasons: map[driver.Algorithm]string{driver.GCRA: "redis-cell usable on 1/1 master but not used: "},
		},
		{
			name: "redis 7.4: plain Lua by default", files: []string{"redis-7.4.1"}, want: allLua,
			reasons: map[driver.Algorithm]string{driver.SlidingWindow: "hfe usable on 1/1 master but not used: "},
		},
		{
			name: "tairhash", files: []string{"redis-7.0.15-tairhash"}, cfg: Config{ModuleStrategies: true},
			want:     strategies{driver.FixedWindow: PlainLua, driver.SlidingWindow: TairHashLua, driver.SlidingLog: PlainLua, driver.GCRA: PlainLua},
			reasons:  map[driver.Algorithm]string{driver.SlidingWindow: "TairHash per-field expiry: EXHINCRBY on 1/1 master"},
			features: map[Feature]string{TairHash: "1/1 master"},
		},
		{
			name: "tairhash scan-mode build is not used", files: []string{"redis-7.0.15-tairhash-scanmode"}, want: allLua,
			reasons:  map[driver.Algorithm]string{driver.SlidingWindow: "tairhash present but unsafe"},
			features: map[Feature]string{TairHash: "1/1 master"},
			notes:    []string{"default scan-mode build"},
		},
		{
			name: "redis-cell", files: []string{"redis-7.0.15-redis-cell"}, cfg: Config{ModuleStrategies: true},
			want:    strategies{driver.FixedWindow: PlainLua, driver.SlidingWindow: PlainLua, driver.SlidingLog: PlainLua, driver.GCRA: CellLua},
			reasons: map[driver.Algorithm]string{driver.GCRA: "redis-cell: CL.THROTTLE on 1/1 master"},
		},
		{
			name: "redis 7.4 hash-field expiry", files: []string{"redis-7.4.1"}, cfg: Config{ModuleStrategies: true},
			want:    strategies{driver.FixedWindow: PlainLua, driver.SlidingWindow: HFELua, driver.SlidingLog: PlainLua, driver.GCRA: PlainLua},
			reasons: map[driver.Algorithm]string{driver.SlidingWindow: "native hash-field expiry: HPEXPIRE on 1/1 master"},
		},
		{
			name: "cluster whose masters disagree", files: cluster, cfg: Config{ModuleStrategies: true},
			want: strategies{driver.FixedWindow: PlainLua, driver.SlidingWindow: TairHashLua, driver.SlidingLog: PlainLua, driver.GCRA: PlainLua},
			reasons: map[driver.Algorithm]string{
				driver.SlidingWindow: "TairHash per-field expiry: EXHINCRBY on 3/3 masters",
				driver.GCRA:          "CL.THROTTLE on 1/3 masters only",
			},
			features:  map[Feature]string{TairHash: "3/3 masters", Cell: "1/3 masters", HFE: "1/3 masters"},
			scripting: "3/3 masters",
			notes:     []string{"masters disagree on redis-cell", "masters disagree on hfe"},
		},
		{
			name: "scripting refused, tairhash bare", files: []string{"redis-7.0.15-tairhash-noscript"},
			want:      strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: TairHashBare, driver.SlidingLog: Unavailable, driver.GCRA: Unavailable},
			reasons:   map[driver.Algorithm]string{driver.SlidingWindow: "multi-rule decisions are not atomic"},
			scripting: "0/1 master", nonAtomic: true,
			notes: []string{"multi-rule atomicity is degraded"},
		},
		{
			name: "scripting refused by ACL", files: []string{"redis-7.0.15-acl-noscript"},
			want:      strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: Unavailable, driver.SlidingLog: Unavailable, driver.GCRA: Unavailable},
			reasons:   map[driver.Algorithm]string{driver.FixedWindow: "scripting refused (EVAL runs on 0/1 master)"},
			scripting: "0/1 master",
		},
		{
			// Recordings made before the probe asked INFO replication
			// answer it "unknown command" (replay): the role is unknown,
			// taken as a master, as above.
			name: "replica", files: []string{"redis-7.0.15-replica"},
			want:      strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: Unavailable, driver.SlidingLog: Unavailable, driver.GCRA: Unavailable},
			reasons:   map[driver.Algorithm]string{driver.FixedWindow: "is a replica of 127.0.0.1:7701", driver.GCRA: "is a replica of 127.0.0.1:7701"},
			scripting: "1/1 master",
			notes:     []string{"is a replica of 127.0.0.1:7701: it takes no writes of its own"},
		},
		{
			name: "force plain lua", files: []string{"redis-7.0.15-tairhash"}, cfg: Config{ForcePlainLua: true}, want: allLua,
			reasons:  map[driver.Algorithm]string{driver.SlidingWindow: "plain Lua forced by configuration"},
			features: map[Feature]string{TairHash: "1/1 master"},
		},
		{
			name: "forbid tairhash", files: []string{"redis-7.0.15-tairhash"}, cfg: Config{Forbid: []Feature{TairHash}}, want: allLua,
			reasons: map[driver.Algorithm]string{driver.SlidingWindow: "tairhash forbidden by configuration"},
		},
		{
			name: "forbid hfe", files: []string{"redis-7.4.1"}, cfg: Config{Forbid: []Feature{HFE}}, want: allLua,
			reasons: map[driver.Algorithm]string{driver.SlidingWindow: "hfe forbidden by configuration"},
		},
		{
			name: "forbid cell", files: []string{"redis-7.0.15-redis-cell"}, cfg: Config{Forbid: []Feature{Cell}}, want: allLua,
			reasons: map[driver.Algorithm]string{driver.GCRA: "redis-cell forbidden by configuration"},
		},
		{
			name: "forbid tairhash without scripting", files: []string{"redis-7.0.15-tairhash-noscript"}, cfg: Config{Forbid: []Feature{TairHash}},
			want: strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: Unavailable, driver.SlidingLog: Unavailable, driver.GCRA: Unavailable},
		},
		{
			name: "force plain lua without scripting", files: []string{"redis-7.0.15-tairhash-noscript"}, cfg: Config{ForcePlainLua: true},
			want:    strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: Unavailable, driver.SlidingLog: Unavailable, driver.GCRA: Unavailable},
			reasons: map[driver.Algorithm]string{driver.SlidingWindow: "plain Lua forced by configuration, but scripting refused (EVAL runs on 0/1 master)"},
		},
	}
	for _, tc := range tests {
		for _, proto := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/resp%d", tc.name, proto), func(t *testing.T) {
				r := probeRecorded(t, tc.files, proto, tc.cfg)
				if r.Cluster != (len(tc.files) > 1) {
					t.Errorf("Cluster = %v, want %v", r.Cluster, len(tc.files) > 1)
				}
				if len(r.Nodes) != len(tc.files) {
					t.Fatalf("len(Nodes) = %d, want %d", len(r.Nodes), len(tc.files))
				}
				for _, a := range Algorithms {
					c := r.Choice(a)
					if c.Strategy != tc.want[a] {
						t.Errorf("Choice(%v) = %v (%s), want %v", a, c.Strategy, c.Reason, tc.want[a])
					}
					if want, ok := tc.reasons[a]; ok && !strings.Contains(c.Reason, want) {
						t.Errorf("Choice(%v).Reason = %q, want it to contain %q", a, c.Reason, want)
					}
				}
				for f, want := range tc.features {
					if got := r.Feature(f).Count.String(); got != want {
						t.Errorf("Feature(%v) = %s, want %s", f, got, want)
					}
				}
				if tc.scripting != "" && r.Scripting.String() != tc.scripting {
					t.Errorf("Scripting = %s, want %s", r.Scripting, tc.scripting)
				}
				if r.NonAtomic != tc.nonAtomic {
					t.Errorf("NonAtomic = %v, want %v", r.NonAtomic, tc.nonAtomic)
				}
				for _, want := range tc.notes {
					if !containsSub(r.Notes, want) {
						t.Errorf("Notes = %q, want one containing %q", r.Notes, want)
					}
				}
				if t.Failed() {
					t.Logf("report:\n%s", r)
				}
			})
		}
	}
}

func containsSub(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestProbeFindings checks what Probe reads from each recorded server,
// beyond the choices.
func TestProbeFindings(t *testing.T) {
	tests := []struct {
		file      string
		commands  []string
		modules   []string
		index     bool
		scripting string // "" when it runs, else a prefix of the refusal
		modList   string // prefix of MODULE LIST's refusal
	}{
		{file: "redis-7.0.15"},
		{file: "valkey-8.0.1"},
		{file: "redis-7.4.1", commands: []string{"hexpire", "hpexpire"}},
		{file: "redis-7.0.15-tairhash", commands: []string{"exhincrby", "exhpexpireat", "exhvals"}, modules: []string{"tairhash"}, index: true},
		{file: "redis-7.0.15-tairhash-scanmode", commands: []string{"exhincrby", "exhpexpireat", "exhvals"}, modules: []string{"tairhash"}},
		{file: "redis-7.0.15-redis-cell", commands: []string{"cl.throttle"}, modules: []string{"redis-cell"}},
		{file: "redis-7.0.15-tairhash-noscript", commands: []string{"exhincrby", "exhpexpireat", "exhvals"}, modules: []string{"tairhash"}, index: true, scripting: "ERR unknown command 'EVAL'"},
		{file: "redis-7.0.15-acl-noscript", scripting: "NOPERM ", modList: "NOPERM "},
		{file: "cluster-a", commands: []string{"exhincrby", "exhpexpireat", "exhvals", "cl.throttle"}, modules: []string{"redis-cell", "tairhash"}, index: true},
	}
	for _, tc := range tests {
		for _, proto := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/resp%d", tc.file, proto), func(t *testing.T) {
				r := probeRecorded(t, []string{tc.file}, proto, Config{})
				n := r.Nodes[0]
				if strings.Join(n.Commands, " ") != strings.Join(tc.commands, " ") {
					t.Errorf("Commands = %q, want %q", n.Commands, tc.commands)
				}
				var mods []string
				for _, m := range n.Modules {
					mods = append(mods, m.Name)
					if m.Version != 1 {
						t.Errorf("module %s version = %d, want 1", m.Name, m.Version)
					}
				}
				if strings.Join(mods, " ") != strings.Join(tc.modules, " ") {
					t.Errorf("Modules = %q, want %q", mods, tc.modules)
				}
				if n.TairHashIndex != tc.index {
					t.Errorf("TairHashIndex = %v, want %v", n.TairHashIndex, tc.index)
				}
				if !n.InfoModules {
					t.Errorf("InfoModules = false, want true")
				}
				if n.Scripting != (tc.scripting == "") || !strings.HasPrefix(n.ScriptingRefused, tc.scripting) {
					t.Errorf("Scripting = %v (%q), want refusal %q", n.Scripting, n.ScriptingRefused, tc.scripting)
				}
				if !strings.HasPrefix(n.ModuleListRefused, tc.modList) || (tc.modList == "") != (n.ModuleListRefused == "") {
					t.Errorf("ModuleListRefused = %q, want %q…", n.ModuleListRefused, tc.modList)
				}
			})
		}
	}
}

// redisErr is an error reply, as go-redis reports one.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestIsRefusal(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		// Recorded (testdata/detect) or typed in from replies observed on real servers.
		{redisErr("ERR unknown command 'eval', with args beginning with: 'return 1' '0' "), true},
		{redisErr("NOPERM this user has no permissions to run the 'eval' command"), true},
		{redisErr("NOPERM this user has no permissions to run the 'module|list' command"), true},
		{redisErr("ERR unknown command 'CL.THROTTLE', with args beginning with: "), true},
		// Redis 6 quotes with backticks; Redis 7.2+ names the user.
		{redisErr("ERR unknown command `eval`, with args beginning with: `return 1`, `0`, "), true},
		{redisErr("NOPERM User app has no permissions to run the 'eval' command"), true},
		{redisErr("ERR unknown subcommand 'INFO'. Try COMMAND HELP."), true},
		// Alibaba Cloud, older minor versions.
		{redisErr("ERR command eval not support for normal user"), true},
		// Not refusals: transient, routing, or a probe of the wrong shape.
		{redisErr("LOADING Redis is loading the dataset in memory"), false},
		{redisErr("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), false},
		{redisErr("MOVED 5258 127.0.0.1:17311"), false},
		{redisErr("NOSCRIPT No matching script. Please use EVAL."), false},
		{redisErr("ERR for redis cluster, eval/evalsha number of keys can't be negative or zero"), false},
		{redisErr("ERR Unknown Redis command called from script"), false},
		{redisErr("READONLY You can't write against a read only replica."), false},
		{io.EOF, false},
		{errors.New("ERR unknown command 'eval'"), false}, // not a server reply
		{fmt.Errorf("wrapped: %w", redisErr("NOPERM x")), true},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			if got := isRefusal(tc.err); got != tc.want {
				t.Errorf("isRefusal(%q) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// edit returns a copy of the recording with cmd's replies replaced.
func edit(rec *recording, cmd []string, resp string) *recording {
	out := *rec
	out.Exchanges = append([]exchange(nil), rec.Exchanges...)
	for i, e := range out.Exchanges {
		if strings.Join(e.Command, " ") == strings.Join(cmd, " ") {
			out.Exchanges[i].RESP2, out.Exchanges[i].RESP3 = resp, resp
		}
	}
	return &out
}

func TestProbeErrors(t *testing.T) {
	base := loadRecording(t, "redis-7.0.15")
	cmds := probeCommands("fc:{probe}")
	tests := []struct {
		name string
		rec  *recording
		want string
	}{
		{"EVAL loading", edit(base, cmds[1], "-LOADING Redis is loading the dataset in memory\r\n"), "LOADING"},
		{"EVAL odd reply", edit(base, cmds[1], ":2\r\n"), "unexpected reply"},
		{"COMMAND INFO short", edit(base, cmds[0], "*1\r\n$-1\r\n"), "1 entries for 6 commands"},
		{"COMMAND INFO wrong name", edit(base, cmds[0], "*6\r\n*1\r\n$3\r\nget\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n"), `names "get"`},
		{"COMMAND INFO not an array", edit(base, cmds[0], "+OK\r\n"), "unexpected reply"},
		{"MODULE LIST odd", edit(base, cmds[3], "*1\r\n*1\r\n$4\r\nname\r\n"), "MODULE LIST"},
		// Seen on Redis 7.0.15 and 7.4.1 with "user default on nopass ~app:* &* +@all".
		{"probe key denied 7.0", edit(base, cmds[1], "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"), "Config.ProbeKey"},
		{"probe key denied 7.4", edit(base, cmds[1], "-NOPERM No permissions to access a key\r\n"), "Config.ProbeKey"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := replay(t, tc.rec)
			r, err := Probe(context.Background(), clientFor(t, []string{addr}, 2), Config{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Probe() = %v, %v; want error containing %q", r, err, tc.want)
			}
		})
	}
	t.Run("cluster node probed as a server", func(t *testing.T) {
		addr := replay(t, loadRecording(t, "cluster-b"))
		_, err := Probe(context.Background(), clientFor(t, []string{addr}, 3), Config{})
		if err == nil || !strings.Contains(err.Error(), "cluster mode") {
			t.Fatalf("Probe() error = %v, want one saying the server is in cluster mode", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		addr := replay(t, base)
		c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		c.Close()
		if _, err := Probe(context.Background(), c, Config{}); err == nil {
			t.Fatal("Probe(closed client) succeeded, want error")
		}
	})
}

func TestProbeRefusedCommandInfo(t *testing.T) {
	cmds := probeCommands("fc:{probe}")
	rec := edit(loadRecording(t, "redis-7.0.15-tairhash"), cmds[0], "-NOPERM this user has no permissions to run the 'command|info' command\r\n")
	r, err := Probe(context.Background(), clientFor(t, []string{replay(t, rec)}, 3), Config{ModuleStrategies: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Choice(driver.SlidingWindow).Strategy; got != TairHashLua {
		t.Errorf("Choice(SlidingWindow) = %v, want %v (from MODULE LIST)", got, TairHashLua)
	}
	if !containsSub(r.Notes, "refused COMMAND INFO") {
		t.Errorf("Notes = %q, want the refusal explained", r.Notes)
	}
	rec = edit(rec, cmds[3], "-NOPERM this user has no permissions to run the 'module|list' command\r\n")
	rec = edit(rec, cmds[4], "-NOPERM this user has no permissions to run the 'info' command\r\n")
	r, err = Probe(context.Background(), clientFor(t, []string{replay(t, rec)}, 3), Config{ModuleStrategies: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Choice(driver.SlidingWindow).Strategy; got != PlainLua {
		t.Errorf("Choice(SlidingWindow) = %v, want %v (nothing known)", got, PlainLua)
	}
	if !containsSub(r.Notes, "no module strategy is used") {
		t.Errorf("Notes = %q, want the refusals explained", r.Notes)
	}
}

// TestChoose covers mixes no recording has: masters that disagree on
// scripting, EVALSHA refused, renamed module commands.
func TestChoose(t *testing.T) {
	th := []string{"exhincrby", "exhpexpireat", "exhvals"}
	tests := []struct {
		name    string
		nodes   []Node
		cfg     Config
		want    strategies
		evalOnl bool
		notes   []string
	}{
		{
			name: "one master refuses scripting",
			nodes: []Node{
				{Addr: "a:1", Commands: th, Scripting: true},
				{Addr: "b:1", Commands: th, ScriptingRefused: "ERR unknown command 'eval'"},
				{Addr: "c:1", Commands: th, Scripting: true},
			},
			want:  strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: TairHashBare, driver.SlidingLog: Unavailable, driver.GCRA: Unavailable},
			notes: []string{"masters disagree on scripting: EVAL runs on 2/3 masters (refused on b:1"},
		},
		{
			name:    "EVALSHA refused",
			nodes:   []Node{{Addr: "a:1", Scripting: true, EvalSHARefused: "ERR unknown command 'evalsha'"}},
			want:    allLua,
			evalOnl: true,
			notes:   []string{"scripts must be sent with EVAL"},
		},
		{
			name:  "module listed but commands renamed",
			nodes: []Node{{Addr: "a:1", Scripting: true, Modules: []Module{{Name: "redis-cell", Version: 1}}, InfoModules: true}},
			want:  allLua,
			notes: []string{"lists the redis-cell module, but COMMAND INFO does not find CL.THROTTLE"},
		},
		{
			name:  "redis-cell without scripting: GCRA on bare CL.THROTTLE, NonAtomic",
			nodes: []Node{{Addr: "a:1", Commands: []string{"cl.throttle"}, ScriptingRefused: "NOPERM x"}},
			want:  strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: Unavailable, driver.SlidingLog: Unavailable, driver.GCRA: CellBare},
			notes: []string{"CL.THROTTLE cannot be compensated: GCRA rules consume last, and when a GCRA rule refuses after another consumed, those units stay consumed (under-admission, never over-admission)"},
		},
		{
			name: "TairHash and redis-cell without scripting: both bare",
			nodes: []Node{{Addr: "a:1", Commands: append(slices.Clone(th), "cl.throttle"), ScriptingRefused: "NOPERM x",
				Modules: []Module{{Name: "tairhash", Version: 1}}, InfoModules: true, TairHashIndex: true}},
			want:  strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: TairHashBare, driver.SlidingLog: Unavailable, driver.GCRA: CellBare},
			notes: []string{"under-admission, never over-admission"},
		},
		{
			name:  "redis-cell without scripting, forbidden: GCRA unavailable, not NonAtomic",
			nodes: []Node{{Addr: "a:1", Commands: []string{"cl.throttle"}, ScriptingRefused: "NOPERM x"}},
			cfg:   Config{Forbid: []Feature{Cell}},
			want:  strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: Unavailable, driver.SlidingLog: Unavailable, driver.GCRA: Unavailable},
		},
		{
			name:  "redis-cell without scripting, plain Lua forced: GCRA unavailable",
			nodes: []Node{{Addr: "a:1", Commands: []string{"cl.throttle"}, ScriptingRefused: "NOPERM x"}},
			cfg:   Config{ForcePlainLua: true},
			want:  strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: Unavailable, driver.SlidingLog: Unavailable, driver.GCRA: Unavailable},
		},
		{
			name: "HFE preferred to TairHash",
			nodes: []Node{{Addr: "a:1", Scripting: true, Commands: append(th, "hexpire", "hpexpire"),
				Modules: []Module{{Name: "tairhash", Version: 1}}, InfoModules: true, TairHashIndex: true}},
			cfg:  Config{ModuleStrategies: true},
			want: strategies{driver.FixedWindow: PlainLua, driver.SlidingWindow: HFELua, driver.SlidingLog: PlainLua, driver.GCRA: PlainLua},
		},
		{
			name:  "no masters",
			want:  strategies{driver.FixedWindow: Unavailable, driver.SlidingWindow: Unavailable, driver.SlidingLog: Unavailable, driver.GCRA: Unavailable},
			notes: []string{"no master answered"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Choose(tc.nodes, tc.cfg)
			for _, a := range Algorithms {
				if got := r.Choice(a).Strategy; got != tc.want[a] {
					t.Errorf("Choice(%v) = %v (%s), want %v", a, got, r.Choice(a).Reason, tc.want[a])
				}
			}
			if r.EvalOnly != tc.evalOnl {
				t.Errorf("EvalOnly = %v, want %v", r.EvalOnly, tc.evalOnl)
			}
			if want := slices.ContainsFunc(Algorithms, func(a driver.Algorithm) bool { return tc.want[a].NonAtomic() }); r.NonAtomic != want {
				t.Errorf("NonAtomic = %v, want %v (a strategy chosen is NonAtomic)", r.NonAtomic, want)
			}
			for _, want := range tc.notes {
				if !containsSub(r.Notes, want) {
					t.Errorf("Notes = %q, want one containing %q", r.Notes, want)
				}
			}
		})
	}
}

func TestChooseDoesNotModifyInput(t *testing.T) {
	nodes := []Node{{Addr: "b:1"}, {Addr: "a:1"}}
	r := Choose(nodes, Config{})
	if nodes[0].Addr != "b:1" {
		t.Errorf("Choose sorted its input: %v", nodes)
	}
	if r.Nodes[0].Addr != "a:1" || r.Target != "a:1,b:1" {
		t.Errorf("Nodes = %v, Target = %q, want sorted", r.Nodes, r.Target)
	}
}

func TestDescription(t *testing.T) {
	r := probeRecorded(t, []string{"cluster-a", "cluster-b", "cluster-c"}, 3, Config{ModuleStrategies: true})
	d := r.Description()
	if len(d.Strategies) != len(Algorithms) {
		t.Fatalf("Description().Strategies = %v, want %d entries", d.Strategies, len(Algorithms))
	}
	got := d.Strategies[driver.SlidingWindow]
	want := driver.Strategy{Name: "lua+tairhash", Reason: "TairHash per-field expiry: EXHINCRBY on 3/3 masters"}
	if got != want {
		t.Errorf("Strategies[SlidingWindow] = %+v, want %+v", got, want)
	}
	if d.Target != r.Target || len(d.Notes) != len(r.Notes)+1 || d.Notes[len(r.Notes)] != r.Wide.String() {
		t.Errorf("Description() = %+v, want target and notes of %+v, then the wide subjects note", d, r)
	}
	text := r.String()
	for _, want := range []string{"cluster ", "(3 masters)", "lua+tairhash", "redis-cell  1/3 masters", "masters disagree"} {
		if !strings.Contains(text, want) {
			t.Errorf("String() lacks %q:\n%s", want, text)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"algorithm":"sliding_window","strategy":"lua+tairhash"`, `"feature":"redis-cell","have":1,"of":3`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("json.Marshal(Report) lacks %s:\n%s", want, b)
		}
	}
}

// TestWideRecorded: the report says where wide subjects' nested sets live
// on each recorded server, and why: HPEXPIREAT where every master has
// native hash-field expiry and it is allowed (whatever ModuleStrategies
// and ForcePlainLua say: it is no module strategy), else the sweep,
// naming on a TairHash server why the module's field expiry is not used;
// nothing where no script runs. String (freqcap detect) and Description
// (Describe) give the same sentence.
func TestWideRecorded(t *testing.T) {
	sweep := "a plain hash, one field per value, whose dead fields each write adding a field sweeps (HSCAN of 8 fields"
	tests := []struct {
		name  string
		files []string
		cfg   Config
		mode  string
		want  []string // substrings of Wide.String()
	}{
		{"redis 7.0", []string{"redis-7.0.15"}, Config{}, "s", []string{sweep, "no native hash-field expiry (HPEXPIRE on 0/1 master)"}},
		{"valkey 8", []string{"valkey-8.0.1"}, Config{}, "s", []string{sweep}},
		{"redis 7.4", []string{"redis-7.4.1"}, Config{}, "s", []string{sweep, "native hash-field expiry (HPEXPIRE on every master) is not used for them by default"}},
		{"redis 7.4, field expiry", []string{"redis-7.4.1"}, Config{WideFieldExpiry: true}, "h", []string{"each expiring by HPEXPIREAT at its section's expiry plus 1000 ms (native hash-field expiry: HPEXPIRE on 1/1 master; Config.WideFieldExpiry)"}},
		{"redis 7.4, field expiry, module strategies", []string{"redis-7.4.1"}, Config{WideFieldExpiry: true, ModuleStrategies: true}, "h", nil},
		{"redis 7.4, field expiry, plain Lua forced", []string{"redis-7.4.1"}, Config{WideFieldExpiry: true, ForcePlainLua: true}, "h", nil},
		{"redis 7.4, field expiry, hfe forbidden", []string{"redis-7.4.1"}, Config{WideFieldExpiry: true, Forbid: []Feature{HFE}}, "s", []string{sweep, "hfe forbidden by configuration"}},
		{"tairhash", []string{"redis-7.0.15-tairhash"}, Config{}, "s", []string{sweep, "TairHash's per-field expiry (EXHSET … PXAT) is not used for them: its SORT_MODE build crashed a replica"}},
		{"tairhash, module strategies", []string{"redis-7.0.15-tairhash"}, Config{ModuleStrategies: true}, "s", []string{"TairHash's per-field expiry"}},
		{"cluster, hfe on 1/3 masters", []string{"cluster-a", "cluster-b", "cluster-c"}, Config{}, "s", []string{sweep, "HPEXPIRE on 1/3 masters only", "TairHash's per-field expiry"}},
		{"no scripting", []string{"redis-7.0.15-tairhash-noscript"}, Config{}, "", nil},
		{"replica", []string{"redis-7.0.15-replica"}, Config{}, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := probeRecorded(t, tc.files, 3, tc.cfg)
			w := r.Wide.String()
			if r.Wide.Mode != tc.mode {
				t.Errorf("Wide.Mode = %q, want %q (%s)", r.Wide.Mode, tc.mode, w)
			}
			if tc.mode == "" {
				if w != "" || strings.Contains(r.String(), "wide subjects") || containsSub(r.Description().Notes, "wide subjects") {
					t.Errorf("a report where no script runs says %q", w)
				}
				return
			}
			prefix := "wide subjects: a root whose value would pass 2048 bytes (lua.WideAt) with nested sets, or that holds a set its policy declares wide (sdk.WithWide) from that set's first value, keeps them in <root key>%w, mode " + tc.mode + ": "
			if !strings.HasPrefix(w, prefix) {
				t.Errorf("Wide.String() = %q, want it to start %q", w, prefix)
			}
			for _, want := range tc.want {
				if !strings.Contains(w, want) {
					t.Errorf("Wide.String() = %q, want it to contain %q", w, want)
				}
			}
			if !strings.Contains(r.String(), "\n"+w+"\n") {
				t.Errorf("String() lacks the wide subjects line %q:\n%s", w, r)
			}
			if d := r.Description(); !slices.Contains(d.Notes, w) {
				t.Errorf("Description().Notes = %q, want the wide subjects line", d.Notes)
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if want := `"wide":{"mode":"` + tc.mode + `","at":2048,"suffix":"%w","reason":`; !strings.Contains(string(b), want) {
				t.Errorf("json.Marshal(Report) lacks %s:\n%s", want, b)
			}
		})
	}
}

func TestParseFeature(t *testing.T) {
	for _, f := range Features {
		got, err := ParseFeature(strings.ToUpper(f.String()))
		if err != nil || got != f {
			t.Errorf("ParseFeature(%q) = %v, %v, want %v", f.String(), got, err, f)
		}
	}
	if got, err := ParseFeature("cell"); err != nil || got != Cell {
		t.Errorf(`ParseFeature("cell") = %v, %v, want %v`, got, err, Cell)
	}
	if _, err := ParseFeature("lua"); err == nil {
		t.Error(`ParseFeature("lua") succeeded, want error`)
	}
}

// countingReplay replays rec and counts the probes it answers (COMMAND
// INFO calls).
func countingReplay(t *testing.T, rec *recording) (string, func() int) {
	t.Helper()
	var (
		mu sync.Mutex
		n  int
	)
	addr := replayWith(t, rec, func(args []string) {
		if strings.EqualFold(args[0], "COMMAND") {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
	return addr, func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

func TestDetector(t *testing.T) {
	addr, probes := countingReplay(t, loadRecording(t, "redis-7.0.15-tairhash"))
	d := NewDetector(clientFor(t, []string{addr}, 3), Config{})
	if d.Cached() != nil {
		t.Fatal("Cached() before any probe is not nil")
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	reports := make([]*Report, 8)
	for i := range reports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := d.Report(ctx)
			if err != nil {
				t.Error(err)
			}
			reports[i] = r
		}()
	}
	wg.Wait()
	if got := probes(); got != 1 {
		t.Errorf("%d concurrent Report calls probed %d times, want 1", len(reports), got)
	}
	for _, r := range reports {
		if r != reports[0] {
			t.Fatal("concurrent Report calls returned different reports")
		}
	}
	if d.Cached() != reports[0] {
		t.Error("Cached() is not the probed report")
	}
	r, err := d.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := probes(); got != 2 || r == reports[0] || d.Cached() != r {
		t.Errorf("Refresh: probes = %d (want 2), new report cached = %v", got, d.Cached() == r)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.Refresh(cctx); err == nil {
		t.Error("Refresh(canceled ctx) succeeded, want error")
	}
	if d.Cached() != r {
		t.Error("a failed Refresh replaced the cached report")
	}
}
