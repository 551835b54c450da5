package console

import (
	"context"
	"fmt"
	"html"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fcredis "github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policystore"
)

type fixedSource struct {
	v    int64
	pols []*sdk.Policy
}

func (s fixedSource) Current() *policystore.Snapshot {
	return &policystore.Snapshot{Version: s.v, Policies: s.pols}
}

// TestOverviewNotBehindRightAfterApply: a named service (the console
// itself, ServiceName) that announced version 1 and then, after an
// apply, version 2 is not "behind": its version-1 announcement, still
// within the overview's window, is superseded by its newer one. An
// unnamed process's version 1 still warns (nothing says it moved on).
func TestOverviewNotBehindRightAfterApply(t *testing.T) {
	addr := redistest.Standalone(t)
	rdb := goredis.NewClient(fcredis.NewClientOptions(addr).Simple())
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	prefix := fmt.Sprintf("ann-%s-%d", t.Name(), time.Now().UnixNano()) // fresh under -count
	backend := fcredis.New(rdb, nil)
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	announce := func(service string, versions ...int64) {
		t.Helper()
		rec, err := fleet.NewRecorder(backend, &fleet.Options{Prefix: prefix, FlushEvery: -1, Service: service})
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Close()
		for _, v := range versions {
			rec.SetPolicyVersion(v)
			rec.Announce(pols...)
			if err := rec.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	overview := func() string {
		t.Helper()
		srv, err := New(Config{Limiter: sdk.New(backend, sdk.WithPrefix(prefix)), Fleet: fleetOf(backend, &fleet.Options{Prefix: prefix}),
			Source: fixedSource{v: 2, pols: pols}})
		if err != nil {
			t.Fatal(err)
		}
		return html.UnescapeString(readBody(t, (&fixture{srv: srv}).do(t, req{path: "/"})))
	}
	announce(ServiceName(), 1, 2)
	if body := overview(); strings.Contains(body, "behind") {
		t.Errorf("right after an apply, the overview warns of a service behind:\n%s", body)
	}
	announce("", 1)
	if body := overview(); !strings.Contains(body, "at store version 1, behind this console's version 2") {
		t.Errorf("an unnamed process at version 1 is not warned of:\n%s", body)
	}
}
