package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

// pushRules is the seed policy's rule set for one subject: two rules by
// user, two by user+content.
func pushRules(s subject, content string) []driver.Rule {
	r := []driver.Rule{
		s.sliding("recv-1m", 15, time.Minute, 10),
		s.sliding("recv-24h", 50, 24*time.Hour, 10),
		s.sliding("content-59s", 2, 59*time.Second, 10),
		s.sliding("content-59m", 5, 59*time.Minute, 10),
	}
	r[2].Key = s.key("content-59s", content)
	r[3].Key = s.key("content-59m", content)
	return r
}

func TestClusterMasters(t *testing.T) {
	b, c := cluster(t)
	ctx := context.Background()
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner := func(slot int64) string {
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) {
				return r.Nodes[0].Addr
			}
		}
		return ""
	}
	masters := map[string]bool{}
	for _, r := range slots {
		masters[r.Nodes[0].Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("cluster has %d masters, want 3", len(masters))
	}
	// Find a subject on each master, then decide for each.
	found := map[string]subject{}
	for i := 0; len(found) < len(masters) && i < 1000; i++ {
		s := newSubject(t, fmt.Sprintf("u%d", i))
		slot, err := c.ClusterKeySlot(ctx, s.trail()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if a := owner(slot); a != "" && found[a].base == "" {
			found[a] = s
		}
	}
	if len(found) != 3 {
		t.Fatalf("found subjects on %d masters, want 3", len(found))
	}
	for addr, s := range found {
		t.Run(addr, func(t *testing.T) {
			rules := pushRules(s, "c1")
			for i := int64(1); i <= 3; i++ {
				res := take(t, b, s.request(opTake, 1, rules...))
				if want := i <= 2; res.Allowed != want {
					t.Errorf("take #%d allowed = %v, want %v (content-59s limit 2)", i, res.Allowed, want)
				}
			}
			req := s.request(opReserve, 1, pushRules(s, "c2")...)
			req.ReservationID, req.ReservationTTL = "h", time.Minute
			take(t, b, req)
			if err := b.Cancel(ctx, s.reservations(), "h"); err != nil {
				t.Errorf("Cancel: %v", err)
			}
			res := take(t, b, s.request(opInspect, 0, rules...))
			if len(res.Trail) != 1 || res.Trail[0].Rule != "content-59s" {
				t.Errorf("trail = %+v, want one content-59s denial", res.Trail)
			}
			if err := b.Reset(ctx, s.request(opTake, 1, rules...).Request); err != nil {
				t.Errorf("Reset: %v", err)
			}
			n, _ := c.Exists(ctx, rules[0].Key).Result()
			if n != 0 {
				t.Errorf("Reset left state")
			}
		})
	}
}

func TestClusterHostileSubject(t *testing.T) {
	b, c := cluster(t)
	ctx := context.Background()
	s := newSubject(t, "用户{a}:b}%{{:🙂 x")
	content := "内容 {hash}:tag%"
	if strings.Count(s.base, "{") != 1 || strings.Count(s.base, "}") != 1 {
		t.Fatalf("escaped base %q has more than one brace pair", s.base)
	}
	rules := pushRules(s, content)
	keys := []string{s.trail(), s.reservations()}
	for _, r := range rules {
		keys = append(keys, r.Key)
	}
	slot0, _ := c.ClusterKeySlot(ctx, keys[0]).Result()
	for _, k := range keys {
		if sl, _ := c.ClusterKeySlot(ctx, k).Result(); sl != slot0 {
			t.Fatalf("key %q in slot %d, want %d (one hash tag)", k, sl, slot0)
		}
	}
	for i := int64(1); i <= 3; i++ {
		res := take(t, b, s.request(opTake, 1, rules...))
		if want := i <= 2; res.Allowed != want {
			t.Errorf("take #%d allowed = %v, want %v", i, res.Allowed, want)
		}
	}
	if n, _ := c.Exists(ctx, rules[2].Key).Result(); n != 1 {
		t.Errorf("state key %q not found", rules[2].Key)
	}
}

func TestClusterScriptFlush(t *testing.T) {
	b, c := cluster(t)
	ctx := context.Background()
	s := newSubject(t, "cflush")
	r := s.fixed("f", 10, time.Hour)
	for i := int64(1); i <= 2; i++ {
		if err := c.ForEachMaster(ctx, func(ctx context.Context, m *goredisClient) error {
			return m.ScriptFlush(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
		res := take(t, b, s.request(opTake, 1, r))
		checkRule(t, "take after SCRIPT FLUSH", res.Rules[0], true, i, 10)
	}
}

// TestClusterWideSubject: a person with 80 live campaigns on a cluster
// (the root goes wide: its hash, lua.WideSuffix, shares the root's slot):
// takes, a denial, a reservation cancelled, Inspect and resets, on fast
// scripts (handing the wide root to take.lua) and on take.lua.
func TestClusterWideSubject(t *testing.T) {
	b, c := cluster(t)
	ctx := context.Background()
	s := newSubject(t, "wide")
	user := driver.Rule{Name: "user", Key: s.key("user"), Group: s.base + "=", Algorithm: driver.FixedWindow, Limit: 1000, Window: 24 * time.Hour}
	rules := func(campaign string) []driver.Rule {
		return []driver.Rule{user, {Name: "campaign", Key: s.key("campaign", campaign), Group: s.base + "=c:" + campaign,
			Algorithm: driver.FixedWindow, Limit: 3, Window: 24 * time.Hour}}
	}
	for i := range 80 {
		if res := take(t, b, s.request(opTake, 1, rules(fmt.Sprintf("k%d", i))...)); !res.Allowed {
			t.Fatalf("take of campaign %d denied", i)
		}
	}
	root := s.base + "="
	if v := c.Get(ctx, root).Val(); len(v) == 0 || v[0] != lua.WideFormat {
		t.Fatalf("root not wide after 80 campaigns (%d bytes)", len(v))
	}
	rs, _ := c.ClusterKeySlot(ctx, root).Result()
	if ws, _ := c.ClusterKeySlot(ctx, wideKey(root)).Result(); ws != rs {
		t.Fatalf("wide hash in slot %d, root in %d", ws, rs)
	}
	if n := c.HLen(ctx, wideKey(root)).Val(); n != 80 {
		t.Errorf("wide hash holds %d fields, want 80", n)
	}
	for i, want := range []bool{true, true, false} { // campaign k1 had 1 of 3
		res := take(t, b, s.request(opTake, 1, rules("k1")...))
		if res.Allowed != want || res.Rules[0].Used != int64(81+min(i, 1)) {
			t.Errorf("take #%d of k1: allowed %v user used %d, want %v", i+2, res.Allowed, res.Rules[0].Used, want)
		}
	}
	req := s.request(opReserve, 2, rules("k2")...)
	req.ReservationID, req.ReservationTTL = "h", time.Minute
	if res := take(t, b, req); !res.Allowed || res.Rules[1].Used != 3 {
		t.Fatalf("reserve 2 of k2: %s", resLine(res))
	}
	if err := b.Cancel(ctx, s.reservations(), "h"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	res := take(t, b, s.request(opInspect, 0, rules("k2")...))
	if res.Rules[1].Used != 1 || len(res.Trail) != 1 || res.Trail[0].Rule != "campaign" {
		t.Errorf("inspect of k2: %s, trail %+v; want k2 used 1 (the reservation given back), one campaign denial", resLine(res), res.Trail)
	}
	if err := b.Reset(ctx, driver.Request{Policy: "p", Rules: rules("k1")[1:]}); err != nil {
		t.Fatalf("ResetRules of k1: %v", err)
	}
	for _, tc := range []struct {
		campaign string
		used     int64
	}{{"k1", 0}, {"k3", 1}} {
		if res := take(t, b, s.request(opPeek, 1, rules(tc.campaign)...)); res.Rules[1].Used != tc.used {
			t.Errorf("after the reset of k1, %s used %d, want %d", tc.campaign, res.Rules[1].Used, tc.used)
		}
	}
}
