package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
)

// TestReplica: on a replica every decision fails at once with an error
// naming the replica's master (a *capability.ReplicaError), not with the
// server's READONLY at the first write, and Describe says why; once the
// replica is promoted the next decision runs there, without Redetect.
func TestReplica(t *testing.T) {
	master := redistest.NewServer(t)
	replica := redistest.NewReplica(t, master)
	c := goredis.NewClient(testserver.Patient(NewClientOptions(replica.Addr())).Simple())
	t.Cleanup(func() { c.Close() })
	lim := sdk.New(New(c, nil))
	ctx := context.Background()
	p, err := sdk.NewPolicy("rep", []sdk.Rule{sdk.FixedWindow("f", 5, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": "u"}
	check := func(what string, err error) {
		t.Helper()
		var re *capability.ReplicaError
		if !errors.As(err, &re) || re.Master != master.Addr() || !strings.Contains(err.Error(), "replica of "+master.Addr()) ||
			strings.Contains(err.Error(), "READONLY") {
			t.Errorf("%s error = %v, want a *capability.ReplicaError naming the master %s", what, err, master.Addr())
		}
	}
	_, err = lim.Allow(ctx, p, s)
	check("Allow", err)
	_, err = lim.Peek(ctx, p, sdk.Attempt{Subject: s})
	check("Peek", err)
	_, _, err = lim.Reserve(ctx, p, sdk.Attempt{Subject: s}, time.Minute)
	check("Reserve", err)
	_, err = lim.Admin().Inspect(ctx, p, s)
	check("Inspect", err)
	check("TakeBatch", lim.TakeBatch(ctx, p, []sdk.Attempt{{Subject: s}})[0].Err)
	d, err := lim.Admin().Describe(ctx)
	if err != nil || !strings.Contains(strings.Join(d.Notes, "\n"), "replica of "+master.Addr()) {
		t.Errorf("Describe() = %+v, %v; want a note naming the master", d, err)
	}

	if err := c.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := lim.Allow(ctx, p, s); err != nil || !d.Allowed {
		t.Errorf("Allow after promotion = %+v, %v; want allowed", d, err)
	}
}
