package containers

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterSpec describes a Redis Cluster on its own docker network. The
// zero ClusterSpec is 3 masters of the default Redis image.
type ClusterSpec struct {
	// Node is every node's spec (image, command, modules); StartCluster
	// appends the cluster options to its Args and sets its Network and
	// Name. The image must have redis-cli, which joins the nodes.
	Node Spec
	// Masters is the number of masters; 0 means 3.
	Masters int
	// Replicas is the number of replicas per master (0 by default).
	Replicas int
	// NodeTimeout is cluster-node-timeout; 0 means 1s, which makes a
	// replica take over from a dead master within a few seconds.
	NodeTimeout time.Duration
}

// Cluster is a running Redis Cluster. Its nodes sit on their own network
// and announce their addresses there; the test process reaches them on
// those addresses (Linux hosts route to docker bridge networks).
type Cluster struct {
	// Network is the nodes' network.
	Network *Network
	// Nodes are the servers, masters first as created (roles change after a
	// failover; ask the cluster, not this order).
	Nodes []*Server
}

// StartCluster starts the nodes of cs on a new network, joins them with
// redis-cli --cluster create and polls until every node reports
// cluster_state:ok and every replica is in sync. Everything is removed when
// t ends. Give a cluster client Addrs.
func StartCluster(t testing.TB, cs ClusterSpec) *Cluster {
	t.Helper()
	if cs.Masters == 0 {
		cs.Masters = 3
	}
	if cs.NodeTimeout == 0 {
		cs.NodeTimeout = time.Second
	}
	if cs.Masters < 3 {
		t.Fatalf("containers: a cluster needs at least 3 masters, got %d", cs.Masters)
	}
	c := &Cluster{Network: NewNetwork(t)}
	n := cs.Masters * (1 + cs.Replicas)
	for i := 0; i < n; i++ {
		spec := cs.Node
		spec.Args = append(append([]string{}, cs.Node.Args...),
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(cs.NodeTimeout.Milliseconds(), 10),
			// Any replica may take over, however long since it heard
			// from its master: failover tests want a prompt promotion.
			"--cluster-replica-validity-factor", "0",
		)
		spec.Name = fmt.Sprintf("cluster%d", i)
		spec.Network = c.Network
		c.Nodes = append(c.Nodes, Start(t, spec))
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	args := []string{"redis-cli", "--cluster", "create"}
	for _, s := range c.Nodes {
		// Announce the address on the cluster's network explicitly, so
		// MOVED replies and CLUSTER SLOTS name addresses the test can reach.
		rdb := client(s.Addr())
		err := rdb.ConfigSet(ctx, "cluster-announce-ip", s.IP).Err()
		rdb.Close()
		if err != nil {
			t.Fatalf("containers: %s: CONFIG SET cluster-announce-ip: %v", s.Name, err)
		}
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(cs.Replicas), "--cluster-yes")
	c.Nodes[0].Exec(t, args...)
	c.WaitHealthy(t, ReadyTimeout)
	return c
}

// Addrs returns every node's address.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Node returns the server at addr (host:port as the cluster announces it),
// or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// WaitHealthy polls until every node reports cluster_state:ok with all
// slots served and all nodes known, and every replica's link to its master
// is up, or fails t after d.
func (c *Cluster) WaitHealthy(t testing.TB, d time.Duration) {
	t.Helper()
	if err := poll(d, c.healthy); err != nil {
		t.Fatalf("containers: cluster not healthy within %v: %v", d, err)
	}
}

func (c *Cluster) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range c.Nodes {
		err := func() error {
			rdb := client(s.Addr())
			defer rdb.Close()
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			f := infoFields(info)
			if f["cluster_state"] != "ok" || f["cluster_slots_ok"] != "16384" ||
				f["cluster_known_nodes"] != strconv.Itoa(len(c.Nodes)) {
				return fmt.Errorf("state %s, slots ok %s, known nodes %s",
					f["cluster_state"], f["cluster_slots_ok"], f["cluster_known_nodes"])
			}
			repl, err := rdb.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			r := infoFields(repl)
			if r["role"] == "slave" && r["master_link_status"] != "up" {
				return fmt.Errorf("replica link %s", r["master_link_status"])
			}
			return nil
		}()
		if err != nil {
			return fmt.Errorf("%s (%s): %w", s.Name, s.Addr(), err)
		}
	}
	return nil
}

// ClusterNode is one line of CLUSTER NODES.
type ClusterNode struct {
	ID, Addr, MasterID string
	Master, Fail       bool
}

// ClusterNodes returns the cluster's view of its nodes as seen by the node
// at addr.
func (c *Cluster) ClusterNodes(addr string) ([]ClusterNode, error) {
	rdb := client(addr)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := rdb.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var nodes []ClusterNode
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		// <id> <ip:port@cport[,hostname]> <flags> <master> ...
		hostport, _, _ := strings.Cut(f[1], "@")
		if _, _, err := net.SplitHostPort(hostport); err != nil {
			return nil, fmt.Errorf("CLUSTER NODES: bad address %q", f[1])
		}
		flags := "," + f[2] + ","
		n := ClusterNode{
			ID: f[0], Addr: hostport,
			Master: strings.Contains(flags, ",master,"),
			Fail:   strings.Contains(flags, ",fail,"),
		}
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// infoFields parses "key:value" lines of INFO and CLUSTER INFO replies.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			m[k] = v
		}
	}
	return m
}
