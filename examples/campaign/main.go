// Command campaign is a push campaign's fan-out under the seed caps: the
// recipients are decided in batches (TakeBatch: one pipeline per Redis
// master per batch), the campaign's attempts carry idempotency keys so
// that a batch retried after a timeout consumes nothing twice, and a
// hot-deny cache answers recipients already capped without asking the
// backend (for attempts without an idempotency key: those with one always
// go to the backend, which records their first decision).
//
//	go run ./examples/campaign                              # embedded memory backend
//	go run ./examples/campaign -redis 127.0.0.1:6379         # Redis (or -cluster A,B,C)
//	FREQCAP_TOKEN=… go run ./examples/campaign -serve http://127.0.0.1:8091   # through freqcap serve
//
// Each run uses its own key prefix, so runs never see each other's counts
// (-prefix sets one). The limiter has a recorder (fleet.NewRecorder), which
// counts the decisions and flushes them to the backend under the key
// prefix -stats-prefix (default "fc", the console's): a console started
// beside the campaign on the same Redis (freqcap console --redis ADDR)
// charts them on its overview. Give -prefix fc too, and its subject pages
// show the campaign's recipients.
//
// With -serve URL the campaign sends through a freqcap serve (for
// instance a replica of docker-compose.yml's) instead of deciding
// in-process: the same code, with client.New in place of sdk.New (run
// takes a client.Limiter, which both satisfy). The caller's secret comes
// from $FREQCAP_TOKEN (a credential with take and inspect on push); the
// server's policy "push" decides (its caps are the seed's; its hot-deny
// cache, if any, is the server's), its keys live under the server's
// --prefix and the server's recorder counts the decisions. So that runs
// do not see each other's counts there, the recipients' ids carry the
// run's -prefix ("campaign-…/user-0").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
)

// options are the command's flags.
type options struct {
	addr, cluster, serve string
	recipients           int
	prefix, statsPrefix  string
}

// parseFlags parses args (without the program name); -h prints each
// flag with its default once.
func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("campaign", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.addr, "redis", "", "standalone Redis `ADDR` (default: the embedded memory backend)")
	fs.StringVar(&o.cluster, "cluster", "", "Redis Cluster seed `ADDRS`, comma-separated")
	fs.StringVar(&o.serve, "serve", "", "send through the freqcap serve at `URL` (e.g. http://127.0.0.1:8091), with the secret in $FREQCAP_TOKEN")
	fs.IntVar(&o.recipients, "recipients", 2000, "recipients in the campaign")
	// The default is made after parsing, so that -h shows what it is
	// rather than one run's random value beside it.
	fs.StringVar(&o.prefix, "prefix", "", "key `PREFIX` of the decisions (default: campaign-<random>, one of its own per run; through serve, the recipients' ids start with it)")
	fs.StringVar(&o.statsPrefix, "stats-prefix", "fc", "key `PREFIX` of the recorder's statistics (a console reads those of its own --prefix)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	given := 0
	for _, f := range []string{o.addr, o.cluster, o.serve} {
		if f != "" {
			given++
		}
	}
	switch {
	case fs.NArg() > 0:
		return o, errors.New("arguments after the flags are not accepted")
	case given > 1:
		return o, errors.New("give one of -redis, -cluster and -serve")
	case o.recipients < 1:
		return o, errors.New("-recipients must be at least 1")
	}
	if o.prefix == "" {
		o.prefix = "campaign-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return o, nil
}

func main() {
	if err := campaign(os.Args[1:], os.Getenv, os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "campaign:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// campaign parses args, builds the limiter they name (reading the serve
// token with getenv) and runs the campaign, writing to w.
func campaign(args []string, getenv func(string) string, w io.Writer) error {
	o, err := parseFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if o.serve != "" {
		// The server decides, records and keeps the keys; the same
		// run, through client.New instead of sdk.New.
		// Tries: 1: this sender gives its own idempotency keys where it
		// wants them (msg-1's retry) and none elsewhere, so that msg-3's
		// keyless resend is answered by the server's hot-deny cache, as
		// in-process; the client's default would give every attempt a
		// key (client.Retry), and keyed attempts skip that cache.
		lim := client.New(o.serve, &client.Options{Token: getenv("FREQCAP_TOKEN"), Timeout: 30 * time.Second, Retry: &client.Retry{Tries: 1}})
		_, err := run(context.Background(), w, lim, lim.Admin(), o.recipients, o.prefix+"/")
		return err
	}

	var (
		lim *sdk.Limiter
		rec *fleet.Recorder
	)
	ropts := &fleet.Options{Prefix: o.statsPrefix}
	switch {
	case o.addr != "" || o.cluster != "":
		co := redis.NewClientOptions(o.addr)
		if o.cluster != "" {
			co = redis.NewClientOptions(strings.Split(o.cluster, ",")...)
			co.IsClusterMode = true
		}
		c := goredis.NewUniversalClient(co)
		defer c.Close()
		b := redis.New(c, nil)
		if rec, err = fleet.NewRecorder(b, ropts); err == nil {
			lim = sdk.New(b, sdk.WithPrefix(o.prefix), sdk.WithTimeout(10*time.Second), sdk.WithObserver(rec.Observe))
		}
	default:
		b := memory.New(nil)
		if rec, err = fleet.NewRecorder(b, ropts); err == nil {
			lim = sdk.New(b, sdk.WithPrefix(o.prefix), sdk.WithObserver(rec.Observe))
		}
	}
	if err != nil {
		return err
	}
	_, err = run(context.Background(), w, lim, lim.Admin(), o.recipients, "")
	// Close flushes what the recorder counted since its last flush.
	if cerr := rec.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("recorder: %w", cerr)
	}
	return err
}

// batchSize is the number of recipients per TakeBatch call.
const batchSize = 500

// tally counts one send's outcomes.
type tally struct {
	allowed, denied, replayed, cached, errs int
	deniedBy                                map[string]int
}

// summary is what run observed, for the example's test.
type summary struct {
	first, retry, second, third, again tally
	used                               map[string]int64 // recipient 0's counts after the campaign
	lastDenial                         string           // the rule of recipient 0's newest denial
}

// pushPolicy is the seed caps of a push platform, with a hot-deny cache.
func pushPolicy() (*sdk.Policy, error) {
	return sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("recv-24h", 50, 24*time.Hour).By("user"),
		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
		sdk.SlidingWindow("content-59m", 5, 59*time.Minute).By("user", "content"),
	}, sdk.WithHotDenyCache(100_000))
}

// run sends one content three times to n recipients, retries the first
// send as after a timeout, and tries the third once more, printing what
// each step decided. lim decides in-process (*sdk.Limiter) or through
// freqcap serve (*client.Client), and adm, its Admin,
// inspects; recipients' ids start with users.
func run(ctx context.Context, w io.Writer, lim client.Limiter, adm client.Administrator, n int, users string) (summary, error) {
	push, err := pushPolicy()
	if err != nil {
		return summary{}, err
	}
	content := sdk.Fingerprint("Spring sale: 20% off everything until midnight")
	user := func(i int) string { return users + "user-" + strconv.Itoa(i) }

	// send decides the content for every recipient, in batches; with
	// idem, the attempt for recipient i is named "<step>/<user>".
	send := func(step string, idem bool) (tally, error) {
		t := tally{deniedBy: map[string]int{}}
		for lo := 0; lo < n; lo += batchSize {
			as := make([]sdk.Attempt, 0, batchSize)
			for i := lo; i < min(n, lo+batchSize); i++ {
				a := sdk.Attempt{Subject: sdk.Subject{"user": user(i), "content": content}}
				if idem {
					a.IdempotencyKey = "spring-sale/" + step + "/" + user(i)
				}
				as = append(as, a)
			}
			for _, r := range lim.TakeBatch(ctx, push, as) {
				d := r.Decision
				switch {
				case r.Err != nil:
					t.errs++
					if t.errs == 1 {
						err = r.Err
					}
					continue
				case d.Allowed:
					t.allowed++
				default:
					t.denied++
					for _, rule := range d.Denied {
						t.deniedBy[rule]++
					}
				}
				if d.Replayed {
					t.replayed++
				}
				if d.Cached {
					t.cached++
				}
			}
		}
		if t.errs > 0 {
			return t, fmt.Errorf("%s: %d attempts failed, the first: %w", step, t.errs, err)
		}
		return t, nil
	}
	line := func(what string, t tally) {
		fmt.Fprintf(w, "%-58s allowed %5d  denied %5d  replayed %5d  from the hot-deny cache %5d", what, t.allowed, t.denied, t.replayed, t.cached)
		rules := slices.Sorted(maps.Keys(t.deniedBy))
		for _, rule := range rules {
			fmt.Fprintf(w, "  (%d by %s)", t.deniedBy[rule], rule)
		}
		fmt.Fprintln(w)
	}

	var s summary
	steps := []struct {
		what, step string
		idem       bool
		into       *tally
	}{
		{"msg-1: the sale, to every recipient", "msg-1", true, &s.first},
		{"msg-1 again: the same batches retried after a timeout", "msg-1", true, &s.retry},
		{"msg-2: a reminder with the same text", "msg-2", true, &s.second},
		{"msg-3: a third copy within 59 s", "msg-3", true, &s.third},
		{"msg-3 again, from a sender without idempotency keys", "msg-3b", false, &s.again},
	}
	fmt.Fprintf(w, "campaign: %d recipients, batches of %d, policy %q\n", n, batchSize, push.Name())
	for _, st := range steps {
		t, err := send(st.step, st.idem)
		if err != nil {
			return s, err
		}
		*st.into = t
		line(st.what, t)
	}

	in, err := adm.Inspect(ctx, push, sdk.Subject{"user": user(0), "content": content})
	if err != nil {
		return s, err
	}
	s.used = map[string]int64{}
	var parts []string
	for _, r := range in.Rules {
		s.used[r.Rule] = r.Used
		parts = append(parts, fmt.Sprintf("%s %d/%d", r.Rule, r.Used, r.Limit))
	}
	if len(in.Denials) == 0 {
		return s, errors.New("inspect: no denial in the trail of " + user(0))
	}
	s.lastDenial = in.Denials[0].Rule
	fmt.Fprintf(w, "%s now: %s; newest denial by %s\n", user(0), strings.Join(parts, ", "), s.lastDenial)
	return s, nil
}
