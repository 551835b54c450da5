package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
)

// runDetect prints what a server or cluster can do for freqcap, which
// strategy each algorithm would use and where wide subjects' nested sets
// live (backends/redis/capability: Report.String, whose sentences the
// backend's Describe gives too).
func runDetect(args []string) error {
	fs := flag.NewFlagSet("detect", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: freqcap detect --redis ADDR | --cluster ADDR,… | --sentinel ADDR,… --master NAME [flags]\n\nProbes every master for TairHash, redis-cell, native hash-field expiry and\nscripting, and whether it is a replica (then it names the master and no\nstrategy runs), and prints the strategy chosen for each algorithm, and why,\nand where a wide subject's nested sets live past the root's size limit (the\nmode, how their fields expire, and why: as Describe says). It gives each\nmaster's maxmemory, maxmemory-policy and evicted_keys (INFO memory, INFO\nstats), and warns of a master that may evict freqcap's keys: any policy\nbut noeviction with a maxmemory (docs/DESIGN.md, \"Memory and eviction\").\n\nFlags:")
		fs.PrintDefaults()
	}
	var server serverFlags
	server.register(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	forceLua := fs.Bool("force-plain-lua", false, "report as if configured to use plain Lua only")
	modules := fs.Bool("module-strategies", false, "report as if configured to use the per-rule module strategies where usable (slower than plain Lua: docs/MODULES.md)")
	forbid := fs.String("forbid", "", "comma-separated features never to use: tairhash, redis-cell, hfe")
	probeKey := fs.String("probe-key", "", "key the scripting probe names on a standalone server (default fc:{probe}; never read or written)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return unexpectedArg("detect", args, fs, "every flag goes before any other argument")
	}
	if *timeout <= 0 {
		return errors.New("detect: --timeout must be positive")
	}
	if err := server.check(); err != nil {
		return fmt.Errorf("detect: %w", err)
	}
	if !server.given() {
		fs.Usage()
		return errors.New("detect: give one of --redis, --cluster and --sentinel")
	}
	fb, err := parseForbid(*forbid)
	if err != nil {
		return fmt.Errorf("detect: %w", err)
	}
	cfg := capability.Config{ForcePlainLua: *forceLua, ModuleStrategies: *modules, ProbeKey: *probeKey, Forbid: fb}

	// Probing only reads; go-redis's defaults (3 s reads) suit a slow
	// proxy better than the backend's tight per-decision timeouts, and no
	// CLIENT SETINFO is sent to servers that may not know it.
	o := server.options()
	o.ReadTimeout, o.WriteTimeout, o.DisableIdentity = 0, 0, true
	c := goredis.NewUniversalClient(o)
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := connect(ctx, c, server); err != nil {
		return fmt.Errorf("detect: %w", err)
	}
	r, err := capability.Probe(ctx, c, cfg)
	if err != nil {
		return fmt.Errorf("detect: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	_, err = fmt.Print(r.String())
	return err
}
