package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// TestOverrideCommands sets, lists and deletes overrides with the
// command against a real server, the policy read from the store (and
// from a file), and checks that decisions follow them.
func TestOverrideCommands(t *testing.T) {
	ctx := context.Background()
	addr := redistest.NewServer(t).Addr()
	f := writeFiles(t, map[string]string{"v1.yaml": cliV1, "plain.yaml": strings.Replace(cliV1, "    overrides: true\n", "", 1)})
	if err := policyMain(ctx, []string{"apply", f["v1.yaml"], "--redis", addr, "-yes"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	lim := sdk.New(redis.New(c, nil))
	v, err := policystore.New(redis.New(c, nil)).Version(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := v.Policies()
	if err != nil {
		t.Fatal(err)
	}
	push := ps[0]
	allow := func(user string) sdk.Decision {
		t.Helper()
		d, err := lim.Allow(ctx, push, sdk.Subject{"user": user})
		if err != nil {
			t.Fatalf("Allow = %v", err)
		}
		return d
	}

	idRE := regexp.MustCompile(`override #(\d+) set`)
	var blockID string
	steps := []struct {
		name    string
		args    []string
		want    []string
		wantErr string
		after   func(t *testing.T, out string)
	}{
		{"list none", []string{"list", "push", "user=u1"}, []string{"no overrides"}, "", nil},
		{"block", []string{"set", "push", "user=u1", "-kind", "block", "-until", "2h", "-reason", "abuse", "-by", "ops"}, []string{"set: block, 20", `by "ops": abuse`}, "",
			func(t *testing.T, out string) {
				m := idRE.FindStringSubmatch(out)
				if m == nil {
					t.Fatalf("no override id in %q", out)
				}
				blockID = m[1]
				if d := allow("u1"); d.Allowed || d.Override.ID == 0 {
					t.Errorf("Allow(u1) under a block = %+v, want denied by the override", d)
				}
			}},
		{"exempt from a file", []string{"set", "push", "user=u2", "-kind", "exempt", "-counted", "-reason", "vip", "-policies", f["v1.yaml"]}, []string{"exempt (counted), until deleted"}, "",
			func(t *testing.T, out string) {
				for i := range 6 {
					if d := allow("u2"); !d.Allowed {
						t.Errorf("Allow(u2) #%d under an exempt = denied, want allowed", i+1)
					}
				}
			}},
		{"limit", []string{"set", "push", "user=u3", "-kind", "limit", "-limit", "minute=2", "-until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "-reason", "partner"}, []string{"limit minute=2"}, "",
			func(t *testing.T, out string) {
				got := []bool{allow("u3").Allowed, allow("u3").Allowed, allow("u3").Allowed}
				if !got[0] || !got[1] || got[2] {
					t.Errorf("Allow(u3) ×3 under limit minute=2 = %v, want true true false", got)
				}
			}},
		{"list", []string{"list", "push", "user=u1"}, []string{"ID", "KIND", "block", "ops", "abuse"}, "", nil},
		{"delete", nil, []string{"deleted"}, "",
			func(t *testing.T, out string) {
				if d := allow("u1"); !d.Allowed {
					t.Errorf("Allow(u1) after the block's delete = denied, want allowed")
				}
			}},
		{"delete again", nil, nil, "override not found", nil},
		{"delete without id", []string{"delete", "push", "user=u1"}, nil, "give -id N", nil},
		{"no reason", []string{"set", "push", "user=u1", "-kind", "block"}, nil, "give -reason", nil},
		{"no kind", []string{"set", "push", "user=u1", "-reason", "x"}, nil, "give -kind", nil},
		{"bad kind", []string{"set", "push", "user=u1", "-kind", "vip", "-reason", "x"}, nil, `-kind must be exempt, block or limit, got "vip"`, nil},
		{"counted block", []string{"set", "push", "user=u1", "-kind", "block", "-counted", "-reason", "x"}, nil, "-counted is for -kind exempt", nil},
		{"limit without -limit", []string{"set", "push", "user=u1", "-kind", "limit", "-reason", "x"}, nil, "-kind limit needs -limit RULE=N", nil},
		{"bad -limit", []string{"set", "push", "user=u1", "-kind", "limit", "-limit", "minute", "-reason", "x"}, nil, `-limit "minute": want RULE=N`, nil},
		{"unknown rule", []string{"set", "push", "user=u1", "-kind", "limit", "-limit", "hourly=3", "-reason", "x"}, nil, "invalid override", nil},
		{"past until", []string{"set", "push", "user=u1", "-kind", "block", "-until", "2001-01-01T00:00:00Z", "-reason", "x"}, nil, "invalid override", nil},
		{"bad until", []string{"set", "push", "user=u1", "-kind", "block", "-until", "soon", "-reason", "x"}, nil, `-until "soon"`, nil},
		{"unknown policy", []string{"list", "api", "user=u1"}, nil, `no policy "api" in version 1 of the policy store`, nil},
		{"policy without overrides", []string{"list", "push", "user=u1", "-policies", f["plain.yaml"]}, nil, "overrides: true", nil},
	}
	for _, st := range steps {
		args := st.args
		if args == nil {
			args = []string{"delete", "push", "user=u1", "-id", blockID}
		}
		args = append([]string{args[0], "--redis", addr}, args[1:]...)
		var out bytes.Buffer
		err := overrideMain(ctx, args, &out)
		switch {
		case st.wantErr == "" && err != nil:
			t.Fatalf("%s: override %q = %v\n%s", st.name, args, err, out.String())
		case st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)):
			t.Fatalf("%s: override %q = %v, want an error containing %q\n%s", st.name, args, err, st.wantErr, out.String())
		}
		for _, w := range st.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: override %q output lacks %q:\n%s", st.name, args, w, out.String())
			}
		}
		if st.after != nil {
			st.after(t, out.String())
		}
	}
}
