package bench

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

// adPolicies returns the ad shape's policies of testdata/bench-policies.yaml.
func adPolicies(t *testing.T) []*sdk.Policy {
	t.Helper()
	ps, err := policyfile.LoadFile("../../testdata/bench-policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ad []*sdk.Policy
	for _, p := range ps {
		if strings.HasPrefix(p.Name(), "ad-") {
			ad = append(ad, p)
		}
	}
	if len(ad) != 3 {
		t.Fatalf("testdata/bench-policies.yaml has %d ad-* policies, want 3 (fixed, sliding, log)", len(ad))
	}
	return ad
}

// TestPrefill: after the pre-fill of K values, Redis holds for every
// subject K units of its user rule and one of its campaign rule for each of
// the K values, and none for a value beyond them.
func TestPrefill(t *testing.T) {
	addr := redistest.NewServer(t).Addr()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	const subjects, k = 7, 5
	for _, p := range adPolicies(t) {
		t.Run(p.Name(), func(t *testing.T) {
			lim := sdk.New(redis.New(c, nil), sdk.WithPrefix("prefill-"+p.Name()))
			gen := newSubjects(p, subjects, k)
			st, err := prefill(ctx, lim, p, gen, subjects, k, 3)
			if err != nil {
				t.Fatal(err)
			}
			if st.takes != subjects*k || st.allowed != subjects*k {
				t.Errorf("prefill: %d takes, %d allowed; want %d of each", st.takes, st.allowed, subjects*k)
			}
			beyond := newSubjects(p, subjects, k+1) // its value k is one the pre-fill did not take
			for j := range subjects {
				for v := range k + 1 {
					s := gen.subject(j, v)
					wantCampaign := int64(1)
					if v == k {
						s, wantCampaign = beyond.subject(j, v), 0
					}
					in, err := lim.Admin().Inspect(ctx, p, s)
					if err != nil {
						t.Fatal(err)
					}
					used := map[string]int64{}
					for _, r := range in.Rules {
						used[r.Rule] = r.Used
					}
					if used["user-day"] != k || used["campaign-day"] != wantCampaign {
						t.Errorf("subject %d, value %d (%v): used %v, want user-day %d, campaign-day %d", j, v, s, used, k, wantCampaign)
					}
				}
			}
		})
	}
	// A policy without a dimension outside its shard dimensions has no
	// values to pre-fill.
	ps, err := policyfile.LoadFile("../../testdata/bench-policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPrefill(ps[0]); err == nil || !strings.Contains(err.Error(), "no dimension outside its shard dimensions") {
		t.Errorf("checkPrefill(%s) = %v, want an error", ps[0].Name(), err)
	}
}

// TestRunPrefill runs -prefill 1,3 with -raw and -memory: each K in turn,
// each run of the policy pre-filled, and the memory per live value.
func TestRunPrefill(t *testing.T) {
	if testing.Short() {
		t.Skip("bench runs take a few seconds")
	}
	addr := redistest.NewServer(t).Addr()
	cfg := Config{
		Redis:  &goredis.UniversalOptions{Addrs: []string{addr}},
		Target: addr, Policy: adPolicies(t)[0],
		// 1 000 subjects: their memory (hundreds of KB) stands above
		// used_memory's own movements (client buffers: tens of KB).
		Workers: 4, Duration: 200 * time.Millisecond, Subjects: 1000,
		Prefill: []int{1, 3}, Raw: true, Memory: true, Coalesce: -1,
	}
	var buf bytes.Buffer
	if err := Run(context.Background(), cfg, &buf); err != nil {
		t.Fatalf("Run = %v\n%s", err, buf.String())
	}
	out := buf.String()
	for _, l := range []string{
		`^freqcap bench: .*policy "ad-fixed" \(2 rules\), .* 1000 subjects, 1 values per other dimension \(pre-filled: each subject has them all live\)$`,
		`^pre-fill of policy ad-fixed: 1000 takes \(1000 subjects x 1 values\) in .*, allowed 1000, denied 0$`,
		`^pre-fill of policy ad-fixed, coalesce off: 1000 takes \(1000 subjects x 1 values\) in .*, allowed 1000, denied 0$`,
		`^pre-fill of policy ad-fixed: 3000 takes \(1000 subjects x 3 values\) in .*, allowed 3000, denied 0$`,
		`^memory: [1-9][0-9]* bytes per subject, [0-9.]+ per live value \(3 values live for each of 1000 subjects; `,
		`^ratio policy ad-fixed / raw\(2\) INCRBY\+PEXPIRE on 2 keys: [0-9.]+ `,
		`^cleanup: deleted [1-9][0-9]* keys under bench-k3:\* `,
	} {
		if !regexp.MustCompile("(?m)" + l).MatchString(out) {
			t.Errorf("Run: no line matches %s:\n%s", l, out)
		}
	}
	if strings.Contains(out, "first error") {
		t.Errorf("Run reported errors:\n%s", out)
	}
	for _, bad := range []Config{
		{Redis: cfg.Redis, Prefill: []int{0}},
		{Redis: cfg.Redis, Prefill: []int{2}, Hot: true, Policy: cfg.Policy},
	} {
		if err := Run(context.Background(), bad, &buf); err == nil {
			t.Errorf("Run(%+v) = nil, want an error", bad)
		}
	}
}

// TestRunWideFloor runs -prefill 40 with -raw and -wide-floor: the wide
// floor one EVALSHA per decision and coalesced, four commands per
// decision, its ratios printed, its keys cleaned up with the rest.
func TestRunWideFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("bench runs take a few seconds")
	}
	addr := redistest.NewServer(t).Addr()
	cfg := Config{
		Redis:  &goredis.UniversalOptions{Addrs: []string{addr}},
		Target: addr, Policy: adPolicies(t)[0],
		Workers: 8, Duration: 200 * time.Millisecond, Subjects: 50,
		Prefill: []int{40}, Raw: true, WideFloor: true,
	}
	var buf bytes.Buffer
	if err := Run(context.Background(), cfg, &buf); err != nil {
		t.Fatalf("Run = %v\n%s", err, buf.String())
	}
	out := buf.String()
	for _, l := range []string{
		`^wide floor: GET, HGET, HSET, SET per decision, one EVALSHA each: .* errors 0; .* 1\.00 scripts \(EVALSHA/EVAL\), 5\.00 commands inside scripts`,
		`^wide floor, coalesced: .* errors 0; .* 4\.[0-9]+ commands inside scripts`,
		`^ratio policy ad-fixed / wide floor, coalesced: .*: [0-9.]+ `,
		`^ratio wide floor, coalesced: .* / raw\(2\) INCRBY\+PEXPIRE on 2 keys: [0-9.]+ `,
		`^cleanup: deleted [1-9][0-9]* keys under bench-k40:\* `,
	} {
		if !regexp.MustCompile("(?m)" + l).MatchString(out) {
			t.Errorf("Run: no line matches %s:\n%s", l, out)
		}
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	if n := c.DBSize(context.Background()).Val(); n != 0 {
		t.Errorf("%d keys left after the run's cleanup", n)
	}
}
