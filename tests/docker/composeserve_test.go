package docker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
)

// checkServeReplicas is TestComposeUp's part for docker-compose.yml's two
// freqcap serve replicas (serve-1 and serve-2, published on ports): each
// becomes healthy by its own health check (freqcap probe of /readyz),
// refuses a call without a credential, and they answer as one over the
// compose Redis: takes through either are counted once and read back
// alike through both, a retry with the same idempotency key through the
// other replica is replayed, and a reservation made through one is
// committed through the other. The console (base) shows serve's
// decisions, which its recorder flushes to the same Redis.
func checkServeReplicas(t *testing.T, c *compose, hc *http.Client, base string, ports []int) {
	t.Helper()
	names := []string{"serve-1", "serve-2"}
	urls := make([]string, len(ports))
	for i, p := range ports {
		urls[i] = "http://127.0.0.1:" + strconv.Itoa(p)
	}
	deadline := time.Now().Add(90 * time.Second)
	for i, name := range names {
		for {
			code, body := 0, []byte(nil)
			if resp, err := hc.Get(urls[i] + "/readyz"); err == nil {
				code = resp.StatusCode
				body, _ = io.ReadAll(io.LimitReader(resp.Body, 512))
				resp.Body.Close()
			}
			health := containerHealth(t, c, name)
			if code == http.StatusOK && health == "healthy" {
				break
			}
			if time.Now().After(deadline) {
				logs, _ := c.run(time.Minute, "logs", "--no-color", "--tail", "40", name)
				t.Fatalf("%s: /readyz = %d %s, health %q within 90s; want 200 and healthy\n%s", name, code, body, health, logs)
			}
			time.Sleep(300 * time.Millisecond) // polling the container until a deadline
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var lims []*client.Client
	for i, u := range urls {
		proto := client.GRPC
		if i == 1 {
			proto = client.ConnectJSON
		}
		lims = append(lims, client.New(u, &client.Options{Token: testServeSecret, Protocol: proto, Timeout: 10 * time.Second}))
	}
	anon := client.New(urls[0], nil)
	if _, err := anon.Policies(ctx); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("serve-1 ListPolicies without a credential = %v, want unauthenticated", err)
	}
	ps, err := lims[1].Policies(ctx)
	if err != nil {
		t.Fatalf("serve-2 ListPolicies = %v", err)
	}
	var push *sdk.Policy
	for _, p := range ps {
		if p.Name() == "push" {
			push = p
		}
	}
	if push == nil {
		t.Fatalf("serve-2 lists %d policies, none named push (the seed policies)", len(ps))
	}
	// Each send has its own content: push allows 2 identical ones a
	// minute; the per-user rules count them all.
	user := unique("compose-serve")
	s := func(n int) sdk.Subject {
		return sdk.Subject{"user": user, "content": sdk.Fingerprint("compose message " + strconv.Itoa(n))}
	}
	takes := []struct {
		replica int
		key     string
		replay  bool
	}{
		{0, "", false},
		{1, "", false},
		{0, "msg-1", false},
		{1, "msg-1", true}, // the retry through the other replica
	}
	for i, tk := range takes {
		n := i
		if tk.replay {
			n = i - 1 // the same message again
		}
		d, err := lims[tk.replica].Take(ctx, push, sdk.Attempt{Subject: s(n), IdempotencyKey: tk.key})
		if err != nil || !d.Allowed || d.Degraded || d.Replayed != tk.replay {
			t.Fatalf("%s Take(key %q) = allowed %v degraded %v replayed %v, %v; want allowed, replayed %v",
				names[tk.replica], tk.key, d.Allowed, d.Degraded, d.Replayed, err, tk.replay)
		}
	}
	d, res, err := lims[0].Reserve(ctx, push, sdk.Attempt{Subject: s(9)}, time.Minute)
	if err != nil || !d.Allowed {
		t.Fatalf("serve-1 Reserve = %v, %v; want allowed", d.Allowed, err)
	}
	r, err := lims[1].ReservationOf(push, s(9), res.ID())
	if err != nil {
		t.Fatalf("serve-2 ReservationOf(serve-1's id) = %v", err)
	}
	if err := r.Commit(ctx); err != nil {
		t.Fatalf("serve-2 Commit of serve-1's reservation = %v", err)
	}
	// 3 takes (the replay consumed nothing) and the committed
	// reservation, in the per-user rules.
	const want = 4
	for i, lim := range lims {
		in, err := lim.Admin().Inspect(ctx, push, s(0))
		if err != nil {
			t.Fatalf("%s Inspect = %v", names[i], err)
		}
		seen := 0
		for _, r := range in.Rules {
			if r.Rule == "recv-1m" || r.Rule == "recv-24h" {
				seen++
				if r.Used != want {
					t.Errorf("%s Inspect: rule %s used %d, want %d (the same counts through both replicas)", names[i], r.Rule, r.Used, want)
				}
			}
		}
		if seen != 2 {
			t.Errorf("%s Inspect: %d of the rules recv-1m and recv-24h, want both", names[i], seen)
		}
	}

	// serve records its decisions where the console reads them: the
	// console's statistics of push count at least serve's 4 (the
	// recorders flush every second).
	for {
		code, body := httpDo(t, hc, "GET", base+"/api/v1/stats?policy=push", testViewerToken, nil)
		var st struct {
			Allowed int64 `json:"allowed"`
		}
		if code == http.StatusOK && json.Unmarshal(body, &st) == nil && st.Allowed >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("console GET /api/v1/stats?policy=push = %d %s; want allowed >= %d from the serve replicas' recorders", code, body, want)
		}
		time.Sleep(300 * time.Millisecond) // polling the recorders' flush until a deadline
	}
}

// containerHealth returns the Docker health status of compose service
// name ("starting", "healthy", "unhealthy"), or "" when it has no
// container yet.
func containerHealth(t *testing.T, c *compose, name string) string {
	t.Helper()
	id, err := c.run(time.Minute, "ps", "-q", name)
	if id = strings.TrimSpace(id); err != nil || id == "" {
		return ""
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{end}}", id).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
