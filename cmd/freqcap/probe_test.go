package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestProbe: freqcap probe exits 0 (nil) only for a 2xx answer, and fails
// on an error status, on a server that does not answer in time and on a
// closed port.
func TestProbe(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			io.WriteString(w, "ready\n")
		case "/slow":
			<-release
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "the backend does not answer\n")
		}
	}))
	defer srv.Close()
	defer close(release)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	tests := []struct {
		url     string
		wantErr string
	}{
		{url: srv.URL + "/readyz"},
		{url: srv.URL + "/down", wantErr: "503"},
		{url: srv.URL + "/slow", wantErr: "deadline exceeded"},
		{url: closed.URL + "/readyz", wantErr: "refused"},
	}
	for _, tc := range tests {
		var out strings.Builder
		err := probe(context.Background(), tc.url, 300*time.Millisecond, &out)
		switch {
		case tc.wantErr == "" && (err != nil || !strings.Contains(out.String(), "200 OK: ready")):
			t.Errorf("probe(%s) = %v, %q; want nil, 200 OK: ready", tc.url, err, out.String())
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("probe(%s) = %v, want an error containing %q", tc.url, err, tc.wantErr)
		}
	}
	if err := run([]string{"probe"}); err == nil || !strings.Contains(err.Error(), "give one URL") {
		t.Errorf("run(probe) = %v, want an error asking for a URL", err)
	}
}
