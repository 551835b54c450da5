package conformance_test

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/sdk/conformance/containers"
)

// guide is the page whose section shows conformance_test.go.
const guide = "../../docs/DOCKER.md"

const section = "\n## Run the conformance suite against your own server image\n"

func readGuide(t *testing.T) string {
	t.Helper()
	md, err := os.ReadFile(guide)
	if err != nil {
		t.Fatal(err)
	}
	return string(md)
}

// TestGuideShowsTheExample keeps docs/DOCKER.md true: the Go block of its
// section "Run the conformance suite against your own server image" is,
// character for character, conformance_test.go, which go test runs.
func TestGuideShowsTheExample(t *testing.T) {
	_, body, ok := strings.Cut(readGuide(t), section)
	if !ok {
		t.Fatalf("%s has no section %q", guide, strings.TrimSpace(section))
	}
	body, _, _ = strings.Cut(body, "\n## ")
	_, block, ok := strings.Cut(body, "```go\n")
	if !ok {
		t.Fatalf("%s: the section has no ```go block", guide)
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatalf("%s: the section's ```go block does not end", guide)
	}
	src, err := os.ReadFile("conformance_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if block != string(src) {
		t.Errorf("%s: the section's Go block differs from examples/conformance/conformance_test.go; copy the file as it is:\n--- guide\n%s--- conformance_test.go\n%s", guide, block, src)
	}
}

// kit is every exported top-level name of package containers the guide may
// use; the compiler checks that each exists.
var kit = map[string]any{
	"Start": containers.Start, "StartCluster": containers.StartCluster,
	"StartSentinel": containers.StartSentinel, "NewNetwork": containers.NewNetwork,
	"Pool": containers.Pool, "Required": containers.Required,
	"Spec": containers.Spec{}, "ClusterSpec": containers.ClusterSpec{},
	"SentinelSpec": containers.SentinelSpec{}, "Server": containers.Server{},
	"Cluster": containers.Cluster{}, "Sentinel": containers.Sentinel{},
	"Network": containers.Network{}, "ClusterNode": containers.ClusterNode{},
	"EnvRequire": containers.EnvRequire, "EnvImageRedis": containers.EnvImageRedis,
	"LocalRedisImage": containers.LocalRedisImage, "PublicRedisImage": containers.PublicRedisImage,
	"ReadyTimeout": containers.ReadyTimeout,
}

// members returns the exported fields and methods of v's type and of a
// pointer to it.
func members(v any) map[string]bool {
	out := map[string]bool{}
	typ := reflect.TypeOf(v)
	for _, tt := range []reflect.Type{typ, reflect.PointerTo(typ)} {
		for i := 0; i < tt.NumMethod(); i++ {
			out[tt.Method(i).Name] = true
		}
	}
	for i := 0; i < typ.NumField(); i++ {
		if f := typ.Field(i); f.IsExported() {
			out[f.Name] = true
		}
	}
	return out
}

// TestGuideNamesTheKit checks every name of the container kit that
// docs/DOCKER.md uses against the package: containers.X, the methods and
// fields it calls on srv, cl and z, ClusterSpec.X and SentinelSpec.X, and
// the Spec fields and Server methods its paragraph lists, which must be
// all of Spec's fields.
func TestGuideNamesTheKit(t *testing.T) {
	md := readGuide(t)
	checks := []struct {
		re    string
		names map[string]bool
	}{
		{`\bcontainers\.([A-Z]\w*)`, func() map[string]bool {
			m := map[string]bool{}
			for k := range kit {
				m[k] = true
			}
			return m
		}()},
		{`\bsrv\.([A-Z]\w*)`, members(containers.Server{})},
		{`\bcl\.([A-Z]\w*)`, members(containers.Cluster{})},
		{`\bz\.([A-Z]\w*)`, members(containers.Sentinel{})},
		{`\bClusterSpec\.([A-Z]\w*)`, members(containers.ClusterSpec{})},
		{`\bSentinelSpec\.([A-Z]\w*)`, members(containers.SentinelSpec{})},
	}
	seen := 0
	for _, c := range checks {
		for _, m := range regexp.MustCompile(c.re).FindAllStringSubmatch(md, -1) {
			seen++
			if !c.names[m[1]] {
				t.Errorf("%s names %s, which package containers does not have", guide, m[0])
			}
		}
	}
	if seen < 10 {
		t.Errorf("%s: only %d names of the kit found; the kit's section should name its calls", guide, seen)
	}

	// The paragraph listing Spec's fields, then Server's other methods.
	_, para, ok := strings.Cut(md, "A `containers.Spec` says what to run:")
	if !ok {
		t.Fatalf("%s has no paragraph \"A `containers.Spec` says what to run:\"", guide)
	}
	para, _, _ = strings.Cut(para, "\n\n")
	parts := regexp.MustCompile("A `containers.Server`\\s+also has").Split(para, 2)
	if len(parts) != 2 {
		t.Fatalf("%s: the Spec paragraph does not go on with \"A `containers.Server` also has\":\n%s", guide, para)
	}
	word := regexp.MustCompile("`([A-Z][a-z][A-Za-z]*)`")
	spec, server := members(containers.Spec{}), members(containers.Server{})
	listed := map[string]bool{}
	fields, methods := parts[0], parts[1]
	for _, m := range word.FindAllStringSubmatch(fields, -1) {
		listed[m[1]] = true
		if !spec[m[1]] {
			t.Errorf("%s lists %s as a field of containers.Spec, which has none of that name", guide, m[1])
		}
	}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(containers.Spec{})) {
		if f.IsExported() && !listed[f.Name] {
			t.Errorf("%s does not list containers.Spec's field %s", guide, f.Name)
		}
	}
	for _, m := range word.FindAllStringSubmatch(methods, -1) {
		if !server[m[1]] {
			t.Errorf("%s lists %s as a method of containers.Server, which has none of that name", guide, m[1])
		}
	}
}
