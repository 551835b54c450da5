package bench

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // benchZones load on machines without zoneinfo, as in cmd/freqcap

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk/policyfile"
	goredis "github.com/redis/go-redis/v9"
)

// TestBenchModes runs each mode briefly against a dedicated server (Memory
// flushes it) and checks the report's lines.
func TestBenchModes(t *testing.T) {
	if testing.Short() {
		t.Skip("bench runs take a few seconds")
	}
	addr := redistest.NewServer(t).Addr()
	logPolicy, err := policyfile.LoadFile("../../testdata/seed-log.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		cfg   Config
		want  []string // substrings of the report
		lines []string // regular expressions, each matching one whole line
	}{
		{"batch", Config{Batch: 50, Rounds: 2}, []string{
			"policy push, TakeBatch of 50:", "ratio policy push, TakeBatch of 50 / policy push:", "median ratio", "errors 0;"}, nil},
		{"floor and pipelined baseline", Config{Floor: true, Batch: 30}, nil, []string{
			`^baseline INCRBY\+PEXPIRE EVALSHA: .* errors 0; .* 1\.00[0-9]* round trips, 1\.00 scripts .* 2\.00 commands inside scripts`,
			// 1/30 round trip per decision (counted exactly by pipelinedTrips below).
			`^baseline, pipelines of 30: .* errors 0; .* 0\.03[0-9]+ round trips, 1\.00 scripts .* 2\.00 commands inside scripts`,
			`^floor, 1 hash x 8 fields: .* errors 0; .* 4\.00 commands inside scripts`,
			`^floor, 2 keys x 4 fields: .* errors 0; .* 7\.00 commands inside scripts`,
			`^floor, 4 keys x 2 fields: .* errors 0; .* 13\.00 commands inside scripts`,
			`^floor, 4 keys x 2 fields, pipelines of 30: .* errors 0; .* 0\.03[0-9]+ round trips, 1\.00 scripts .* 13\.00 commands inside scripts`,
			`^ratio baseline, pipelines of 30 / baseline INCRBY\+PEXPIRE EVALSHA: [0-9.]+ `,
			`^ratio floor, 1 hash x 8 fields / baseline INCRBY\+PEXPIRE EVALSHA: [0-9.]+ `,
			`^ratio floor, 2 keys x 4 fields / baseline INCRBY\+PEXPIRE EVALSHA: [0-9.]+ `,
			`^ratio floor, 4 keys x 2 fields / baseline INCRBY\+PEXPIRE EVALSHA: [0-9.]+ `,
			`^ratio floor, 4 keys x 2 fields, pipelines of 30 / floor, 4 keys x 2 fields: [0-9.]+ `}},
		{"raw", Config{Raw: true, Rounds: 2}, nil, []string{
			`^raw\(4\) INCRBY\+PEXPIRE on 4 keys: .* errors 0; .* 1\.00 scripts `,
			`^ratio policy push / raw\(4\) INCRBY\+PEXPIRE on 4 keys: [0-9.]+ `,
			`^median ratio policy push / raw\(4\) INCRBY\+PEXPIRE on 4 keys over 2 rounds: [0-9.]+ `}},
		{"raw floor", Config{Raw: true, Floor: true}, nil, []string{
			// The packed layout's floor: TIME, GET, SET per decision.
			`^packed floor\(4\): 4 counters in one value: .* errors 0; .* 1\.00 scripts \(EVALSHA/EVAL\), 3\.00 commands inside scripts`,
			`^ratio policy push / packed floor\(4\): 4 counters in one value: [0-9.]+ `,
			`^ratio packed floor\(4\): 4 counters in one value / raw\(4\) INCRBY\+PEXPIRE on 4 keys: [0-9.]+ `}},
		{"coalesce", Config{Coalesce: 2, Raw: true, Rounds: 2}, nil, []string{
			// Fewer round trips and scripts than decisions: calls shared scripts.
			`^policy push, coalesce 2: .* errors 0; .* 0\.[0-9]+ round trips, 0\.[0-9]+ scripts `,
			`^ratio policy push, coalesce 2 / policy push: [0-9.]+ `,
			`^ratio policy push, coalesce 2 / raw\(4\) INCRBY\+PEXPIRE on 4 keys: [0-9.]+ `,
			`^median ratio policy push, coalesce 2 / policy push over 2 rounds: [0-9.]+ `,
			`^median ratio policy push, coalesce 2 / raw\(4\) INCRBY\+PEXPIRE on 4 keys over 2 rounds: [0-9.]+ `}},
		{"wait replicas", Config{WaitReplicas: 1, WaitTimeout: 5 * time.Millisecond}, nil, []string{
			// The server has no replica: every admission waits and says not Durable.
			`^policy push, waiting for 1 replica\(s\) \(WAIT\): .* errors 0;`,
			`^ratio policy push, waiting for 1 replica\(s\) \(WAIT\) / policy push: [0-9.]+ `,
			`^durability: 0 of [1-9][0-9]* admissions said Durable \(acknowledged by 1 replica\(s\) in time\)`}},
		{"serve", Config{Serve: true, Batch: 20}, nil, []string{
			`^policy push through serve \(gRPC, loopback, coalesce 4\): .* errors 0;`,
			`^policy push through serve, TakeBatch of 20: .* \(\d+ calls of 20\) .* errors 0;`,
			`^ratio policy push through serve \(gRPC, loopback, coalesce 4\) / policy push: [0-9.]+ `,
			`^policy push through serve, one RPC per call: .* errors 0;`,
			`^ratio policy push through serve \(gRPC, loopback, coalesce 4\) / policy push through serve, one RPC per call: [0-9.]+ `,
			`^ratio policy push through serve, TakeBatch of 20 / policy push through serve \(gRPC, loopback, coalesce 4\): [0-9.]+ `,
			`^ratio policy push through serve, TakeBatch of 20 / policy push through serve, one RPC per call: [0-9.]+ `,
			`^serve floor: Peek through serve on the memory backend, nothing decided: .* errors 0;`,
			`^ratio serve floor: Peek through serve on the memory backend, nothing decided / policy push: [0-9.]+ `,
			`^ratio policy push through serve \(gRPC, loopback, coalesce 4\) / serve floor: Peek through serve on the memory backend, nothing decided: [0-9.]+ `,
			`^p99 added by serve: -?[0-9.]+[µm]?s \(`}},
		{"hot", Config{Hot: true, HotSubjects: 3}, []string{
			"hot, no cache:", "hot, HotDenyCache:", "hot-deny cache: size 10000"}, []string{
			// Most of the cached run never reaches Redis.
			`^Redis round trips per decision: (1\.00|0\.[1-9])[0-9]* without the cache \(coalesced\), 0\.[0-4][0-9]* with it \(([5-9][0-9]|100)\.[0-9]% of decisions answered from the cache\)`}},
		{"recorder", Config{Recorder: true, Keep: true}, nil, []string{
			`^policy push, recorder on: .* errors 0;`,
			`^ratio policy push, recorder on / policy push: [0-9.]+ `,
			`^recorder: 0 counts lost to failed flushes; last flush: ok`}},
		{"hot recorder", Config{Hot: true, Recorder: true}, nil, []string{
			`^hot, HotDenyCache, recorder on: .* errors 0;`,
			`^ratio hot, HotDenyCache, recorder on / hot, HotDenyCache: [0-9.]+ `}},
		{"hot batch", Config{Hot: true, Batch: 20}, []string{"hot, batch 20, HotDenyCache:"}, nil},
		{"memory log", Config{Memory: true, MemoryTakes: 2, Policy: logPolicy[0]}, []string{
			`policy "push-log"`, "sliding_log:"}, []string{`^memory: [1-9][0-9]* bytes per subject \(2 decision\(s\) each for 200 subjects`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Redis = &goredis.UniversalOptions{Addrs: []string{addr}}
			cfg.Target = addr
			cfg.Workers, cfg.Duration, cfg.Subjects = 4, 200*time.Millisecond, 200
			var buf bytes.Buffer
			err := Run(context.Background(), cfg, &buf)
			out := buf.String()
			if err != nil {
				t.Fatalf("Run(%+v) = %v, want nil\n%s", tc.cfg, err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("Run(%+v) output lacks %q:\n%s", tc.cfg, w, out)
				}
			}
			for _, l := range tc.lines {
				if !regexp.MustCompile("(?m)" + l + ".*$").MatchString(out) {
					t.Errorf("Run(%+v): no line matches %s:\n%s", tc.cfg, l, out)
				}
			}
			pipelinedTrips(t, out, cfg.Workers)
			if strings.Contains(out, "first error") {
				t.Errorf("Run(%+v) reported errors:\n%s", tc.cfg, out)
			}
			// Without Keep, nothing of any run is left (the runs of
			// earlier subtests kept share these prefixes and go too).
			left := keysLeft(t, addr, "bench*")
			switch {
			case cfg.Keep && left == 0:
				t.Errorf("Run(%+v) with Keep left no keys", tc.cfg)
			case !cfg.Keep && left > 0:
				t.Errorf("Run(%+v) left %d keys matching bench*, want 0\n%s", tc.cfg, left, out)
			case !cfg.Keep && !regexp.MustCompile(`(?m)^cleanup: deleted [1-9][0-9]* keys under bench:\* bench-1:\* .*: ok$`).MatchString(out):
				t.Errorf("Run(%+v): no cleanup line:\n%s", tc.cfg, out)
			}
			if cfg.Recorder && !cfg.Hot { // the recorded run's statistics are in Redis
				c := goredis.NewClient(&goredis.Options{Addr: addr})
				defer c.Close()
				p, err := seed.Policies()
				if err != nil {
					t.Fatal(err)
				}
				reader, err := fleet.NewReader(redis.New(c, nil), &fleet.Options{Prefix: "bench-2"})
				if err != nil {
					t.Fatal(err)
				}
				st, err := reader.Stats(context.Background(), p[0], time.Hour)
				if err != nil || st.Allowed+st.Denied == 0 {
					t.Errorf("Stats of the recorder run = %d allowed, %d denied, %v; want some", st.Allowed, st.Denied, err)
				}
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	srv := &goredis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "no server"},
		{Config{Redis: srv, Workers: -1}, "must be positive"},
		{Config{Redis: srv, Batch: -1}, "batch must be >= 0"},
		{Config{Redis: srv, Coalesce: -2}, "coalesce >= -1"},
		{Config{Redis: srv, WaitReplicas: -1}, "wait replicas and wait timeout must be >= 0"},
		{Config{Redis: srv, Warmup: -time.Second}, "warmup >= 0"},
	} {
		err := Run(context.Background(), tc.cfg, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

// pipelinedTrips checks that every "pipelines of N" line of out made one
// round trip per pipeline: its round trips per decision times its decisions
// is its calls, give or take the reported figure's rounding, plus at most two
// per worker for connections the pool opens during the run (HELLO, CLIENT
// SETINFO go through the same counting hook; seen: 2 in 289 calls).
func pipelinedTrips(t *testing.T, out string, workers int) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^(.*pipelines of \d+): (\d+) decisions \((\d+) calls of \d+\).* ([0-9.]+) round trips,`)
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseFloat(m[2], 64)
		calls, _ := strconv.ParseFloat(m[3], 64)
		per, _ := strconv.ParseFloat(m[4], 64)
		trips, slack := per*n, 0.00005*n+0.5 // the figure has 4 decimals
		if trips < calls-slack || trips > calls+float64(2*workers)+slack {
			t.Errorf("%s: %.4f round trips per decision x %.0f decisions = %.1f round trips for %.0f pipelines, want one per pipeline (+ at most %d for new connections)",
				m[1], per, n, trips, calls, 2*workers)
		}
	}
}

// keysLeft counts the keys matching pattern on the server at addr.
func keysLeft(t *testing.T, addr, pattern string) int {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	n := 0
	iter := c.Scan(context.Background(), 0, pattern, 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
