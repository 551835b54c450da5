package containers

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// SentinelSpec describes a Sentinel deployment on its own docker network:
// a master, one replica and one Sentinel watching them. The zero
// SentinelSpec runs all three from the default Redis image.
type SentinelSpec struct {
	// Node is the master's and the replica's spec (image, command,
	// modules); StartSentinel appends --replicaof to the replica's Args and
	// sets Network and Name. The Sentinel runs Node's image with the
	// command redis-server <its configuration file> --sentinel.
	Node Spec
	// MasterName is the name the Sentinel monitors the master by; "" means
	// "freqcap".
	MasterName string
}

// Sentinel is a running Sentinel deployment. A client connects through the
// Sentinel, as a failover client does: its address (Addr) and MasterName.
// The Sentinel names the master by its address on Network, which the test
// process reaches on Linux (see the package documentation).
type Sentinel struct {
	// MasterName is the name the Sentinel monitors the master by.
	MasterName string
	// Network is the network the three servers sit on.
	Network *Network
	// Master and Replica are the data servers, as started (a failover
	// swaps their roles, not these fields); Sentinel is the Sentinel.
	Master, Replica, Sentinel *Server
}

// sentinelPort is the Sentinel's port inside its container.
const sentinelPort = 26379

// StartSentinel starts a master, a replica of it and a Sentinel on a new
// network, and polls until the replica is in sync and the Sentinel knows
// it. Everything is removed when t ends.
func StartSentinel(t testing.TB, ss SentinelSpec) *Sentinel {
	t.Helper()
	if ss.MasterName == "" {
		ss.MasterName = "freqcap"
	}
	z := &Sentinel{MasterName: ss.MasterName, Network: NewNetwork(t)}
	node := func(name string, args ...string) *Server {
		t.Helper()
		spec := ss.Node
		spec.Args = append(append([]string{}, ss.Node.Args...), args...)
		spec.Name, spec.Network = name, z.Network
		return Start(t, spec)
	}
	z.Master = node("sentinel-master")
	masterPort := strconv.Itoa(z.Master.Port)
	z.Replica = node("sentinel-replica", "--replicaof", z.Master.IP, masterPort)
	// Sentinel needs a configuration file it can rewrite.
	const conf = "/freqcap-sentinel/sentinel.conf"
	name := ss.MasterName
	z.Sentinel = Start(t, Spec{
		Image: z.Master.Image,
		Cmd:   []string{"redis-server", conf, "--sentinel"},
		Port:  sentinelPort, Network: z.Network, Name: "sentinel", Ready: ss.Node.Ready,
		files: map[string]string{conf: fmt.Sprintf("port %d\nsentinel monitor %s %s %s 1\n"+
			"sentinel down-after-milliseconds %s 2000\nsentinel failover-timeout %s 10000\n",
			sentinelPort, name, z.Master.IP, masterPort, name, name)},
	})
	d := ss.Node.Ready
	if d == 0 {
		d = ReadyTimeout
	}
	if err := poll(d, z.ready); err != nil {
		t.Fatalf("containers: sentinel not ready within %v: %v\nsentinel log:\n%s", d, err, z.Sentinel.Logs())
	}
	return z
}

// Addr returns the Sentinel's address.
func (z *Sentinel) Addr() string { return z.Sentinel.Addr() }

// ready reports why the deployment is not ready yet: the replica's link to
// the master is down, or the Sentinel does not know the replica.
func (z *Sentinel) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := client(z.Replica.Addr())
	defer r.Close()
	info, err := r.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	if link := infoFields(info)["master_link_status"]; link != "up" {
		return fmt.Errorf("replica's master_link_status %q", link)
	}
	s := client(z.Addr())
	defer s.Close()
	reps, err := s.Do(ctx, "SENTINEL", "REPLICAS", z.MasterName).Slice()
	if err != nil {
		return fmt.Errorf("SENTINEL REPLICAS: %w", err)
	}
	if len(reps) != 1 {
		return fmt.Errorf("the Sentinel knows %d replicas, want 1", len(reps))
	}
	return nil
}
