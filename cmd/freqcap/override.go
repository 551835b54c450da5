package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/freqcap/freqcap/internal/duration"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

const overrideUsage = `Usage:
  freqcap override set POLICY DIM=VALUE… -kind exempt|block|limit [-counted] [-limit RULE=N]… [-until TIME] -reason TEXT [-by NAME] SERVER
  freqcap override list POLICY DIM=VALUE… SERVER
  freqcap override delete POLICY DIM=VALUE… -id N SERVER

Per-person overrides of a policy that reads them (overrides: true). The
subject is given by its shard dimensions (DIM=VALUE, e.g. user=u42); the
policy comes from the policy store (or --policies FILE). -until is an
RFC 3339 time or a duration from now (90m, 7d); without it the override
lasts until deleted. Flags may come before or after the arguments.
`

// overrideFlags are what every override subcommand takes.
type overrideFlags struct {
	backendFlags
	kind    string
	counted bool
	limits  multiFlag
	until   string
	auditFlags
	id       int64
	policies string
}

// auditFlags are the -reason and -by of a change audited with the person
// (override set, person link, unlink and zone).
type auditFlags struct{ reason, by string }

func (a *auditFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.reason, "reason", "", "why (audited with the person; required)")
	fs.StringVar(&a.by, "by", defaultBy(), "who makes the change")
}

// check refuses a change without a reason.
func (a auditFlags) check() error {
	if strings.TrimSpace(a.reason) == "" {
		return errors.New("give -reason (it is audited with the person)")
	}
	return nil
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// runOverride runs "freqcap override …".
func runOverride(args []string) error {
	return overrideMain(context.Background(), args, os.Stdout)
}

// overrideMain runs an override subcommand, printing to out.
func overrideMain(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || (args[0] != "set" && args[0] != "list" && args[0] != "delete") {
		fmt.Fprint(os.Stderr, overrideUsage)
		if len(args) == 0 {
			return errors.New("override: give set, list or delete")
		}
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			return flag.ErrHelp
		}
		return fmt.Errorf("override: unknown subcommand %q (want set, list or delete)", args[0])
	}
	sub := args[0]
	fs := flag.NewFlagSet("override "+sub, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), overrideUsage+"\nFlags:\n"); fs.PrintDefaults() }
	var f overrideFlags
	f.backendFlags.register(fs)
	fs.StringVar(&f.policies, "policies", "", "read the policy from this policy `FILE` instead of the policy store")
	if sub == "set" {
		fs.StringVar(&f.kind, "kind", "", "exempt (never denied), block (always denied) or limit (other limits)")
		fs.BoolVar(&f.counted, "counted", false, "exempt: still count the attempts in the rules")
		fs.Var(&f.limits, "limit", "limit: `RULE=N`, the limit that replaces RULE's (repeat for several rules)")
		fs.StringVar(&f.until, "until", "", "end: an RFC 3339 `TIME` or a duration from now (90m, 7d); default: until deleted")
		f.auditFlags.register(fs)
	}
	if sub == "delete" {
		fs.Int64Var(&f.id, "id", 0, "the override's `ID` (see override list)")
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		fs.Usage()
		return fmt.Errorf("override %s: give the policy and the subject (DIM=VALUE…)", sub)
	}
	name := pos[0]
	subject, err := parseSubject(pos[1:])
	if err != nil {
		return fmt.Errorf("override %s: %w", sub, err)
	}
	lim, be, closeLim, err := f.backend(ctx, "override "+sub)
	if err != nil {
		return err
	}
	defer closeLim()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	p, err := findPolicy(ctx, f.store(be), f.policies, name)
	if err != nil {
		return fmt.Errorf("override %s: %w", sub, err)
	}
	switch sub {
	case "set":
		o, err := f.override(time.Now())
		if err != nil {
			return fmt.Errorf("override set: %w", err)
		}
		got, err := lim.Admin().SetOverride(ctx, p, subject, o)
		if err != nil {
			return fmt.Errorf("override set: %w", err)
		}
		fmt.Fprintf(out, "override #%d set: %s\n", got.ID, describeOverride(got))
		return nil
	case "delete":
		if f.id <= 0 {
			return errors.New("override delete: give -id N (see override list)")
		}
		if err := lim.Admin().DeleteOverride(ctx, p, subject, f.id); err != nil {
			return fmt.Errorf("override delete: %w", err)
		}
		fmt.Fprintf(out, "override #%d deleted\n", f.id)
		return nil
	}
	list, err := lim.Admin().Overrides(ctx, p, subject)
	if err != nil {
		return fmt.Errorf("override list: %w", err)
	}
	if len(list) == 0 {
		fmt.Fprintln(out, "no overrides")
		return nil
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tUNTIL\tBY\tCREATED\tREASON")
	for _, o := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", o.ID, kindText(o), untilText(o.Until), o.By, o.Created.UTC().Format(time.RFC3339), o.Reason)
	}
	return tw.Flush()
}

// override builds the override the set flags describe, at now.
func (f overrideFlags) override(now time.Time) (driver.Override, error) {
	var o driver.Override
	k, ok := driver.ParseOverrideKind(f.kind)
	switch {
	case f.kind == "":
		return o, errors.New("give -kind exempt, block or limit")
	case !ok:
		return o, fmt.Errorf("-kind must be exempt, block or limit, got %q", f.kind)
	}
	o.Kind = k
	if f.counted && o.Kind != driver.Exempt {
		return o, errors.New("-counted is for -kind exempt")
	}
	o.Counted = f.counted
	if len(f.limits) > 0 && o.Kind != driver.Limit {
		return o, errors.New("-limit is for -kind limit")
	}
	if o.Kind == driver.Limit && len(f.limits) == 0 {
		return o, errors.New("-kind limit needs -limit RULE=N")
	}
	for _, l := range f.limits {
		rule, n, ok := strings.Cut(l, "=")
		v, err := strconv.ParseInt(n, 10, 64)
		if !ok || rule == "" || err != nil {
			return o, fmt.Errorf("-limit %q: want RULE=N, N an integer", l)
		}
		if o.Limits == nil {
			o.Limits = map[string]int64{}
		}
		o.Limits[rule] = v
	}
	if f.until != "" {
		t, err := parseUntil(f.until, now)
		if err != nil {
			return o, err
		}
		o.Until = t
	}
	if err := f.auditFlags.check(); err != nil {
		return o, err
	}
	o.Reason, o.By = f.reason, f.by
	return o, nil
}

// parseUntil reads an RFC 3339 time or a duration from now (a Go
// duration, or whole days: 7d).
func parseUntil(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := duration.Parse(s); err == nil && d > 0 {
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("-until %q: want an RFC 3339 time (2026-12-01T00:00:00Z) or a positive duration (90m, 7d)", s)
}

// parseSubject reads DIM=VALUE arguments. Values never appear in errors.
func parseSubject(args []string) (sdk.Subject, error) {
	s := sdk.Subject{}
	for i, a := range args {
		d, v, ok := strings.Cut(a, "=")
		if !ok || d == "" {
			return nil, fmt.Errorf("subject argument #%d: want DIM=VALUE", i+1)
		}
		if _, dup := s[d]; dup {
			return nil, fmt.Errorf("subject: dimension %q given twice", d)
		}
		s[d] = v
	}
	return s, nil
}

func kindText(o driver.Override) string {
	switch o.Kind {
	case driver.Exempt:
		if o.Counted {
			return "exempt (counted)"
		}
		return "exempt"
	case driver.Limit:
		names := make([]string, 0, len(o.Limits))
		for r := range o.Limits {
			names = append(names, r)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, r := range names {
			parts[i] = fmt.Sprintf("%s=%d", r, o.Limits[r])
		}
		return "limit " + strings.Join(parts, ",")
	}
	return o.Kind.String()
}

func untilText(t time.Time) string {
	if t.IsZero() {
		return "until deleted"
	}
	return t.UTC().Format(time.RFC3339)
}

func describeOverride(o driver.Override) string {
	return fmt.Sprintf("%s, %s, by %q: %s", kindText(o), untilText(o.Until), o.By, o.Reason)
}
