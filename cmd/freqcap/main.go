// Command freqcap is the freqcap binary: the support console, the
// decision server, the load generator, the server capability report and a
// health probe for containers.
//
//	freqcap console [--demo] [SERVER]
//	freqcap serve   [SERVER] [--token name:secret:grant…]
//	freqcap bench   SERVER [-workers 64 -duration 10s …]
//	freqcap detect  SERVER
//	freqcap probe   URL
//	freqcap policy  apply|diff|history|show|rollback … SERVER
//	freqcap override set|list|delete … SERVER
//	freqcap person  link|unlink|show|zone … SERVER
//
// where SERVER is --redis ADDR, --cluster ADDR,… or --sentinel ADDR,…
// --master NAME, with --user and --password (or $FREQCAP_REDIS_PASSWORD)
// when the server wants them.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	_ "time/tzdata" // calendar rules name zones; containers may lack zoneinfo

	goredis "github.com/redis/go-redis/v9"
)

const usage = `freqcap — frequency capping and rate limiting on Redis and Tair

Usage:
  freqcap console [flags]   serve the support console and JSON API
  freqcap serve [flags]     serve decisions over gRPC and HTTP/JSON
  freqcap bench [flags]     run a load test against a backend
  freqcap detect [flags]    report what a Redis server or cluster can do
  freqcap probe URL         exit 0 if URL answers 2xx (a container health check)
  freqcap policy …          apply, diff, list (history), show or roll back versions of the policy store
  freqcap override …        set, list or delete per-person overrides
  freqcap person …          link identities to a person, unlink them, show a person, store its zone

A Redis deployment is named by --redis ADDR, --cluster ADDR,… or
--sentinel ADDR,… --master NAME (and --user, --password or
$FREQCAP_REDIS_PASSWORD). Run "freqcap <command> -h" for a command's flags.
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "freqcap:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	// go-redis's own log lines are not printed raw: the console routes
	// them through its log limiter once connected (serveConsole), and
	// bench and detect report failures themselves.
	goredis.SetLogger(quietRedis{})
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "console":
		return runConsole(args[1:])
	case "serve":
		return runServe(args[1:])
	case "bench":
		return runBench(args[1:])
	case "detect":
		return runDetect(args[1:])
	case "probe":
		return runProbe(args[1:])
	case "policy":
		return runPolicy(args[1:])
	case "override":
		return runOverride(args[1:])
	case "person":
		return runPerson(args[1:])
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
