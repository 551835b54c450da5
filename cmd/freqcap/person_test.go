package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestPersonCommands links, shows, zones and unlinks with the command
// against a real server, and checks what the sdk then reads.
func TestPersonCommands(t *testing.T) {
	ctx := context.Background()
	addr := redistest.NewServer(t).Addr()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	prefix := "cli-person-" + strings.ReplaceAll(t.Name(), "/", "-")
	ad := sdk.New(redis.New(c, nil), sdk.WithPrefix(prefix)).Admin()

	steps := []struct {
		name    string
		args    []string
		want    []string
		wantErr string
		after   func(t *testing.T)
	}{
		{"show nobody", []string{"show", "tok-1"}, []string{"person: tok-1", "stored zone: none", "identities: none linked", "audit: none"}, "", nil},
		{"link", []string{"link", "tok-1", "ann", "-reason", "same device", "-by", "ops"}, []string{`linked tok-1 to person ann (by "ops": same device)`}, "",
			func(t *testing.T) {
				if l, err := ad.LinkOf(ctx, "tok-1"); err != nil || l.Person != "ann" || l.By != "ops" {
					t.Errorf("LinkOf(tok-1) = %+v, %v, want ann's by ops", l, err)
				}
			}},
		{"link a phone", []string{"link", "+33 6 12 34 56 78", "ann", "-reason", "sms"}, []string{"linked +33 6 12 34 56 78 to person ann"}, "", nil},
		{"zone", []string{"zone", "ann", "Europe/Paris", "-reason", "moved", "-by", "ops"}, []string{"person ann: stored zone Europe/Paris"}, "", nil},
		{"show by identity", []string{"show", "+33 6 12 34 56 78"}, []string{"is an identity of person ann", "person: ann", "stored zone: Europe/Paris", "IDENTITY", "tok-1", "ops", "same device", "zone Europe/Paris", "link +33 6 12 34 56 78"}, "", nil},
		{"show by person", []string{"show", "ann"}, []string{"person: ann", "tok-1", "+33 6 12 34 56 78"}, "", nil},
		{"link to another person", []string{"link", "tok-1", "bob", "-reason", "x"}, nil, "linked to another person", nil},
		{"unlink", []string{"unlink", "tok-1", "-reason", "sold", "-by", "ops"}, []string{"unlinked tok-1"}, "",
			func(t *testing.T) {
				if _, err := ad.LinkOf(ctx, "tok-1"); !errors.Is(err, driver.ErrLinkNotFound) {
					t.Errorf("LinkOf(tok-1) after unlink = %v, want ErrLinkNotFound", err)
				}
				p, err := ad.Person(ctx, "ann")
				if err != nil || len(p.Links) != 1 || p.Audit[0].Op != "unlink" || p.Audit[0].Reason != "sold" {
					t.Errorf("Person(ann) after unlink = %+v, %v, want one link, the unlink audited", p, err)
				}
			}},
		{"show the audit", []string{"show", "ann"}, []string{"unlink tok-1", "sold"}, "", nil},
		{"zone none", []string{"zone", "ann", "none", "-reason", "unknown"}, []string{"stored zone cleared"}, "",
			func(t *testing.T) {
				if p, _ := ad.Person(ctx, "ann"); p.Zone != "" || p.Audit[0].Op != "zone" {
					t.Errorf("Person(ann) after zone none = %+v, want no zone, the change audited", p)
				}
			}},
		{"unlink again", []string{"unlink", "tok-1", "-reason", "x"}, nil, "link not found", nil},
		{"no reason", []string{"link", "tok-2", "ann"}, nil, "give -reason", nil},
		{"bad zone", []string{"zone", "ann", "Mars/Base", "-reason", "x"}, nil, "invalid zone", nil},
		{"Local zone", []string{"zone", "ann", "Local", "-reason", "x"}, nil, "invalid zone", nil},
		{"control character", []string{"link", "tok\t2", "ann", "-reason", "x"}, nil, "invalid identity: identity holds a control character", nil},
		{"too few arguments", []string{"link", "tok-2", "-reason", "x"}, nil, "want 2 arguments, got 1", nil},
	}
	for _, st := range steps {
		args := append([]string{st.args[0], "--redis", addr, "--prefix", prefix}, st.args[1:]...)
		var out bytes.Buffer
		err := personMain(ctx, args, &out)
		switch {
		case st.wantErr == "" && err != nil:
			t.Fatalf("%s: person %q = %v\n%s", st.name, args, err, out.String())
		case st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)):
			t.Fatalf("%s: person %q = %v, want an error containing %q\n%s", st.name, args, err, st.wantErr, out.String())
		}
		for _, w := range st.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: person %q output lacks %q:\n%s", st.name, args, w, out.String())
			}
		}
		if st.after != nil {
			st.after(t)
		}
	}
	if err := personMain(ctx, []string{"merge"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), `unknown subcommand "merge"`) {
		t.Errorf("person merge = %v, want an unknown subcommand", err)
	}
}
