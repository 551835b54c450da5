package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

const probeUsage = `Usage: freqcap probe [--timeout 2s] URL

Asks URL (e.g. http://127.0.0.1:8081/readyz) once with GET and exits 0 when
it answers 2xx, 1 otherwise: a container health check for images without a
shell or curl, such as freqcap/console:dev (docker-compose.yml's serve
replicas use it).

Flags:
`

// runProbe is `freqcap probe`.
func runProbe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), probeUsage)
		fs.PrintDefaults()
	}
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("probe: give one URL")
	}
	return probe(context.Background(), fs.Arg(0), *timeout, os.Stdout)
}

// probe GETs url and returns nil for a 2xx answer, whose first line it
// prints to w.
func probe(ctx context.Context, url string, timeout time.Duration, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("probe: %s answered %s: %q", url, resp.Status, body)
	}
	fmt.Fprintf(w, "%s: %s\n", resp.Status, firstLine(body))
	return nil
}

func firstLine(b []byte) string {
	for i, c := range b {
		if c == '\n' || c == '\r' {
			return string(b[:i])
		}
	}
	return string(b)
}
