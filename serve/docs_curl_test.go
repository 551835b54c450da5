package serve_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/serve"
)

// docsAddr is the address the manual's curl line calls: freqcap serve's
// default --addr.
const docsAddr = "http://127.0.0.1:8081"

// docCurl returns the guide's first command line starting "curl " in a
// ```sh block, and its line number.
func docCurl(t *testing.T, md string) (string, int) {
	t.Helper()
	inSh := false
	sc := bufio.NewScanner(strings.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "```sh":
			inSh = true
		case line == "```":
			inSh = false
		case inSh && strings.HasPrefix(line, "curl "):
			return line, n
		}
	}
	t.Fatalf("%s has no curl line in a ```sh block", docsFile)
	return "", 0
}

// shellWords splits a one-line command as sh would, for the quoting the
// manual uses: words separated by spaces, 'single-quoted' text verbatim.
func shellWords(line string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			w.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case strings.ContainsRune("\"\\$`;|&<>()*?", r):
			return nil, fmt.Errorf("unsupported shell character %q outside single quotes", r)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated single quote")
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// TestServeDocsCurl runs the guide's curl line, with curl, against a live
// server started as a newcomer's `freqcap serve` is — the seed policies
// from a file, not a store — with the guide's credentials, on the memory
// backend and the examples' clock, its address put in place of the
// default 127.0.0.1:8081. The line must be the transcripts' first Take
// example's call (its path, Authorization and JSON body), and the answer
// that example's body but for "policy_version": "0" (a file) where the
// example, from a store, shows "1", as the guide says beside the line.
func TestServeDocsCurl(t *testing.T) {
	data, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	md := string(data)
	line, n := docCurl(t, md)
	args, err := shellWords(line)
	if err != nil {
		t.Fatalf("%s:%d: %v", docsFile, n, err)
	}
	var take *docExample
	for _, ex := range transcriptExamples(t) {
		if strings.HasPrefix(ex.request, "POST /freqcap.v1.FreqcapService/Take ") {
			take = &ex
			break
		}
	}
	if take == nil {
		t.Fatalf("the transcripts of %s have no Take example", docsFile)
	}
	first, h, body := split(take.request)
	target := strings.Fields(first)[1]

	url, header, data0 := curlRequest(t, fmt.Sprintf("%s:%d", docsFile, n), args)
	if url != docsAddr+target {
		t.Errorf("%s:%d: curl calls %q, want %q (serve's default address and the Take example's path)", docsFile, n, url, docsAddr+target)
	}
	for _, k := range []string{"Authorization", "Content-Type"} {
		if header[k] != h.Get(k) {
			t.Errorf("%s:%d: curl sends %s %q, the Take example %q", docsFile, n, k, header[k], h.Get(k))
		}
	}
	var gotReq, wantReq any
	if err := json.Unmarshal([]byte(data0), &gotReq); err != nil {
		t.Fatalf("%s:%d: curl's -d is not JSON: %v", docsFile, n, err)
	}
	if err := json.Unmarshal([]byte(body), &wantReq); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotReq, wantReq) {
		t.Errorf("%s:%d: curl sends %s, the Take example (%s) %s", docsFile, n, data0, take.where(), body)
	}

	curl, err := exec.LookPath("curl")
	if err != nil {
		msg := fmt.Sprintf("curl not found in PATH (%v): SKIPPING the replay of %s's curl line; set FREQCAP_REQUIRE_SERVERS=1 to make this fatal", err, docsFile)
		if os.Getenv("FREQCAP_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	policies, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	lim, _, callers := docSetup(t)
	base := docServe(t, serve.Config{Limiter: lim, Policies: policies, Callers: callers})
	args[0] = curl
	for i, a := range args {
		args[i] = strings.Replace(a, docsAddr, base, 1)
	}
	out, err := exec.Command(args[0], args[1:]...).Output()
	if err != nil {
		t.Fatalf("%s:%d: %s: %v", docsFile, n, line, err)
	}
	var got, want any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("curl's answer is not JSON: %q", out)
	}
	_, _, wantBody := split(take.response)
	if err := json.Unmarshal([]byte(wantBody), &want); err != nil {
		t.Fatal(err)
	}
	d, ok := want.(map[string]any)["decision"].(map[string]any)
	if !ok || d["policy_version"] != "1" {
		t.Fatalf("%s: the Take example's answer has no \"policy_version\": \"1\"", take.where())
	}
	d["policy_version"] = "0"
	if !jsonMatch(want, got) {
		t.Errorf("%s:%d: curl answers %s\nwant the Take example's answer (%s) with \"policy_version\": \"0\"", docsFile, n, out, take.where())
	}
	const sentence = "answers `\"policy_version\": \"0\"`"
	if !strings.Contains(md, sentence) {
		t.Errorf("%s does not say, beside its first example, that a server started from a file %s", docsFile, sentence)
	}
}

// curlRequest returns the URL, headers and body of a curl command line's
// words (args[0] is curl); where names the line in failures.
func curlRequest(t *testing.T, where string, args []string) (url string, header map[string]string, data string) {
	t.Helper()
	header = map[string]string{}
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-s":
		case (a == "-H" || a == "-d") && i+1 < len(args):
			i++
			if a == "-d" {
				data = args[i]
			} else if k, v, ok := strings.Cut(args[i], ":"); ok {
				header[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		case strings.HasPrefix(a, "http"):
			url = a
		default:
			t.Fatalf("%s: curl argument %q: the test knows -s, -H, -d and the URL", where, a)
		}
	}
	return url, header, data
}
