package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/fleet/whatif"
	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policyfile"
	"github.com/freqcap/freqcap/sdk/policystore"
)

const policyUsage = `Usage:
  freqcap policy apply FILE [-by NAME] [-reason TEXT] [-yes] [-rekey] SERVER
  freqcap policy diff FILE [-whatif=false] SERVER
  freqcap policy history [-n N] SERVER
  freqcap policy show [N] SERVER
  freqcap policy rollback N [-by NAME] [-reason TEXT] [-yes] [-rekey] SERVER

The policy store keeps every version of the policy file applied to a
deployment (one store per --prefix); every limiter that watches it
follows the current version within 2 s. apply and rollback print the plan
(what changes per rule, and what its counts carry) and apply it with -yes;
a plan that re-keys rules (their counts start afresh) also needs -rekey.
diff prints the plan only, and what it would have denied in the last hour
and 24 h, estimated from the traffic sample the deployment's recording
services keep (fleet/whatif). Flags may come before or after the arguments.
`

// backendFlags are the flags of the commands that act on a deployment's
// store: policy and override.
type backendFlags struct {
	server  serverFlags
	prefix  string
	timeout time.Duration
}

func (b *backendFlags) register(fs *flag.FlagSet) {
	b.server.register(fs)
	fs.StringVar(&b.prefix, "prefix", keyname.DefaultPrefix, "key prefix (one policy store per prefix; the console and serve read the same one)")
	fs.DurationVar(&b.timeout, "timeout", 10*time.Second, "give up after this long")
}

// limiter connects to the deployment the flags name (cmd names the
// command in errors) and returns a Limiter on it, and its closer.
func (b backendFlags) limiter(ctx context.Context, cmd string) (*sdk.Limiter, func(), error) {
	lim, _, closer, err := b.backend(ctx, cmd)
	return lim, closer, err
}

// store returns the policy store the flags name on be (b.backend's).
func (b backendFlags) store(be driver.Backend) *policystore.Store {
	return policystore.New(be, policystore.WithPrefix(b.prefix), policystore.WithTimeout(b.timeout))
}

// backend is limiter, also returning the backend.
func (b backendFlags) backend(ctx context.Context, cmd string) (*sdk.Limiter, driver.Backend, func(), error) {
	if err := b.server.check(); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	if !b.server.given() {
		return nil, nil, nil, fmt.Errorf("%s: give one of --redis, --cluster and --sentinel (the store lives in the deployment)", cmd)
	}
	if b.timeout <= 0 {
		return nil, nil, nil, fmt.Errorf("%s: --timeout must be positive", cmd)
	}
	c := goredis.NewUniversalClient(b.server.options())
	if err := connect(ctx, c, b.server); err != nil {
		c.Close()
		return nil, nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	be := redis.New(c, nil)
	lim := sdk.New(be, sdk.WithPrefix(b.prefix), sdk.WithTimeout(b.timeout))
	return lim, be, func() { c.Close() }, nil
}

// parseInterleaved parses fs's flags wherever they are among args and
// returns the other arguments, in order.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// defaultBy is who applies by default: $USER, else "cli".
func defaultBy() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "cli"
}

// findPolicy returns the policy named name: from the file when given,
// else from the store's version in force (the newest that loads).
func findPolicy(ctx context.Context, st *policystore.Store, file, name string) (*sdk.Policy, error) {
	var ps []*sdk.Policy
	var err error
	where := file
	if file != "" {
		ps, err = policyfile.LoadFile(file)
	} else {
		var h policystore.Head
		h, err = st.Head(ctx)
		switch {
		case err != nil:
		case h.Number == 0:
			return nil, errors.New("the policy store is empty: no policy version has been applied yet; apply a policy file first (freqcap policy apply FILE -yes), or give the policy's file with -policies FILE")
		case h.Loaded.Number == 0:
			return nil, fmt.Errorf("no version of the policy store loads (%v): apply a policy file (freqcap policy apply FILE -yes), or give the policy's file with -policies FILE", h.Unloadable[0].Err)
		default:
			where = fmt.Sprintf("version %d of the policy store", h.Loaded.Number)
			ps, err = h.Loaded.Policies()
		}
	}
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if p.Name() == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no policy %q in %s", name, where)
}

// runPolicy runs "freqcap policy …".
func runPolicy(args []string) error {
	return policyMain(context.Background(), args, os.Stdout)
}

// policyMain runs a policy subcommand, printing to out.
func policyMain(ctx context.Context, args []string, out io.Writer) error {
	subs := []string{"apply", "diff", "history", "show", "rollback"}
	if len(args) == 0 || !contains(subs, args[0]) {
		fmt.Fprint(os.Stderr, policyUsage)
		if len(args) == 0 {
			return errors.New("policy: give apply, diff, history, show or rollback")
		}
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			return flag.ErrHelp
		}
		return fmt.Errorf("policy: unknown subcommand %q (want apply, diff, history, show or rollback)", args[0])
	}
	sub := args[0]
	cmd := "policy " + sub
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), policyUsage+"\nFlags:\n"); fs.PrintDefaults() }
	var bf backendFlags
	bf.register(fs)
	var by, reason string
	var yes, rekey bool
	var n int
	if sub == "apply" || sub == "rollback" {
		fs.StringVar(&by, "by", defaultBy(), "who applies (recorded with the version)")
		fs.StringVar(&reason, "reason", "", "why (recorded with the version)")
		fs.BoolVar(&yes, "yes", false, "apply the plan (without it, only print it)")
		fs.BoolVar(&rekey, "rekey", false, "confirm a plan that re-keys rules: their counts start afresh")
	}
	if sub == "history" {
		fs.IntVar(&n, "n", 20, "show the `N` newest versions (0: all)")
	}
	var estimate bool
	if sub == "diff" {
		fs.BoolVar(&estimate, "whatif", true, "estimate from the recorded traffic sample what the plan would have denied in the last hour and 24 h (fleet/whatif)")
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	want := map[string]int{"apply": 1, "diff": 1, "history": 0, "show": -1, "rollback": 1}[sub]
	if (want >= 0 && len(pos) != want) || (want < 0 && len(pos) > 1) {
		fs.Usage()
		switch sub {
		case "apply", "diff":
			return fmt.Errorf("%s: give one policy FILE", cmd)
		case "rollback":
			return fmt.Errorf("%s: give the version N to roll back to", cmd)
		}
		return fmt.Errorf("%s: unexpected argument #%d", cmd, want+2)
	}
	var src []byte
	var version int64
	switch sub {
	case "apply", "diff":
		if src, err = os.ReadFile(pos[0]); err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
	case "show", "rollback":
		if len(pos) == 1 {
			if version, err = strconv.ParseInt(pos[0], 10, 64); err != nil || version <= 0 {
				return fmt.Errorf("%s: version %q: want a number >= 1", cmd, pos[0])
			}
		}
	}
	_, be, closeLim, err := bf.backend(ctx, cmd)
	if err != nil {
		return err
	}
	defer closeLim()
	ctx, cancel := context.WithTimeout(ctx, bf.timeout)
	defer cancel()
	store := bf.store(be)
	switch sub {
	case "history":
		hs, err := store.History(ctx, n)
		if err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
		if len(hs) == 0 {
			fmt.Fprintln(out, "the policy store is empty")
			return nil
		}
		tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tAPPLIED\tBY\tREASON\tPOLICIES")
		for _, h := range hs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", h.Number, h.At.UTC().Format(time.RFC3339), h.By, h.Reason, policyNames(h))
		}
		return tw.Flush()
	case "show":
		v, err := store.Version(ctx, version)
		if err != nil {
			return fmt.Errorf("%s: %w%s", cmd, err, storeHint(err, version == 0))
		}
		fmt.Fprintf(out, "# version %d, applied %s by %s: %s\n", v.Number, v.At.UTC().Format(time.RFC3339), v.By, v.Reason)
		_, err = out.Write(v.Source)
		return err
	}
	var plan *policystore.Plan
	if sub == "rollback" {
		plan, err = store.PlanRollback(ctx, version)
		if reason == "" {
			reason = fmt.Sprintf("rollback to version %d", version)
		}
	} else {
		plan, err = store.Plan(ctx, src)
	}
	if err != nil {
		if sub == "apply" || sub == "diff" {
			return fmt.Errorf("%s: %s: %w", cmd, pos[0], err)
		}
		return fmt.Errorf("%s: %w%s", cmd, err, storeHint(err, false))
	}
	fmt.Fprint(out, plan.String())
	if sub == "diff" {
		if estimate {
			whatIf(ctx, out, store, be, bf, plan)
		}
		return nil
	}
	if !plan.Changed() {
		fmt.Fprintln(out, "nothing to apply")
		return nil
	}
	if !yes {
		fmt.Fprintln(out, "not applied: run again with -yes to apply")
		return nil
	}
	plan.ConfirmRekey = rekey
	v, err := store.Apply(ctx, plan, by, reason)
	if errors.Is(err, policystore.ErrRekeyNotConfirmed) {
		return fmt.Errorf("%s: %w: run again with -rekey to confirm that their counts start afresh", cmd, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	fmt.Fprintf(out, "applied version %d at %s\n", v.Number, v.At.UTC().Format(time.RFC3339))
	return nil
}

// whatIf prints the estimate of what plan would have denied beside the
// current version, from the traffic sample the deployment's Recorders
// keep; what keeps it from being made is printed instead (the plan
// stands).
func whatIf(ctx context.Context, out io.Writer, store *policystore.Store, be driver.Backend, bf backendFlags, plan *policystore.Plan) {
	var current []*sdk.Policy
	if plan.Against > 0 {
		v, err := store.Version(ctx, plan.Against)
		if err == nil {
			current, err = v.Policies()
		}
		if err != nil {
			fmt.Fprintf(out, "what-if: no estimate: version %d: %v\n", plan.Against, err)
			return
		}
	}
	rd, err := fleet.NewReader(be, &fleet.Options{Prefix: bf.prefix, Timeout: bf.timeout})
	if err != nil {
		fmt.Fprintf(out, "what-if: no estimate: %v\n", err)
		return
	}
	rep, err := whatif.Estimate(ctx, rd, current, plan.Policies)
	if err != nil {
		fmt.Fprintf(out, "what-if: no estimate: %v\n", err)
		return
	}
	fmt.Fprint(out, rep.String())
}

// storeHint says what to do about a store error: a version that does
// not load, an empty store (when current: the error is about the current
// version).
func storeHint(err error, current bool) string {
	switch {
	case errors.Is(err, policystore.ErrUnreadableVersion):
		return " (apply a policy file, or roll back to a version that loads: freqcap policy history lists them; plans are made against the newest one that loads, so its rules keep their counts)"
	case current && errors.Is(err, policystore.ErrNoPolicyVersion):
		return " (apply a policy file first: freqcap policy apply FILE -yes)"
	}
	return ""
}

// policyNames lists the policies of a history entry.
func policyNames(h policystore.HistoryEntry) string {
	if h.Err != nil {
		return "(unreadable: " + h.Err.Error() + ")"
	}
	ps, err := h.Policies()
	if err != nil {
		return "(does not load: " + err.Error() + ")"
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name()
	}
	return strings.Join(names, ",")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
