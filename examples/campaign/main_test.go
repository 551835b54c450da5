package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestCampaign runs the example on the memory backend, a real
// redis-server and a real 3-master cluster, and checks what each step
// decided: a retried batch is replayed and consumes nothing, the third
// identical copy is denied by content-59s, and the hot-deny cache answers
// the next try without the backend.
func TestCampaign(t *testing.T) {
	const n = 1200 // 3 batches, the last one short
	backends := []struct {
		name string
		new  func(t *testing.T) (*sdk.Limiter, *fleet.Recorder, *fleet.Reader)
	}{
		{"memory", func(t *testing.T) (*sdk.Limiter, *fleet.Recorder, *fleet.Reader) {
			b := memory.New(nil)
			return withRecorder(t, b)
		}},
		{"redis", func(t *testing.T) (*sdk.Limiter, *fleet.Recorder, *fleet.Reader) {
			c := goredis.NewUniversalClient(redis.NewClientOptions(redistest.Standalone(t)))
			t.Cleanup(func() { c.Close() })
			b := redis.New(c, nil)
			return withRecorder(t, b, sdk.WithTimeout(30*time.Second))
		}},
		{"cluster", func(t *testing.T) (*sdk.Limiter, *fleet.Recorder, *fleet.Reader) {
			o := redis.NewClientOptions(redistest.Cluster(t)...)
			o.IsClusterMode = true
			c := goredis.NewUniversalClient(o)
			t.Cleanup(func() { c.Close() })
			b := redis.New(c, nil)
			return withRecorder(t, b, sdk.WithTimeout(30*time.Second))
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			var out bytes.Buffer
			lim, rec, reader := b.new(t)
			s, err := run(context.Background(), &out, lim, lim.Admin(), n, "")
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			check := func(what string, got, want int) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %d, want %d\n%s", what, got, want, out.String())
				}
			}
			check("msg-1 allowed", s.first.allowed, n)
			check("msg-1 replayed", s.first.replayed, 0)
			check("msg-1 retry allowed", s.retry.allowed, n)
			check("msg-1 retry replayed", s.retry.replayed, n)
			check("msg-2 allowed", s.second.allowed, n)
			check("msg-2 replayed", s.second.replayed, 0)
			check("msg-3 denied", s.third.denied, n)
			check("msg-3 denied by content-59s", s.third.deniedBy["content-59s"], n)
			check("msg-3 cached", s.third.cached, 0)
			check("msg-3b denied", s.again.denied, n)
			check("msg-3b cached", s.again.cached, n)
			for rule, want := range map[string]int64{"recv-1m": 2, "recv-24h": 2, "content-59s": 2, "content-59m": 2} {
				if got := s.used[rule]; got != want {
					t.Errorf("user-0 %s used = %d, want %d (the retry and the denials consume nothing)\n%s", rule, got, want, out.String())
				}
			}
			if s.lastDenial != "content-59s" {
				t.Errorf("newest denial by %q, want content-59s", s.lastDenial)
			}
			if !strings.Contains(out.String(), "(1200 by content-59s)") {
				t.Errorf("output lacks the denial count:\n%s", out.String())
			}
			// The recorder counted the consuming decisions (not the
			// replays, nor the inspection), and the top denied recipients.
			if err := rec.Flush(context.Background()); err != nil {
				t.Fatalf("Flush = %v", err)
			}
			push, err := pushPolicy()
			if err != nil {
				t.Fatal(err)
			}
			st, err := reader.Stats(context.Background(), push, time.Hour)
			if err != nil {
				t.Fatalf("Stats = %v", err)
			}
			if st.Allowed != 2*n || st.Denied != 2*n || len(st.TopDenied) == 0 {
				t.Errorf("Stats = %d allowed, %d denied, %d top denied; want %d, %d, some", st.Allowed, st.Denied, len(st.TopDenied), 2*n, 2*n)
			}
		})
	}
}

// stats is the test's statistics prefix.
func stats(t *testing.T) string { return t.Name() + "-stats" }

// TestReadmeOutput keeps the README's transcript of the example true: the
// memory backend's output for 2 000 recipients, line for line.
func TestReadmeOutput(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "$ go run ./examples/campaign")
	if !ok {
		t.Fatal("README.md has no transcript of go run ./examples/campaign")
	}
	_, after, _ = strings.Cut(after, "\n")
	want, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatal("README.md: the campaign transcript's code block does not end")
	}
	var out bytes.Buffer
	lim := sdk.New(memory.New(nil), sdk.WithPrefix("readme"))
	if _, err := run(context.Background(), &out, lim, lim.Admin(), 2000, ""); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != want {
		t.Errorf("README.md's transcript differs from the example's output:\n--- README\n%s--- go run ./examples/campaign\n%s", want, got)
	}
}

// withRecorder returns a limiter on b with a recorder, flushed by hand,
// and a reader on the same storage (a console) that sees its statistics.
func withRecorder(t *testing.T, b driver.Backend, opts ...sdk.Option) (*sdk.Limiter, *fleet.Recorder, *fleet.Reader) {
	t.Helper()
	rec, err := fleet.NewRecorder(b, &fleet.Options{Prefix: stats(t), FlushEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := fleet.NewReader(b, &fleet.Options{Prefix: stats(t)})
	if err != nil {
		t.Fatal(err)
	}
	return sdk.New(b, append(opts, sdk.WithPrefix(t.Name()), sdk.WithObserver(rec.Observe))...), rec, reader
}

// TestHelp: -h prints each flag's default once (-prefix printed its own
// description of the default and one run's random value), and bad
// flags are refused.
func TestHelp(t *testing.T) {
	var out strings.Builder
	if _, err := parseFlags([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseFlags(-h) = %v, want flag.ErrHelp", err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Count(line, "(default") > 1 {
			t.Errorf("-h prints two defaults: %q", line)
		}
	}
	if !strings.Contains(out.String(), "(default: campaign-<random>, one of its own per run;") {
		t.Errorf("-h does not describe -prefix's default:\n%s", out.String())
	}
	o, err := parseFlags(nil, io.Discard)
	if err != nil || !strings.HasPrefix(o.prefix, "campaign-") || o.recipients != 2000 {
		t.Errorf("parseFlags() = %+v, %v; want a campaign- prefix and 2000 recipients", o, err)
	}
	for _, args := range [][]string{{"-recipients", "0"}, {"-redis", "a:1", "-cluster", "b:1"}, {"extra"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) = nil error", args)
		}
	}
}
