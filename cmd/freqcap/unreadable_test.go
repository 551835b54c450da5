package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// TestPolicyCommandsUnreadable: on a real server whose store is empty,
// then whose current version is written by hand (another format), then
// missing (its number pointing nowhere): override set says the store is
// empty and what to do; show says the version does not load and what to
// do; apply and rollback plan against the newest version that loads,
// say so, need no -rekey, and keep a person's counts (5 of 5 stays
// denied); overrides find the policy in the version in force.
func TestPolicyCommandsUnreadable(t *testing.T) {
	ctx := context.Background()
	addr := redistest.NewServer(t).Addr()
	// v2 adds a rule: minute (5 a minute) is unchanged.
	f := writeFiles(t, map[string]string{"v1.yaml": cliV1, "v2.yaml": cliV1 + "      - {name: hourly, algorithm: fixed_window, limit: 100, window: 1h, by: [user]}\n"})
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	lim := sdk.New(redis.New(c, nil))
	st := policystore.New(redis.New(c, nil))
	key := keyname.DefaultPrefix + ":{!policies}"

	type step struct {
		name    string
		cmd     func(context.Context, []string, *bytes.Buffer) error
		args    []string
		want    []string
		wantErr []string
	}
	policy := func(ctx context.Context, args []string, out *bytes.Buffer) error { return policyMain(ctx, args, out) }
	override := func(ctx context.Context, args []string, out *bytes.Buffer) error { return overrideMain(ctx, args, out) }
	run := func(st step) {
		t.Helper()
		var out bytes.Buffer
		args := append([]string{st.args[0], "--redis", addr}, st.args[1:]...)
		err := st.cmd(ctx, args, &out)
		if len(st.wantErr) == 0 && err != nil {
			t.Fatalf("%s: %q = %v\n%s", st.name, args, err, out.String())
		}
		for _, w := range st.wantErr {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q = %v, want an error containing %q\n%s", st.name, args, err, w, out.String())
			}
		}
		for _, w := range st.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: %q output lacks %q:\n%s", st.name, args, w, out.String())
			}
		}
	}
	run(step{"override set on an empty store", override, []string{"set", "push", "user=u1", "-kind", "block", "-until", "2h", "-reason", "x"}, nil,
		[]string{"the policy store is empty: no policy version has been applied yet", "freqcap policy apply FILE -yes", "-policies FILE"}})
	run(step{"show on an empty store", policy, []string{"show"}, nil, []string{"the policy store is empty", "freqcap policy apply FILE -yes"}})
	run(step{"apply v1", policy, []string{"apply", f["v1.yaml"], "-yes"}, []string{"applied version 1"}, nil})

	v1, err := st.Version(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := v1.Policies()
	if err != nil {
		t.Fatal(err)
	}
	who := sdk.Subject{"user": "capped"}
	for range 5 {
		if d, err := lim.Allow(ctx, ps[0], who); err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
	}
	stillDenied := func(when string, n int64) {
		t.Helper()
		v, err := st.Version(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := v.Policies()
		if err != nil {
			t.Fatal(err)
		}
		if d, err := lim.Allow(ctx, ps[0], who); err != nil || d.Allowed {
			t.Errorf("%s: a person at 5/5 of minute = allowed %v, %v; want denied (counts carried)", when, d.Allowed, err)
		}
	}

	// Version 2 written by hand, in a format of a newer freqcap.
	if err := c.HSet(ctx, key+":v:2", "doc", `{"format":"freqcap.policies/v2"}`, "at", "1764150000000000", "by", "hand", "reason", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, key, 2, 0).Err(); err != nil {
		t.Fatal(err)
	}
	run(step{"show the unreadable version", policy, []string{"show"}, nil, []string{"version 2 does not load", "roll back to a version that loads"}})
	run(step{"override list finds push in the version in force", override, []string{"list", "push", "user=u1"}, []string{"no overrides"}, nil})
	run(step{"apply over it", policy, []string{"apply", f["v2.yaml"], "-yes"}, []string{
		"plan: version 3 (against version 1: the current version 2 does not load)",
		"version 2 does not load",
		"this plan is made against version 1, the newest version that loads",
		"applied version 3",
	}, nil})
	stillDenied("after apply", 3)

	// Version 4's number points nowhere: the hash is missing.
	if err := c.Set(ctx, key, 4, 0).Err(); err != nil {
		t.Fatal(err)
	}
	run(step{"show the missing version", policy, []string{"show"}, nil, []string{"version 4 is missing"}})
	run(step{"rollback over it", policy, []string{"rollback", "1", "-yes"}, []string{
		"plan: version 5 (against version 3: the current version 4 does not load)",
		"version 4 is missing",
		"applied version 5",
	}, nil})
	stillDenied("after rollback", 5)
}
