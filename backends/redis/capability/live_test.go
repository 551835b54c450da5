package capability

import (
	"context"
	"os"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk/driver"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestLivePlainServer(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Standalone(t), MaxRetries: -1})
	defer c.Close()
	r, err := Probe(context.Background(), c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Scripting.All() || r.NonAtomic || r.Cluster {
		t.Errorf("Probe(plain redis-server) = scripting %s, NonAtomic %v, Cluster %v; want scripting on 1/1, atomic, standalone", r.Scripting, r.NonAtomic, r.Cluster)
	}
	// Debian's redis-server is 7.0: no modules, no HFE. A newer one on
	// PATH may have HFE; nothing else.
	for _, a := range Algorithms {
		got := r.Choice(a).Strategy
		if got != PlainLua && !(a == driver.SlidingWindow && got == HFELua) {
			t.Errorf("Choice(%v) = %v, want %v", a, got, PlainLua)
		}
	}
	t.Logf("report:\n%s", r)
}

func TestLiveCluster(t *testing.T) {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: redistest.Cluster(t), MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	r, err := Probe(ctx, c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Cluster || len(r.Nodes) != 3 || r.Scripting.String() != "3/3 masters" {
		t.Fatalf("Probe(cluster) = Cluster %v, %d nodes, scripting %s; want a cluster of 3 masters, scripting 3/3:\n%s", r.Cluster, len(r.Nodes), r.Scripting, r)
	}
	t.Logf("report:\n%s", r)
}

// TestLiveModules probes the module servers named by FREQCAP_TEST_TAIRHASH,
// FREQCAP_TEST_CELL and FREQCAP_TEST_HFE (host:port), skipping loudly for
// each one not given.
func TestLiveModules(t *testing.T) {
	tests := []struct {
		env  string
		algo driver.Algorithm
		want Strategy
	}{
		{"FREQCAP_TEST_TAIRHASH", driver.SlidingWindow, TairHashLua},
		{"FREQCAP_TEST_CELL", driver.GCRA, CellLua},
		{"FREQCAP_TEST_HFE", driver.SlidingWindow, HFELua},
	}
	for _, tc := range tests {
		t.Run(tc.env, func(t *testing.T) {
			addr := os.Getenv(tc.env)
			if addr == "" {
				t.Skipf("SKIPPED: %s is not set (host:port of a module server, docs/MODULES.md)", tc.env)
			}
			c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
			defer c.Close()
			d := NewDetector(c, Config{})
			r, err := d.Report(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Choice(tc.algo); got.Strategy != tc.want {
				t.Errorf("Choice(%v) = %v (%s), want %v\n%s", tc.algo, got.Strategy, got.Reason, tc.want, r)
			}
			// The overrides apply to a live server too.
			r2, err := Probe(context.Background(), c, Config{ForcePlainLua: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := r2.Choice(tc.algo).Strategy; got != PlainLua {
				t.Errorf("with ForcePlainLua: Choice(%v) = %v, want %v", tc.algo, got, PlainLua)
			}
		})
	}
}

// TestLiveWrongPassword: a probe whose connection is refused before any
// command runs (here AUTH with a wrong password) reports that error, not
// an empty reply of the first command.
func TestLiveWrongPassword(t *testing.T) {
	srv := redistest.NewServer(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Password: "wrong", MaxRetries: -1})
	defer c.Close()
	_, err := Probe(ctx, c, Config{})
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), "unexpected reply") {
		t.Errorf("Probe with a wrong password = %v, want the server's WRONGPASS refusal", err)
	}
}
