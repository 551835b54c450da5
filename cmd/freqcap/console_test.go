package main

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/console"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
)

const (
	envAdmin   = "env-admin-secret-1"
	envChecker = "env-checker-secret-2"
	envViewer  = "env-viewer-secret-3"
	envTokens  = "alice:env-alice-secret-4:admin"
	envBasic   = "bob:env-bob-password-5:viewer"
)

func setCredentialEnv(t *testing.T) {
	t.Helper()
	t.Setenv("FREQCAP_ADMIN_TOKEN", envAdmin)
	t.Setenv("FREQCAP_CHECKER_TOKEN", envChecker)
	t.Setenv("FREQCAP_VIEWER_TOKEN", envViewer)
	t.Setenv("FREQCAP_TOKENS", envTokens)
	t.Setenv("FREQCAP_BASIC_AUTH", envBasic)
	t.Setenv("FREQCAP_REDIS_PASSWORD", "env-redis-password-6")
}

var envSecrets = []string{"secret-1", "secret-2", "secret-3", "secret-4", "password-5", "password-6"}

// TestConsoleFlagsHideSecrets: help and flag errors never print a secret
// from the environment or the command line.
func TestConsoleFlagsHideSecrets(t *testing.T) {
	setCredentialEnv(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"help", []string{"-h"}},
		{"--help", []string{"--help"}},
		{"unknown flag", []string{"--no-such-flag"}},
		{"bad value", []string{"--timeout", "soon"}},
		{"bad value after a token", []string{"--token", "carol:cmdline-secret-7:admin", "--demo-rate", "x"}},
		{"two credentials to one --token", []string{"--token", "carol:cmdline-secret-7:admin", "dave:cmdline-secret-7b:viewer"}},
		{"a secret after the flags", []string{"--demo", "cmdline-secret-7c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			_, err := parseConsoleFlags(tc.args, &out)
			if err == nil {
				t.Fatalf("parseConsoleFlags(%q) = nil error", tc.args)
			}
			text := out.String() + err.Error()
			for _, s := range append(envSecrets, "secret-7") {
				if strings.Contains(text, s) {
					t.Errorf("parseConsoleFlags(%q) printed a secret (%s):\n%s", tc.args, s, text)
				}
			}
			if tc.name == "help" && (!errors.Is(err, flag.ErrHelp) || !strings.Contains(text, "checker")) {
				t.Errorf("help = %v:\n%s", err, text)
			}
		})
	}
	// A bad --token entry: the flag parses; its error names the entry's
	// position only.
	f, err := parseConsoleFlags([]string{"--token", "carol:cmdline-secret-7:r00t"}, io.Discard)
	if err != nil {
		t.Fatalf("parseConsoleFlags(--token …) = %v", err)
	}
	if _, err := f.credentials(os.Getenv); err == nil || strings.Contains(err.Error(), "secret-7") || strings.Contains(err.Error(), "r00t") {
		t.Errorf("credentials() with a bad role = %v, want an error without the entry", err)
	}
}

// TestConsoleFlagValues: numeric flags whose value means nothing are
// refused, not taken silently (--demo-rate -5 used to start the console).
func TestConsoleFlagValues(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--demo", "--demo-rate", "-5"}, "--demo-rate must be above 0 and at most 1000 decisions per second"},
		{[]string{"--demo-rate", "0"}, "--demo-rate must be above 0"},
		{[]string{"--demo-rate", "NaN"}, "--demo-rate must be above 0"},
		{[]string{"--demo-rate", "5000"}, "at most 1000 decisions per second"},
		{[]string{"--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"--timeout", "-1s"}, "--timeout must be positive"},
		{[]string{"--demo", "--demo-rate", "1000", "--timeout", "1ms"}, ""},
		{[]string{"--demo-rate", "0.5"}, ""},
	} {
		_, err := parseConsoleFlags(tc.args, io.Discard)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("parseConsoleFlags(%q) = %v, want nil", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parseConsoleFlags(%q) = %v, want an error containing %q", tc.args, err, tc.wantErr)
		}
	}
}

// TestConsoleCredentials: the environment is read after parsing, a flag
// wins over its variable, and shared tokens get names of their own.
func TestConsoleCredentials(t *testing.T) {
	setCredentialEnv(t)
	f, err := parseConsoleFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := f.credentials(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"shared-admin-token": envAdmin + " admin", "shared-checker-token": envChecker + " checker", "shared-viewer-token": envViewer + " viewer",
		"alice": "env-alice-secret-4 admin", "bob": "env-bob-password-5 viewer",
	}
	if len(creds) != len(want) {
		t.Fatalf("credentials() = %d, want %d", len(creds), len(want))
	}
	for _, c := range creds {
		if w := want[c.Name]; w != c.Secret+" "+c.Role.String() {
			t.Errorf("credential %s = %s %s, want %s", c.Name, c.Secret, c.Role, w)
		}
	}

	// Flags win; an empty variable adds nothing.
	t.Setenv("FREQCAP_VIEWER_TOKEN", "")
	t.Setenv("FREQCAP_BASIC_AUTH", "")
	f, err = parseConsoleFlags([]string{"--admin-token", "flag-admin-secret", "--token", "dora:flag-dora-secret:checker", "--token", "ed:flag-ed-secret:viewer"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	creds, err = f.credentials(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range creds {
		got = append(got, c.Name+":"+c.Secret+":"+c.Role.String())
	}
	if want := "shared-admin-token:flag-admin-secret:admin shared-checker-token:env-checker-secret-2:checker dora:flag-dora-secret:checker ed:flag-ed-secret:viewer"; strings.Join(got, " ") != want {
		t.Errorf("credentials() = %q, want %q", strings.Join(got, " "), want)
	}

	// Two credentials with one secret are refused when the console starts.
	f, err = parseConsoleFlags([]string{"--admin-token", "same-secret-xyz", "--viewer-token", "same-secret-xyz"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	creds, err = f.credentials(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := console.New(console.Config{Limiter: sdk.New(memory.New(nil)), Policies: pols, Credentials: creds}); err == nil || strings.Contains(err.Error(), "same-secret-xyz") {
		t.Errorf("console.New() with a shared secret = %v, want a refusal without the secret", err)
	}
}

// TestOpenAudit: --audit FILE is read back at start and appended to.
func TestOpenAudit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, name := range []string{"alice", "bob"} {
		a, closeFn, err := openAudit(path, log)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(a.Entries()); got != i {
			t.Fatalf("run %d: %d entries read back, want %d", i+1, got, i)
		}
		if err := a.Record(console.AuditEntry{At: at.Add(time.Duration(i) * time.Minute), Name: name, Actor: name, Role: "admin", Action: "reset", Policy: "push", Subject: sdk.Subject{"user": "u"}, Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
		closeFn()
	}
	a, closeFn, err := openAudit(path, log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if e := a.Entries(); len(e) != 2 || e[0].Name != "bob" || e[1].Name != "alice" {
		t.Errorf("entries after two runs = %+v, want bob's then alice's", e)
	}
}
