package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "help", args: []string{"help"}},
		{name: "no command", args: nil, wantErr: "no command given"},
		{name: "unknown command", args: []string{"nope"}, wantErr: `unknown command "nope"`},
		{name: "serve: two deployments", args: []string{"serve", "--redis", "a:1", "--cluster", "b:1"}, wantErr: "give one of --redis, --cluster and --sentinel"},
		{name: "serve: tls cert without key", args: []string{"serve", "--tls-cert", "c.pem"}, wantErr: "give both --tls-cert and --tls-key"},
		{name: "serve: non-loopback without credentials", args: []string{"serve", "--addr", "0.0.0.0:0"}, wantErr: "loopback only"},
		{name: "serve: bad credential", args: []string{"serve", "--token", "a:short:take@push"}, wantErr: "at least 8 bytes"},
		{name: "console bad flag", args: []string{"console", "--no-such-flag"}, wantErr: "no-such-flag"},
		{name: "console: two deployments", args: []string{"console", "--redis", "a:1", "--cluster", "b:1"}, wantErr: "give one of --redis, --cluster and --sentinel"},
		{name: "console: bad forbid", args: []string{"console", "--redis", "127.0.0.1:1", "--forbid", "nope"}, wantErr: "--forbid"},
		{name: "detect: no deployment", args: []string{"detect"}, wantErr: "give one of --redis, --cluster and --sentinel"},
		{name: "detect: sentinel without master", args: []string{"detect", "--sentinel", "a:1"}, wantErr: "--sentinel needs --master NAME"},
		{name: "bench: master without sentinel", args: []string{"bench", "-redis", "a:1", "-master", "m"}, wantErr: "--master is for --sentinel"},
		{name: "bench: stray argument", args: []string{"bench", "-redis", "a:1", "extra", "-workers", "8"}, wantErr: `unexpected argument #3 after "bench" (not shown: it may hold a secret); flags after it would be ignored`},
		{name: "console: two credentials to one --token", args: []string{"console", "--token", "a:secret-one:admin", "b:secret-two:viewer"}, wantErr: `unexpected argument #3 after "console" (not shown: it may hold a secret); give each credential its own --token`},
		{name: "detect: stray argument", args: []string{"detect", "--redis", "a:1", "--password", "two", "words"}, wantErr: `unexpected argument #5 after "detect"`},
		{name: "detect: zero timeout", args: []string{"detect", "--redis", "a:1", "--timeout", "0s"}, wantErr: "--timeout must be positive"},
		{name: "bench: negative warmup", args: []string{"bench", "-redis", "a:1", "-warmup", "-1s"}, wantErr: "-warmup >= 0"},
		{name: "bench: zero workers", args: []string{"bench", "-redis", "a:1", "-workers", "0"}, wantErr: "must be positive"},
		{name: "bench: empty cluster list", args: []string{"bench", "-cluster", " , "}, wantErr: "--cluster: no addresses"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("run(%q) = %v, want nil", tc.args, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.wantErr)
			}
		})
	}
}
