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
		{name: "unknown command", args: []string{"serve"}, wantErr: `unknown command "serve"`},
		{name: "console bad flag", args: []string{"console", "--no-such-flag"}, wantErr: "no-such-flag"},
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
