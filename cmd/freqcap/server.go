package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// serverFlags name a Redis deployment: one standalone server, a cluster,
// or a master found through Sentinel. console, bench and detect share them.
type serverFlags struct {
	redis, cluster, sentinel, master string
	user, password                   string
}

// register adds the flags to fs.
func (s *serverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.redis, "redis", "", "standalone Redis `ADDR` (host:port)")
	fs.StringVar(&s.cluster, "cluster", "", "Redis Cluster seed `ADDRS`, comma-separated")
	fs.StringVar(&s.sentinel, "sentinel", "", "Sentinel `ADDRS`, comma-separated (with --master)")
	fs.StringVar(&s.master, "master", "", "with --sentinel: the `NAME` of the master the Sentinels monitor")
	fs.StringVar(&s.user, "user", "", "Redis ACL user `NAME`")
	// The environment is read in options, not shown as the flag's default
	// (help output would print the password).
	fs.StringVar(&s.password, "password", "", "Redis password (default $FREQCAP_REDIS_PASSWORD; prefer the environment: flags show up in ps)")
}

// given reports whether a deployment was named.
func (s serverFlags) given() bool { return s.redis != "" || s.cluster != "" || s.sentinel != "" }

// check validates the flags: at most one deployment, named completely.
func (s serverFlags) check() error {
	n := 0
	for _, v := range []string{s.redis, s.cluster, s.sentinel} {
		if v != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return errors.New("give one of --redis, --cluster and --sentinel")
	case s.cluster != "" && len(splitAddrs(s.cluster)) == 0:
		return errors.New("--cluster: no addresses")
	case s.sentinel != "" && len(splitAddrs(s.sentinel)) == 0:
		return errors.New("--sentinel: no addresses")
	case s.sentinel != "" && s.master == "":
		return errors.New("--sentinel needs --master NAME")
	case s.master != "" && s.sentinel == "":
		return errors.New("--master is for --sentinel")
	}
	return nil
}

// options returns the client options for the deployment, with the
// backend's settings (redis.NewClientOptions: no client retries).
func (s serverFlags) options() *goredis.UniversalOptions {
	var o *goredis.UniversalOptions
	switch {
	case s.cluster != "":
		o = redis.NewClientOptions(splitAddrs(s.cluster)...)
		o.IsClusterMode = true
	case s.sentinel != "":
		o = redis.NewClientOptions(splitAddrs(s.sentinel)...)
		o.MasterName = s.master
	default:
		o = redis.NewClientOptions(s.redis)
	}
	o.Username, o.Password = s.user, s.password
	if o.Password == "" {
		o.Password = os.Getenv("FREQCAP_REDIS_PASSWORD")
	}
	return o
}

// describe names the deployment for reports.
func (s serverFlags) describe() string {
	switch {
	case s.cluster != "":
		return "cluster " + strings.Join(splitAddrs(s.cluster), ",")
	case s.sentinel != "":
		return fmt.Sprintf("master %q via Sentinel %s", s.master, strings.Join(splitAddrs(s.sentinel), ","))
	}
	return s.redis
}

// splitAddrs splits a comma-separated list (of addresses, or names),
// dropping blanks.
func splitAddrs(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// unexpectedArg is the error for the first argument fs left unparsed in
// args. It names the argument by its position, never by its text, which
// may be a secret (a second credential given to one flag, a password
// with a space).
func unexpectedArg(cmd string, args []string, fs *flag.FlagSet, hint string) error {
	return fmt.Errorf("%s: unexpected argument #%d after %q (not shown: it may hold a secret); %s", cmd, len(args)-fs.NArg()+1, cmd, hint)
}

// parseForbid parses a --forbid list: comma-separated features never to
// use (tairhash, redis-cell, hfe).
func parseForbid(list string) ([]capability.Feature, error) {
	var out []capability.Feature
	for _, s := range splitAddrs(list) {
		f, err := capability.ParseFeature(s)
		if err != nil {
			return nil, fmt.Errorf("--forbid: %w", err)
		}
		out = append(out, f)
	}
	return out, nil
}

// errAuthFailed is returned when the server refuses the credentials.
var errAuthFailed = errors.New("authentication failed: the server refused the user name or password (--user, --password or $FREQCAP_REDIS_PASSWORD)")

// unreachableError says that a deployment could not be reached at all:
// where, and why in a few words; it wraps the client's error.
type unreachableError struct {
	where string // "at host:port", "cluster at a,b", …
	err   error
}

func (e *unreachableError) Error() string {
	var errno syscall.Errno
	var dns *net.DNSError
	var ne net.Error
	why := e.err.Error()
	switch {
	case errors.As(e.err, &dns):
		why = "cannot resolve " + dns.Name + ": " + dns.Err
	case errors.Is(e.err, context.DeadlineExceeded), errors.As(e.err, &ne) && ne.Timeout():
		why = "no answer in time"
	case errors.As(e.err, &errno):
		why = errno.Error()
	}
	return "cannot reach Redis " + e.where + ": " + why
}

func (e *unreachableError) Unwrap() error { return e.err }

// where names the deployment for an error: "at host:port", "cluster at
// a,b", or `master "m" via Sentinel at a,b`.
func (s serverFlags) where() string {
	switch {
	case s.cluster != "":
		return "cluster at " + strings.Join(splitAddrs(s.cluster), ",")
	case s.sentinel != "":
		return fmt.Sprintf("master %q via Sentinel at %s", s.master, strings.Join(splitAddrs(s.sentinel), ","))
	}
	return "at " + s.redis
}

// connect sends one PING, so that the commands fail at once, in one
// line, when the deployment cannot be used: a PING with no reply at all
// (a refused or timed-out connection, an unknown host, no Sentinel
// answering) reads "cannot reach Redis at …: connection refused", and a
// wrong password or a missing one "authentication failed" (instead of
// whatever the first real command makes of a connection that could not
// be set up: the capability probe used to report "COMMAND INFO:
// unexpected reply <nil>"). Other replies are left to the caller's
// first real command, which reports them with more context.
func connect(ctx context.Context, c goredis.UniversalClient, s serverFlags) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := c.Ping(ctx).Err()
	var reply goredis.Error
	switch {
	case err == nil:
		return nil
	case isAuthError(err):
		return fmt.Errorf("%w: %w", errAuthFailed, err)
	case !errors.As(err, &reply):
		return &unreachableError{where: s.where(), err: err}
	}
	return nil
}

// quietRedis is go-redis's logger until a command routes its lines
// elsewhere: the commands report failures themselves, in one line, and
// go-redis's own ("pool.go:…: failed to dial after 5 attempts", once per
// command tried) would only bury it.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// isAuthError reports whether err is the server's refusal of the
// connection's credentials. Redis says so only in text: WRONGPASS (Redis
// 6+, ACL), NOAUTH (a password is required), "ERR invalid password"
// (before 6), "ERR AUTH <password> called without any password
// configured" (a password given to a server without one).
func isAuthError(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") ||
		strings.HasPrefix(msg, "ERR invalid password") || strings.HasPrefix(msg, "ERR invalid username-password") ||
		strings.HasPrefix(msg, "ERR AUTH")
}

// describeBackend asks lim what its backend is (at most 5 s) and logs
// it, as the console and serve do at start; a backend that cannot
// describe itself is not an error.
func describeBackend(ctx context.Context, lim *sdk.Limiter, log *slog.Logger) (driver.Description, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	desc, err := lim.Admin().Describe(ctx)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return desc, err
	}
	log.Info("backend", "name", desc.Name, "target", desc.Target, "strategies", strategies(desc))
	return desc, nil
}
