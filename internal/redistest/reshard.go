package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A MovableCluster is a 3-master Redis Cluster (no replicas) owned by one
// test and stopped when it ends. Unlike the shared Cluster, a test may
// move its slots between masters while clients use it (MoveSlot,
// Shuttle), as a resharding does. Its methods are safe for concurrent
// use, but moves must not overlap (one Shuttle, or MoveSlot calls in turn).
type MovableCluster struct {
	nodes []*Server
	ids   []string // each node's CLUSTER MYID
}

// NewMovableCluster starts a dedicated 3-master cluster.
func NewMovableCluster(t testing.TB) *MovableCluster {
	t.Helper()
	requireBinaries(t, "redis-server", "redis-cli")
	nodes, err := startCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatalf("redistest: dedicated cluster: %v", err)
	}
	c := &MovableCluster{nodes: nodes}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
	})
	for _, n := range nodes {
		id, err := command(n.Addr(), "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID on %s: %v", n.Addr(), err)
		}
		c.ids = append(c.ids, id)
	}
	return c
}

// Addrs returns the masters' addresses.
func (c *MovableCluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// KeySlot returns the hash slot of key (CLUSTER KEYSLOT).
func (c *MovableCluster) KeySlot(key string) (int, error) {
	s, err := command(c.nodes[0].Addr(), "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return 0, fmt.Errorf("CLUSTER KEYSLOT: %w", err)
	}
	return strconv.Atoi(s)
}

// Owner returns the index (in Addrs) of the master that owns slot, as
// that master's own CLUSTER NODES says.
func (c *MovableCluster) Owner(slot int) (int, error) {
	for i := range c.nodes {
		id, err := c.ownerSeenBy(i, slot)
		if err != nil {
			return 0, fmt.Errorf("CLUSTER NODES on %s: %w", c.nodes[i].Addr(), err)
		}
		if id == c.ids[i] {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no master owns slot %d", slot)
}

// Migrating reports whether slot's owner has it in migration (between
// CLUSTER SETSLOT MIGRATING and SETSLOT NODE).
func (c *MovableCluster) Migrating(slot int) (bool, error) {
	o, err := c.Owner(slot)
	if err != nil {
		return false, err
	}
	nodes, err := command(c.nodes[o].Addr(), "CLUSTER", "NODES")
	if err != nil {
		return false, fmt.Errorf("CLUSTER NODES on %s: %w", c.nodes[o].Addr(), err)
	}
	return strings.Contains(nodes, "["+strconv.Itoa(slot)+"->-"), nil
}

// MoveSlot migrates slot from its owner to master to (an index in Addrs)
// the way redis-cli --cluster reshard does: CLUSTER SETSLOT IMPORTING on
// the destination, MIGRATING on the source, then MIGRATE of its keys one
// at a time (so a multi-key command meets some keys moved and others not:
// ASK, then TRYAGAIN), then, once the destination knows every master's
// config epoch, SETSLOT NODE on the destination, the source and the other
// master. hold is a pause after MIGRATING and after each
// key, keeping the slot in migration longer (0: none). A slot the
// destination already owns is left alone.
func (c *MovableCluster) MoveSlot(slot, to int, hold time.Duration) error {
	from, err := c.Owner(slot)
	if err != nil {
		return err
	}
	if from == to {
		return nil
	}
	src, dst := c.nodes[from].Addr(), c.nodes[to]
	s := strconv.Itoa(slot)
	if _, err := command(dst.Addr(), "CLUSTER", "SETSLOT", s, "IMPORTING", c.ids[from]); err != nil {
		return fmt.Errorf("slot %d: SETSLOT IMPORTING on %s: %w", slot, dst.Addr(), err)
	}
	if _, err := command(src, "CLUSTER", "SETSLOT", s, "MIGRATING", c.ids[to]); err != nil {
		return fmt.Errorf("slot %d: SETSLOT MIGRATING on %s: %w", slot, src, err)
	}
	time.Sleep(hold)    // a migration in progress, for the clients to meet
	for range 100_000 { // bounded: a test's slot holds far fewer keys
		keys, err := commandArray(src, "CLUSTER", "GETKEYSINSLOT", s, "10")
		if err != nil {
			return fmt.Errorf("slot %d: GETKEYSINSLOT on %s: %w", slot, src, err)
		}
		if len(keys) == 0 || (len(keys) == 1 && keys[0] == "") {
			break
		}
		for _, k := range keys {
			// No REPLACE: the destination never has a key the source
			// still has; if it did, failing beats overwriting it.
			r, err := command(src, "MIGRATE", "127.0.0.1", strconv.Itoa(dst.port), "", "0", "5000", "KEYS", k)
			if err != nil {
				return fmt.Errorf("slot %d: MIGRATE to %s: %w", slot, dst.Addr(), err)
			}
			if r != "OK" && r != "NOKEY" {
				return fmt.Errorf("slot %d: MIGRATE to %s answered %q", slot, dst.Addr(), r)
			}
			time.Sleep(hold)
		}
	}
	// The destination claims the slot at a config epoch of its own (SETSLOT
	// NODE on an importing master bumps its epoch unless it has the
	// greatest it knows of). That claim must beat every claim still in
	// flight: a master that learns of a claim on one of its slots at a
	// greater epoch gives the slot up and deletes its keys there (Redis
	// Cluster's "dirty slot"). The source's epoch may have risen moments
	// before (it imported another slot), and gossip may not have told the
	// destination yet: the destination then claims the slot below the
	// source's epoch, the source's last ping (sent while it still owned the
	// slot) takes it back, and the destination drops the keys just moved to
	// it. So the destination first learns every master's epoch.
	if err := c.awaitEpochs(to); err != nil {
		return fmt.Errorf("slot %d: %w", slot, err)
	}
	// The destination first, so that it bumps its epoch and claims the
	// slot before the source sends clients there.
	order := []int{to, from}
	for i := range c.nodes {
		if i != to && i != from {
			order = append(order, i)
		}
	}
	for _, i := range order {
		if _, err := command(c.nodes[i].Addr(), "CLUSTER", "SETSLOT", s, "NODE", c.ids[to]); err != nil {
			return fmt.Errorf("slot %d: SETSLOT NODE on %s: %w", slot, c.nodes[i].Addr(), err)
		}
	}
	return c.settle(slot, to)
}

// settle checks that every master sees slot owned by master to after
// the SETSLOT NODE commands. A master that names another owner has taken
// a claim at a greater config epoch over the assignment: were it the new
// owner, it has deleted the slot's keys (MoveSlot), so this is an error,
// never repaired (giving the slot back to the new owner would hide the
// lost keys from the test).
func (c *MovableCluster) settle(slot, to int) error {
	for i := range c.nodes {
		id, err := c.ownerSeenBy(i, slot)
		if err != nil {
			return fmt.Errorf("slot %d: CLUSTER NODES on %s: %w", slot, c.nodes[i].Addr(), err)
		}
		if id != c.ids[to] {
			return fmt.Errorf("slot %d: master %d sees it owned by %q after SETSLOT NODE %s: a claim at a greater config epoch took it over (its keys on the new owner may be deleted)", slot, i, id, c.ids[to])
		}
	}
	return nil
}

// awaitEpochs waits until master to knows every master's config epoch as
// that master has it (CLUSTER NODES), as gossip tells it.
func (c *MovableCluster) awaitEpochs(to int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		seen, err := c.epochsSeenBy(to)
		if err != nil {
			return err
		}
		known := true
		for i := range c.nodes {
			own, err := c.epochsSeenBy(i)
			if err != nil {
				return err
			}
			known = known && seen[c.ids[i]] == own[c.ids[i]]
		}
		if known {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("master %d does not know the other masters' config epochs after 10 s", to)
		}
		time.Sleep(5 * time.Millisecond) // polling for gossip
	}
}

// epochsSeenBy returns the config epoch of each node (by id) as master i
// sees it.
func (c *MovableCluster) epochsSeenBy(i int) (map[string]string, error) {
	nodes, err := command(c.nodes[i].Addr(), "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", c.nodes[i].Addr(), err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(nodes, "\n") {
		if f := strings.Fields(l); len(f) >= 7 {
			out[f[0]] = f[6] // id … config-epoch
		}
	}
	return out, nil
}

// ownerSeenBy returns the id of the master that master i sees owning
// slot ("" when it sees none).
func (c *MovableCluster) ownerSeenBy(i, slot int) (string, error) {
	nodes, err := command(c.nodes[i].Addr(), "CLUSTER", "NODES")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(nodes, "\n") {
		f := strings.Fields(l)
		if len(f) < 8 {
			continue
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, hi, _ := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if hi == "" {
				b, err2 = a, nil
			}
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				return f[0], nil
			}
		}
	}
	return "", nil
}

// ShuttleConfig bounds Shuttle.
type ShuttleConfig struct {
	// Moves is the most slot moves Shuttle makes (default 1000).
	Moves int
	// Hold is MoveSlot's hold: how long each move pauses after MIGRATING
	// and after each key.
	Hold time.Duration
}

// Shuttle moves each of slots to the next master and back again, slot
// after slot, until ctx ends or cfg.Moves moves are made, and returns
// the moves made. A move under way when ctx ends is finished (a slot is
// never left migrating). Each slot ends on the master that owned it
// before, unless ctx ended between a slot's move and its move back.
func (c *MovableCluster) Shuttle(ctx context.Context, slots []int, cfg ShuttleConfig) (int, error) {
	if cfg.Moves <= 0 {
		cfg.Moves = 1000
	}
	home := make([]int, len(slots))
	for i, s := range slots {
		o, err := c.Owner(s)
		if err != nil {
			return 0, err
		}
		home[i] = o
	}
	moves := 0
	for round := 0; moves < cfg.Moves; round++ {
		for i, s := range slots {
			if ctx.Err() != nil || moves >= cfg.Moves {
				return moves, nil
			}
			to := home[i]
			if round%2 == 0 {
				to = (home[i] + 1) % len(c.nodes)
			}
			if err := c.MoveSlot(s, to, cfg.Hold); err != nil {
				return moves, err
			}
			moves++
		}
	}
	return moves, nil
}

// AbandonMove starts moving slot to master to (SETSLOT IMPORTING on it,
// MIGRATING on the owner), keeps it so for hold, then abandons the move
// (SETSLOT STABLE on both) with every key where it was: for hold, a
// command on the owner naming a key of slot that it lacks is answered ASK
// (TRYAGAIN on the destination, for a command naming several keys).
func (c *MovableCluster) AbandonMove(slot, to int, hold time.Duration) error {
	from, err := c.Owner(slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("slot %d: master %d owns it already", slot, to)
	}
	s := strconv.Itoa(slot)
	if _, err := command(c.nodes[to].Addr(), "CLUSTER", "SETSLOT", s, "IMPORTING", c.ids[from]); err != nil {
		return fmt.Errorf("slot %d: SETSLOT IMPORTING on %s: %w", slot, c.nodes[to].Addr(), err)
	}
	if _, err := command(c.nodes[from].Addr(), "CLUSTER", "SETSLOT", s, "MIGRATING", c.ids[to]); err != nil {
		return fmt.Errorf("slot %d: SETSLOT MIGRATING on %s: %w", slot, c.nodes[from].Addr(), err)
	}
	time.Sleep(hold)
	for _, i := range []int{from, to} {
		if _, err := command(c.nodes[i].Addr(), "CLUSTER", "SETSLOT", s, "STABLE"); err != nil {
			return fmt.Errorf("slot %d: SETSLOT STABLE on %s: %w", slot, c.nodes[i].Addr(), err)
		}
	}
	return nil
}
