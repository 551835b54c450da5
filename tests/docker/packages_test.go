package docker_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMissingPackages runs scripts/missing-packages.sh, what the README's
// test command (scripts/test.sh) installs, with a PATH holding only
// stand-in commands, and checks that it leaves a working Compose: Debian's
// docker-compose whenever neither docker-compose nor the v2 plugin
// (`docker compose`) is there, with or without a docker CLI, and nothing
// when either is.
func TestMissingPackages(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("SKIPPED: bash is not installed")
	}
	script := filepath.Join(repoRoot(t), "scripts", "missing-packages.sh")
	all := []string{"redis-server", "redis-cli", "chromium"}
	tests := []struct {
		name     string
		commands []string // stand-ins on PATH
		plugin   bool     // the docker stand-in answers `docker compose version`
		want     []string
	}{
		{name: "fresh machine", want: []string{"redis-server", "redis-tools", "chromium", "docker-compose"}},
		{name: "servers, no docker", commands: all, want: []string{"docker-compose"}},
		{name: "docker without compose", commands: append([]string{"docker"}, all...), want: []string{"docker-compose"}},
		{name: "docker with the v2 plugin", commands: append([]string{"docker"}, all...), plugin: true},
		{name: "docker-compose without docker", commands: append([]string{"docker-compose"}, all...)},
		{name: "docker and docker-compose", commands: append([]string{"docker", "docker-compose"}, all...)},
		{name: "redis-cli missing", commands: []string{"redis-server", "chromium", "docker-compose"}, want: []string{"redis-tools"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, name := range tc.commands {
				body := "#!/bin/sh\nexit 0\n"
				if name == "docker" {
					rc := "1" // as Debian's docker.io without the plugin
					if tc.plugin {
						rc = "0"
					}
					body = "#!/bin/sh\nif [ \"$1 $2\" = \"compose version\" ]; then exit " + rc + "; fi\nexit 0\n"
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(bash, script)
			cmd.Env = []string{"PATH=" + dir, "HOME=" + dir}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("missing-packages.sh: %v\n%s", err, out)
			}
			got := strings.Fields(string(out))
			if !slices.Equal(got, tc.want) {
				t.Errorf("missing-packages.sh with %v on PATH (plugin %v) = %q, want %q", tc.commands, tc.plugin, got, tc.want)
			}
		})
	}
}
