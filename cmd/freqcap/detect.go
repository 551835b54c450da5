package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/freqcap/freqcap/backends/capability"
	goredis "github.com/redis/go-redis/v9"
)

// runDetect prints what a server or cluster can do for freqcap and which
// strategy each algorithm would use (backends/capability).
func runDetect(args []string) error {
	fs := flag.NewFlagSet("detect", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: freqcap detect --redis ADDR | --cluster ADDR,… [flags]\n\nProbes every master for TairHash, redis-cell, native hash-field expiry and\nscripting, and prints the strategy chosen for each algorithm, and why.\n\nFlags:")
		fs.PrintDefaults()
	}
	addr := fs.String("redis", "", "address of a Redis-compatible server or proxy (host:port)")
	cluster := fs.String("cluster", "", "comma-separated addresses of Redis Cluster nodes")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	forceLua := fs.Bool("force-plain-lua", false, "report as if configured to use plain Lua only")
	forbid := fs.String("forbid", "", "comma-separated features never to use: tairhash, redis-cell, hfe")
	username := fs.String("user", "", "ACL user name")
	password := fs.String("password", os.Getenv("FREQCAP_REDIS_PASSWORD"), "password (default $FREQCAP_REDIS_PASSWORD)")
	probeKey := fs.String("probe-key", "", "key the scripting probe names on a standalone server (default fc:{probe}; never read or written)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("detect: unexpected argument %q", fs.Arg(0))
	}
	if (*addr == "") == (*cluster == "") {
		fs.Usage()
		return errors.New("detect: give exactly one of --redis and --cluster")
	}

	cfg := capability.Config{ForcePlainLua: *forceLua, ProbeKey: *probeKey}
	for _, s := range strings.Split(*forbid, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		f, err := capability.ParseFeature(s)
		if err != nil {
			return fmt.Errorf("detect: --forbid: %w", err)
		}
		cfg.Forbid = append(cfg.Forbid, f)
	}

	var c goredis.UniversalClient
	if *cluster != "" {
		var addrs []string
		for _, a := range strings.Split(*cluster, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		c = goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs: addrs, Username: *username, Password: *password,
			MaxRetries: -1, DisableIdentity: true,
		})
	} else {
		c = goredis.NewClient(&goredis.Options{
			Addr: *addr, Username: *username, Password: *password,
			MaxRetries: -1, DisableIdentity: true,
		})
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
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
