package docker_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestScriptRemovesItsImages runs scripts/test.sh in a copy of the
// repository whose docker, go, build-images.sh (but for its --names, the
// real one) and other tools are stand-ins: the images the run built are
// there while go test runs and gone after, whether the tests pass or
// fail; an image that was there before the run stays; FREQCAP_KEEP_IMAGES=1
// keeps both.
func TestTestScriptRemovesItsImages(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("SKIPPED: bash is not installed")
	}
	root := repoRoot(t)
	names, err := exec.Command(bash, filepath.Join(root, "scripts", "build-images.sh"), "--names").Output()
	if err != nil {
		t.Fatalf("build-images.sh --names: %v", err)
	}
	images := strings.Fields(string(names))
	if len(images) != 2 {
		t.Fatalf("build-images.sh --names = %q, want two names", names)
	}
	tests := []struct {
		name   string
		before []string // images there before the run
		keep   bool
		goFail bool
		after  []string // images there after
	}{
		{name: "none before", after: nil},
		{name: "go test fails", goFail: true, after: nil},
		{name: "one before", before: images[:1], after: images[:1]},
		{name: "keep", keep: true, after: images},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			repo, bin, state := filepath.Join(dir, "repo"), filepath.Join(dir, "bin"), filepath.Join(dir, "images")
			for _, d := range []string{filepath.Join(repo, "scripts"), filepath.Join(repo, "console"), filepath.Join(repo, "examples", "java"), bin, state} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			script, err := os.ReadFile(filepath.Join(root, "scripts", "test.sh"))
			if err != nil {
				t.Fatal(err)
			}
			// An image is a file in state named by its name, '/' and ':' as '_'.
			file := func(img string) string {
				return filepath.Join(state, strings.NewReplacer("/", "_", ":", "_").Replace(img))
			}
			for _, img := range tc.before {
				if err := os.WriteFile(file(img), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			goRC := "0"
			if tc.goFail {
				goRC = "1"
			}
			files := map[string]string{
				filepath.Join(repo, "scripts", "test.sh"):             string(script),
				filepath.Join(repo, "scripts", "missing-packages.sh"): "#!/bin/sh\n",
				filepath.Join(repo, "scripts", "gen-proto.sh"):        "#!/bin/sh\n",
				filepath.Join(repo, "examples", "java", "build.sh"):   "#!/bin/sh\n", // --missing: nothing
				filepath.Join(repo, "scripts", "build-images.sh"): "#!/bin/sh\n" +
					"if [ \"$1\" = --names ]; then exec bash " + filepath.Join(root, "scripts", "build-images.sh") + " --names; fi\n" +
					"for f in " + file(images[0]) + " " + file(images[1]) + "; do : >\"$f\"; done\n",
				filepath.Join(bin, "docker"): "#!/bin/sh\nf=" + state + "/$(echo \"$3\" | tr '/:' '__')\n" +
					"case \"$1 $2\" in\n\"image inspect\") [ -e \"$f\" ] ;;\n\"image rm\") rm \"$f\" ;;\n*) exit 0 ;;\nesac\n",
				filepath.Join(bin, "go"): "#!/bin/sh\nif [ \"$1\" = test ]; then ls " + state + " >" + dir + "/during; exit " + goRC + "; fi\n",
			}
			for _, name := range []string{"gofmt", "protoc", "curl", "apt-get", "sudo"} {
				files[filepath.Join(bin, name)] = "#!/bin/sh\nexit 0\n"
			}
			for name, body := range files {
				if err := os.WriteFile(name, []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(bash, filepath.Join(repo, "scripts", "test.sh"))
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + dir}
			if tc.keep {
				cmd.Env = append(cmd.Env, "FREQCAP_KEEP_IMAGES=1")
			}
			out, err := cmd.CombinedOutput()
			if (err != nil) != tc.goFail {
				t.Fatalf("test.sh: %v (go test fails: %v)\n%s", err, tc.goFail, out)
			}
			during, err := os.ReadFile(filepath.Join(dir, "during"))
			if err != nil {
				t.Fatalf("go test did not run: %v\n%s", err, out)
			}
			if n := len(strings.Fields(string(during))); n != 2 {
				t.Errorf("go test ran with %d images, want both\n%s", n, out)
			}
			for _, img := range images {
				_, err := os.Stat(file(img))
				want := false
				for _, a := range tc.after {
					want = want || a == img
				}
				if got := err == nil; got != want {
					t.Errorf("after test.sh, image %s there = %v, want %v\n%s", img, got, want, out)
				}
			}
		})
	}
}
