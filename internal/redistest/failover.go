package redistest

import (
	"strconv"
	"testing"
	"time"
)

// KillMaster kills the master with SIGKILL, as a crash would (no
// shutdown, no last write to its replica), and waits until the Sentinel
// has promoted the replica and it serves as master. The old master stays
// dead: afterwards z.Master is the promoted replica and z.Replica the dead
// server. What the master had not yet sent to its replica is lost.
func (z *Sentinel) KillMaster(t testing.TB) {
	t.Helper()
	z.Master.kill()
	want := strconv.Itoa(z.Replica.port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		port, _ := commandArray(z.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", z.Name)
		role, _ := commandArray(z.Replica.Addr(), "ROLE")
		if len(port) == 2 && port[1] == want && len(role) > 0 && role[0] == "master" {
			z.Master, z.Replica = z.Replica, z.Master
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: no failover to %s within 30s of killing the master (sentinel says %q, its role %q)", z.Replica.Addr(), port, role)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
