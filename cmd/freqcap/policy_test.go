package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policystore"
)

const (
	cliV1 = `policies:
  - name: push
    overrides: true
    rules:
      - {name: daily, algorithm: fixed_window, limit: 50, window: 24h, by: [user]}
      - {name: minute, algorithm: sliding_window, limit: 5, window: 1m, by: [user]}
`
	cliV2 = `policies:
  - name: push
    overrides: true
    rules:
      - {name: daily, algorithm: sliding_log, limit: 40, window: 24h, by: [user]}
      - {name: minute, algorithm: sliding_window, limit: 5, window: 1m, by: [user], shadow: true}
`
	cliRekey = `policies:
  - name: push
    overrides: true
    rules:
      - {name: daily, algorithm: sliding_log, limit: 40, window: 24h, by: [user]}
      - {name: minute, algorithm: sliding_window, limit: 5, window: 1m, by: [user, app]}
`
	cliBad = `policies:
  - name: push
    rules:
      - {name: daily, algorithm: fixed_window, limit: 50, window: 24h, by: [user], shadw: true}
`
)

// writeFiles writes name → content into a fresh directory and returns
// the paths by name.
func writeFiles(t *testing.T, files map[string]string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	return out
}

// TestPolicyCommands runs every policy subcommand against a real server,
// in the order an operator would.
func TestPolicyCommands(t *testing.T) {
	addr := redistest.NewServer(t).Addr()
	f := writeFiles(t, map[string]string{"v1.yaml": cliV1, "v2.yaml": cliV2, "rekey.yaml": cliRekey, "bad.yaml": cliBad})
	steps := []struct {
		name    string
		args    []string
		want    []string // substrings of the output
		wantErr string
	}{
		{"empty history", []string{"history"}, []string{"the policy store is empty"}, ""},
		{"diff on empty", []string{"diff", f["v1.yaml"]}, []string{"plan: version 1 (the store is empty)", "rule daily: added"}, ""},
		{"apply without -yes", []string{"apply", f["v1.yaml"]}, []string{"not applied: run again with -yes"}, ""},
		{"still empty", []string{"history"}, []string{"the policy store is empty"}, ""},
		{"apply v1", []string{"apply", f["v1.yaml"], "-yes", "-by", "alice", "-reason", "first"}, []string{"applied version 1"}, ""},
		{"apply v1 again", []string{"apply", f["v1.yaml"], "-yes"}, []string{"no changes", "nothing to apply"}, ""},
		{"diff v2", []string{"diff", f["v2.yaml"]}, []string{
			"plan: version 2 (against version 1)",
			"rule daily: identity changed: algorithm fixed_window → sliding_log, limit 50 → 40; carries conservatively",
			"rule minute: modified: shadow on; carries exactly",
		}, ""},
		{"apply v2 (flags first)", []string{"apply", "-by", "bob", "-yes", f["v2.yaml"], "-reason", "trial"}, []string{"applied version 2"}, ""},
		{"rekey refused", []string{"apply", f["rekey.yaml"], "-yes"}, []string{"re-keyed", "applying needs confirmation"}, "run again with -rekey"},
		{"rekey confirmed", []string{"apply", f["rekey.yaml"], "-yes", "-rekey", "-by", "carol"}, []string{"applied version 3"}, ""},
		{"history -n 2", []string{"history", "-n", "2"}, []string{"VERSION", "3 ", "carol", "2 ", "bob", "trial", "push"}, ""},
		{"show 1", []string{"show", "1"}, []string{"# version 1, applied", "by alice: first", cliV1}, ""},
		{"show current", []string{"show"}, []string{"# version 3", cliRekey}, ""},
		{"rollback without -yes", []string{"rollback", "2"}, []string{"plan: version 4 (against version 3)", "not applied"}, ""},
		{"rollback", []string{"rollback", "2", "-yes", "-rekey", "-by", "dave"}, []string{"applied version 4"}, ""},
		{"rolled back", []string{"history", "-n", "1"}, []string{"4 ", "dave", "rollback to version 2"}, ""},
		{"invalid file", []string{"diff", f["bad.yaml"]}, nil, `bad.yaml: policyfile: policies: line 4: invalid policy: unknown key "shadw"`},
		{"no file", []string{"apply"}, nil, "give one policy FILE"},
		{"missing file", []string{"apply", filepath.Join(t.TempDir(), "nope.yaml")}, nil, "no such file"},
		{"bad version", []string{"show", "x"}, nil, `version "x": want a number >= 1`},
		{"unknown version", []string{"show", "9"}, nil, "no such version"},
		{"rollback to nothing", []string{"rollback", "9", "-yes"}, nil, "no such version"},
	}
	for _, st := range steps {
		var out bytes.Buffer
		args := append([]string{st.args[0], "--redis", addr}, st.args[1:]...)
		err := policyMain(context.Background(), args, &out)
		switch {
		case st.wantErr == "" && err != nil:
			t.Fatalf("%s: policy %q = %v\n%s", st.name, args, err, out.String())
		case st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)):
			t.Fatalf("%s: policy %q = %v, want an error containing %q\n%s", st.name, args, err, st.wantErr, out.String())
		}
		for _, w := range st.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: policy %q output lacks %q:\n%s", st.name, args, w, out.String())
			}
		}
	}
}

// TestPolicyOverrideArgs: argument errors name what is wrong before any
// server is reached.
func TestPolicyOverrideArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"policy: no subcommand", []string{"policy"}, "give apply, diff, history, show or rollback"},
		{"policy: unknown subcommand", []string{"policy", "push"}, `unknown subcommand "push"`},
		{"policy: no server", []string{"policy", "history"}, "give one of --redis, --cluster and --sentinel"},
		{"policy: two servers", []string{"policy", "history", "--redis", "a:1", "--cluster", "b:1"}, "give one of --redis, --cluster and --sentinel"},
		{"policy: unreachable", []string{"policy", "history", "--redis", "127.0.0.1:1"}, "cannot reach Redis at 127.0.0.1:1"},
		{"policy: bad flag", []string{"policy", "diff", "--nope"}, "nope"},
		{"override: no subcommand", []string{"override"}, "give set, list or delete"},
		{"override: no subject", []string{"override", "list", "push", "--redis", "a:1"}, "give the policy and the subject"},
		{"override: bad subject", []string{"override", "list", "push", "u42", "--redis", "a:1"}, "subject argument #1: want DIM=VALUE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "u42") {
				t.Errorf("run(%q) = %v: the error shows a subject value", tc.args, err)
			}
		})
	}
	if err := run([]string{"policy", "-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("policy -h = %v, want flag.ErrHelp", err)
	}
}

// TestPolicyCommandsCluster: apply, history and show on a Redis Cluster.
func TestPolicyCommandsCluster(t *testing.T) {
	addrs := strings.Join(redistest.Cluster(t), ",")
	f := writeFiles(t, map[string]string{"v1.yaml": cliV1, "v2.yaml": cliV2})
	prefix := "cli" + strings.ReplaceAll(t.Name(), "/", "-")
	for _, st := range []struct {
		args []string
		want string
	}{
		{[]string{"apply", f["v1.yaml"], "-yes"}, "applied version 1"},
		{[]string{"apply", f["v2.yaml"], "-yes"}, "applied version 2"},
		{[]string{"history"}, "bob"},
		{[]string{"show", "1"}, cliV1},
	} {
		args := append([]string{st.args[0], "--cluster", addrs, "--prefix", prefix, "-by", "bob"}, st.args[1:]...)
		if st.args[0] == "history" || st.args[0] == "show" {
			args = append([]string{st.args[0], "--cluster", addrs, "--prefix", prefix}, st.args[1:]...)
		}
		var out bytes.Buffer
		if err := policyMain(context.Background(), args, &out); err != nil {
			t.Fatalf("policy %q = %v\n%s", args, err, out.String())
		}
		if !strings.Contains(out.String(), st.want) {
			t.Errorf("policy %q output lacks %q:\n%s", args, st.want, out.String())
		}
	}
}

// TestPolicyDiffWhatIf: diff prints, beside the plan, what the proposed
// version would have denied of the traffic a recording service sampled.
func TestPolicyDiffWhatIf(t *testing.T) {
	ctx := context.Background()
	addr := redistest.NewServer(t).Addr()
	tighter := strings.Replace(cliV1, "limit: 5,", "limit: 3,", 1)
	f := writeFiles(t, map[string]string{"v1.yaml": cliV1, "tighter.yaml": tighter})
	if err := policyMain(ctx, []string{"apply", f["v1.yaml"], "--redis", addr, "-yes"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}

	// A service running version 1 records every subject's attempts.
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	be := redis.New(c, nil)
	rec, err := fleet.NewRecorder(be, &fleet.Options{FlushEvery: -1, Sample: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	lim := sdk.New(be, sdk.WithObserver(rec.Observe))
	v, err := policystore.New(be).Version(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := v.Policies()
	if err != nil {
		t.Fatal(err)
	}
	for range 8 { // minute allows 5: 3 denied; 3 a minute would deny 5
		if _, err := lim.Allow(ctx, ps[0], sdk.Subject{"user": "u0"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := policyMain(ctx, []string{"diff", f["tighter.yaml"], "--redis", addr}, &out); err != nil {
		t.Fatalf("policy diff = %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"rule minute: modified: limit 5 → 3; carries exactly",
		"what-if at",
		"1 subject in 1 sampled, 8 attempts replayed",
		"8 attempts by 1 person",
		"current: denies 3 attempts, 1 person",
		"proposed: denies 5 attempts, 1 person",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("policy diff output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := policyMain(ctx, []string{"diff", f["tighter.yaml"], "--redis", addr, "-whatif=false"}, &out); err != nil || strings.Contains(out.String(), "what-if") {
		t.Errorf("policy diff -whatif=false = %v, printed:\n%s", err, out.String())
	}
}

// TestPolicyMessagingCommands: diff and apply name the messaging settings
// a version changes (person, quiet hours, classes, a rule's headroom),
// each carried exactly; show gives them back as written.
func TestPolicyMessagingCommands(t *testing.T) {
	addr := redistest.NewServer(t).Addr()
	messaging := strings.Replace(cliV1, "    overrides: true\n", `    overrides: true
    person: user
    quiet_hours: {zone: Europe/Berlin, periods: [{from: "21:00", to: "08:00", days: [mon, tue, wed, thu, fri]}]}
    classes:
      - {name: otp, exempt: all, counted: true, quiet_hours: true}
      - {name: receipt, exempt: [daily]}
`, 1)
	messaging = strings.Replace(messaging, "limit: 50, window: 24h, by: [user]}", "limit: 50, window: 24h, by: [user], headroom: [{priority: 1, keep: 10}]}", 1)
	f := writeFiles(t, map[string]string{"v1.yaml": cliV1, "messaging.yaml": messaging})
	steps := []struct {
		name string
		args []string
		want []string
	}{
		{"apply v1", []string{"apply", f["v1.yaml"], "-yes"}, []string{"applied version 1"}},
		{"diff", []string{"diff", f["messaging.yaml"]}, []string{
			"policy push: modified",
			"  setting person none → user\n",
			`  setting quiet_hours none → {zone: Europe/Berlin, periods: [{from: "21:00", to: "08:00", days: [mon, tue, wed, thu, fri]}]}` + "\n",
			"  setting class otp added: {name: otp, exempt: all, counted: true, quiet_hours: true}\n",
			"  setting class receipt added: {name: receipt, exempt: [daily]}\n",
			"rule daily: modified: headroom none → [{priority: 1, keep: 10}]; carries exactly",
			"rule minute: unchanged",
		}},
		{"apply", []string{"apply", f["messaging.yaml"], "-yes"}, []string{"setting person none → user", "applied version 2"}},
		{"show", []string{"show"}, []string{"# version 2", messaging}},
		{"rollback", []string{"rollback", "1"}, []string{"setting person user → none", "setting class otp removed", "rule daily: modified: headroom [{priority: 1, keep: 10}] → none; carries exactly", "not applied"}},
	}
	for _, st := range steps {
		var out bytes.Buffer
		args := append([]string{st.args[0], "--redis", addr}, st.args[1:]...)
		if err := policyMain(context.Background(), args, &out); err != nil {
			t.Fatalf("%s: policy %q = %v\n%s", st.name, args, err, out.String())
		}
		for _, w := range st.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: policy %q output lacks %q:\n%s", st.name, args, w, out.String())
			}
		}
	}
}
