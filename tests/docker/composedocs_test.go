package docker_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Compose spellings: docsCompose is what the docs' commands use
// (Compose 1.29, Debian 12's docker-compose, which scripts/test.sh installs
// when no Compose is found); pluginCompose, the v2 plugin's, is named as
// the alternative.
const (
	docsCompose   = "docker-compose"
	pluginCompose = "docker compose"
)

// composeDocs are the files that tell users how to run docker-compose.yml.
var composeDocs = []string{"README.md", "docs/DOCKER.md", "docs/CONSOLE.md", "docker-compose.yml"}

// docCompose is one Compose command the docs give.
type docCompose struct {
	where    string // file:line
	spelling string // docsCompose or pluginCompose
	args     []string
	inline   bool // a `code span` in prose, not a line of a shell block or of the file's header
}

var inlineCompose = regexp.MustCompile("`(docker-compose|docker compose)((?: [^`]*)?)`")

// documentedCompose returns the Compose commands of file (relative to the
// repository): the lines of its ```sh blocks (for docker-compose.yml: the
// indented lines of its header comment) that run Compose, and the `code
// spans` that do.
func documentedCompose(t *testing.T, file string) []docCompose {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	yml := strings.HasSuffix(file, ".yml")
	var out []docCompose
	// command appends code as a command if it runs Compose.
	command := func(where, code string) bool {
		code, _, _ = strings.Cut(code, "#")
		for _, spelling := range []string{docsCompose, pluginCompose} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(code), spelling+" "); ok {
				out = append(out, docCompose{where: where, spelling: spelling, args: strings.Fields(rest)})
				return true
			}
		}
		return false
	}
	inSh := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		where := file + ":" + strconv.Itoa(n)
		prose := line
		switch {
		case yml && !strings.HasPrefix(line, "#"):
			return out // the header ends at the first line that is not a comment
		case yml:
			// The header's commands are indented; its prose is not.
			text := strings.TrimPrefix(line, "#")
			if strings.HasPrefix(text, "  ") && command(where, text) {
				continue
			}
			prose = text
		case strings.HasPrefix(line, "```"):
			inSh = !inSh && strings.TrimPrefix(line, "```") == "sh"
			continue
		case inSh:
			command(where, line)
			continue
		}
		for _, m := range inlineCompose.FindAllStringSubmatch(prose, -1) {
			spelling := docsCompose
			if m[1] == pluginCompose {
				spelling = pluginCompose
			}
			out = append(out, docCompose{where: where, spelling: spelling, args: strings.Fields(m[2]), inline: true})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// splitCompose splits a Compose command's arguments into its global
// options (before the subcommand) and the subcommand with its own.
func splitCompose(args []string) (global, sub []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return args[:i], args[i:]
		}
		if !strings.Contains(a, "=") && (a == "--profile" || a == "-f" || a == "--file" || a == "-p" || a == "--project-name" || a == "--env-file" || a == "--project-directory") {
			i++ // the option's value
		}
	}
	return args, nil
}

// documentedRuns returns the docs' distinct commands of subcommand sub
// (e.g. "up") without global options: the ones TestComposeUp runs as
// written.
func documentedRuns(t *testing.T, sub string) [][]string {
	t.Helper()
	seen := map[string]bool{}
	var out [][]string
	for _, file := range composeDocs {
		for _, c := range documentedCompose(t, file) {
			global, s := splitCompose(c.args)
			if c.spelling != docsCompose || len(global) > 0 || len(s) == 0 || s[0] != sub || seen[strings.Join(s, " ")] {
				continue
			}
			seen[strings.Join(s, " ")] = true
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		t.Fatalf("the docs give no `%s %s` command", docsCompose, sub)
	}
	return out
}

// TestComposeDocs keeps the docs' Compose commands working as written on
// what scripts/test.sh installs: every command in a shell block or in the
// compose file's header is spelled docker-compose, each file also names
// the v2 plugin's `docker compose`, and the installed Compose accepts
// every command's options: its global options with `config` on the
// repository's file, the subcommand's own flags as listed by its --help.
// (TestComposeUp runs the documented up and down commands themselves.)
func TestComposeDocs(t *testing.T) {
	cli := composeCommand(t)
	root := repoRoot(t)
	checked := map[string]bool{}
	for _, file := range composeDocs {
		cmds := documentedCompose(t, file)
		var commands, alternatives int
		for _, c := range cmds {
			if c.spelling == pluginCompose {
				if !c.inline {
					t.Errorf("%s: `%s %s` in a command block: spell it %s (what ./scripts/test.sh installs) and name `%s` as the alternative in the text",
						c.where, c.spelling, strings.Join(c.args, " "), docsCompose, pluginCompose)
				}
				alternatives++
				continue
			}
			if len(c.args) == 0 {
				continue // the package's name
			}
			commands++
			key := strings.Join(c.args, " ")
			if checked[key] {
				continue
			}
			checked[key] = true
			global, sub := splitCompose(c.args)
			if len(sub) == 0 {
				t.Errorf("%s: `%s %s` has no subcommand", c.where, c.spelling, key)
				continue
			}
			args := append([]string{"-f", filepath.Join(root, "docker-compose.yml"), "--project-directory", root}, global...)
			if out, err := runCompose(cli, append(args, "config", "-q")...); err != nil {
				t.Errorf("%s: the global options of `%s %s` fail with config: %v\n%s", c.where, c.spelling, key, err, out)
			}
			help, err := runCompose(cli, sub[0], "--help")
			if err != nil {
				t.Errorf("%s: `%s --help`: %v\n%s", c.where, sub[0], err, help)
				continue
			}
			for _, flag := range sub[1:] {
				if !strings.HasPrefix(flag, "-") {
					continue // a service name
				}
				name, _, _ := strings.Cut(flag, "=")
				if !regexp.MustCompile(`(^|[\s,])` + regexp.QuoteMeta(name) + `([\s,=]|$)`).MatchString(help) {
					t.Errorf("%s: `%s %s`: %s is not an option of %s %s (its --help does not list it)", c.where, c.spelling, key, name, strings.Join(cli, " "), sub[0])
				}
			}
		}
		if commands == 0 {
			t.Errorf("%s gives no %s command", file, docsCompose)
		}
		if alternatives == 0 {
			t.Errorf("%s does not name `%s`, the v2 plugin's spelling, as the alternative", file, pluginCompose)
		}
	}
}

// runCompose runs the Compose CLI cli with args, without FREQCAP_*
// variables from the host.
func runCompose(cli []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli[0], append(append([]string{}, cli[1:]...), args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FREQCAP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestDocumentedCompose checks the parsing of the docs on a sample of each
// kind of source.
func TestDocumentedCompose(t *testing.T) {
	dir := t.TempDir()
	md := "Run `docker-compose up -d`, or `docker compose up -d` with the plugin.\n\n```sh\nexport A=1\ndocker-compose --profile modules up -d   # all\ndocker compose down\n```\n\n```yaml\ndocker-compose ps\n```\n"
	yml := "# header\n#   docker-compose down -v     # no variable\n# docker-compose is v1; v2: `docker compose`.\n\nservices: {}\n# docker-compose up\n"
	for name, body := range map[string]string{"a.md": md, "b.yml": yml} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rel := func(name string) string {
		r, err := filepath.Rel(repoRoot(t), filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	got := func(cs []docCompose) []string {
		var s []string
		for _, c := range cs {
			k := "block"
			if c.inline {
				k = "inline"
			}
			s = append(s, k+" "+c.spelling+" "+strings.Join(c.args, " "))
		}
		return s
	}
	tests := []struct {
		file string
		want []string
	}{
		{"a.md", []string{"inline docker-compose up -d", "inline docker compose up -d", "block docker-compose --profile modules up -d", "block docker compose down"}},
		{"b.yml", []string{"block docker-compose down -v", "inline docker compose "}},
	}
	for _, tc := range tests {
		if g := got(documentedCompose(t, rel(tc.file))); strings.Join(g, "|") != strings.Join(tc.want, "|") {
			t.Errorf("documentedCompose(%s) = %q, want %q", tc.file, g, tc.want)
		}
	}
	if g, s := splitCompose([]string{"--profile", "modules", "up", "-d"}); strings.Join(g, " ") != "--profile modules" || strings.Join(s, " ") != "up -d" {
		t.Errorf("splitCompose = %q, %q", g, s)
	}
}
