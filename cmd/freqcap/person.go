package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

const personUsage = `Usage:
  freqcap person link ID PERSON -reason TEXT [-by NAME] SERVER
  freqcap person unlink ID -reason TEXT [-by NAME] SERVER
  freqcap person show PERSON|ID SERVER
  freqcap person zone PERSON ZONE|none -reason TEXT [-by NAME] SERVER

One person, several identities: an identity (a device token, a phone
number, an e-mail address) linked to a person shares the person's caps;
an identity without a link is its own person. show finds the person of
an identity (or takes a person) and prints its identities, its stored
zone and its audit. zone stores the person's IANA time zone (none clears
it): its calendar rules and quiet hours use it when an attempt gives no
zone. Every change is audited with the person (-by, -reason). Flags may
come before or after the arguments.
`

// personFlags are what every person subcommand takes.
type personFlags struct {
	backendFlags
	auditFlags
}

// runPerson runs "freqcap person …".
func runPerson(args []string) error {
	return personMain(context.Background(), args, os.Stdout)
}

// personArgs is how many arguments each subcommand takes.
var personArgs = map[string]int{"link": 2, "unlink": 1, "show": 1, "zone": 2}

// personMain runs a person subcommand, printing to out.
func personMain(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || personArgs[args[0]] == 0 {
		fmt.Fprint(os.Stderr, personUsage)
		if len(args) == 0 {
			return errors.New("person: give link, unlink, show or zone")
		}
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			return flag.ErrHelp
		}
		return fmt.Errorf("person: unknown subcommand %q (want link, unlink, show or zone)", args[0])
	}
	sub := args[0]
	fs := flag.NewFlagSet("person "+sub, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), personUsage+"\nFlags:\n"); fs.PrintDefaults() }
	var f personFlags
	f.backendFlags.register(fs)
	if sub != "show" {
		f.auditFlags.register(fs)
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != personArgs[sub] {
		fs.Usage()
		return fmt.Errorf("person %s: want %d arguments, got %d", sub, personArgs[sub], len(pos))
	}
	if sub != "show" {
		if err := f.auditFlags.check(); err != nil {
			return fmt.Errorf("person %s: %w", sub, err)
		}
	}
	lim, closeLim, err := f.limiter(ctx, "person "+sub)
	if err != nil {
		return err
	}
	defer closeLim()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	ad := lim.Admin()
	switch sub {
	case "link":
		l, err := ad.Link(ctx, pos[0], pos[1], f.by, f.reason)
		if err != nil {
			return fmt.Errorf("person link: %w", err)
		}
		fmt.Fprintf(out, "linked %s to person %s (by %q: %s)\n", l.ID, l.Person, l.By, l.Reason)
	case "unlink":
		if err := ad.Unlink(ctx, pos[0], f.by, f.reason); err != nil {
			return fmt.Errorf("person unlink: %w", err)
		}
		fmt.Fprintf(out, "unlinked %s: it is its own person again\n", pos[0])
	case "zone":
		zone := pos[1]
		if zone == "none" {
			zone = ""
		}
		if err := ad.SetPersonZone(ctx, pos[0], zone, f.by, f.reason); err != nil {
			return fmt.Errorf("person zone: %w", err)
		}
		if zone == "" {
			fmt.Fprintf(out, "person %s: stored zone cleared\n", pos[0])
		} else {
			fmt.Fprintf(out, "person %s: stored zone %s\n", pos[0], zone)
		}
	case "show":
		return showPerson(ctx, ad, pos[0], out)
	}
	return nil
}

// showPerson prints the person of id (id itself when it has no link):
// its identities, its stored zone and its audit.
func showPerson(ctx context.Context, ad *sdk.Admin, id string, out io.Writer) error {
	person := id
	l, err := ad.LinkOf(ctx, id)
	switch {
	case err == nil:
		person = l.Person
		fmt.Fprintf(out, "%s is an identity of person %s\n", id, person)
	case !errors.Is(err, driver.ErrLinkNotFound):
		return fmt.Errorf("person show: %w", err)
	}
	p, err := ad.Person(ctx, person)
	if err != nil {
		return fmt.Errorf("person show: %w", err)
	}
	fmt.Fprintf(out, "person: %s\n", person)
	if p.Zone == "" {
		fmt.Fprintln(out, "stored zone: none")
	} else {
		fmt.Fprintf(out, "stored zone: %s\n", p.Zone)
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	if len(p.Links) == 0 {
		fmt.Fprintln(tw, "identities: none linked")
	} else {
		fmt.Fprintln(tw, "IDENTITY\tLINKED\tBY\tREASON")
		for _, l := range p.Links {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.ID, l.Created.UTC().Format(time.RFC3339), l.By, l.Reason)
		}
	}
	if len(p.Audit) == 0 {
		fmt.Fprintln(tw, "audit: none")
	} else {
		fmt.Fprintln(tw, "AT\tCHANGE\tBY\tREASON")
		for _, e := range p.Audit {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), eventText(e), e.By, e.Reason)
		}
	}
	return tw.Flush()
}

// eventText says what a person's audit event changed.
func eventText(e driver.PersonEvent) string {
	switch e.Op {
	case "zone":
		if e.Zone == "" {
			return "zone cleared"
		}
		return "zone " + e.Zone
	case "link", "unlink":
		return e.Op + " " + e.ID
	}
	return e.Op
}
