package capability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
			// By default plain Lua, saying why the module is not used.
			r, err := NewDetector(c, Config{}).Report(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Choice(tc.algo); got.Strategy != PlainLua || !strings.Contains(got.Reason, "usable on 1/1 master but not used: ") {
				t.Errorf("Choice(%v) = %v (%s), want %v, the module named as not used\n%s", tc.algo, got.Strategy, got.Reason, PlainLua, r)
			}
			r, err = NewDetector(c, Config{ModuleStrategies: true}).Report(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Choice(tc.algo); got.Strategy != tc.want {
				t.Errorf("with ModuleStrategies: Choice(%v) = %v (%s), want %v\n%s", tc.algo, got.Strategy, got.Reason, tc.want, r)
			}
			// The overrides apply to a live server too.
			r2, err := Probe(context.Background(), c, Config{ForcePlainLua: true, ModuleStrategies: true})
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

// TestLiveReplica: a client pointed at a replica gets a report that says
// so and names its master, with no usable feature and no strategy, in
// both protocols; the Detector probes again while the server is a
// replica, so once it is promoted (REPLICAOF NO ONE) the next Report is a
// master's, without Refresh. The master itself is no replica.
func TestLiveReplica(t *testing.T) {
	master := redistest.NewServer(t)
	replica := redistest.NewReplica(t, master)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			c := goredis.NewClient(&goredis.Options{Addr: replica.Addr(), Protocol: proto, MaxRetries: -1})
			defer c.Close()
			r, err := Probe(ctx, c, Config{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Nodes) != 1 || !r.Nodes[0].Replica || r.Nodes[0].Master != master.Addr() {
				t.Fatalf("Probe(replica).Nodes = %+v, want one replica of %s", r.Nodes, master.Addr())
			}
			var re *ReplicaError
			if err := r.Writable(); !errors.As(err, &re) || re.Addr != replica.Addr() || re.Master != master.Addr() {
				t.Errorf("Writable() = %v, want a *ReplicaError naming %s and its master %s", err, replica.Addr(), master.Addr())
			}
			for _, c := range r.Choices {
				if c.Strategy != Unavailable || !strings.Contains(c.Reason, "replica of "+master.Addr()) {
					t.Errorf("Choice(%v) = %v (%s), want unavailable, naming the master", c.Algorithm, c.Strategy, c.Reason)
				}
			}
			for _, f := range r.Features {
				if f.Usable {
					t.Errorf("feature %v usable on a replica", f.Feature)
				}
			}
			text := r.String()
			for _, want := range []string{"server " + replica.Addr() + " (1 replica)", replica.Addr() + " (replica of " + master.Addr() + ")", "nodes:"} {
				if !strings.Contains(text, want) {
					t.Errorf("String() lacks %q:\n%s", want, text)
				}
			}
			for _, bad := range []string{"master)", "masters:", " lua ", "usable"} {
				if strings.Contains(text, bad) {
					t.Errorf("String() has %q:\n%s", bad, text)
				}
			}
			js, err := json.Marshal(r)
			if err != nil || !strings.Contains(string(js), `"replica":true,"master":"`+master.Addr()+`"`) {
				t.Errorf("JSON = %s, %v; want the node's replica and master fields", js, err)
			}
		})
	}

	t.Run("master", func(t *testing.T) {
		c := goredis.NewClient(&goredis.Options{Addr: master.Addr(), MaxRetries: -1})
		defer c.Close()
		r, err := Probe(ctx, c, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Nodes[0].Replica || r.Writable() != nil || r.Choice(driver.FixedWindow).Strategy != PlainLua {
			t.Errorf("Probe(master) = %+v, Writable %v; want a master with strategies", r.Nodes[0], r.Writable())
		}
	})

	t.Run("promoted", func(t *testing.T) {
		c := goredis.NewClient(&goredis.Options{Addr: replica.Addr(), MaxRetries: -1})
		defer c.Close()
		d := NewDetector(c, Config{})
		r, err := d.Report(ctx)
		if err != nil || r.Writable() == nil {
			t.Fatalf("Report() = %v, %v; want a replica's report", r, err)
		}
		if err := c.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		r2, err := d.Report(ctx)
		if err != nil || r2.Writable() != nil || r2.Choice(driver.FixedWindow).Strategy != PlainLua {
			t.Fatalf("Report() after REPLICAOF NO ONE = %v, %v; want the master's report, with strategies", r2, err)
		}
		if r3, _ := d.Report(ctx); r3 != r2 {
			t.Error("a master's report is not cached")
		}
	})
}
