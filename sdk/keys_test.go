package sdk_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

func mustPolicy(t *testing.T, name string, rules ...sdk.Rule) *sdk.Policy {
	t.Helper()
	p, err := sdk.NewPolicy(name, rules)
	if err != nil {
		t.Fatalf("NewPolicy(%q) = %v", name, err)
	}
	return p
}

// keysPolicy is the key tests' policy: one rule by user, one by user and
// content.
func keysPolicy(t *testing.T) *sdk.Policy {
	t.Helper()
	return mustPolicy(t, "push",
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
	)
}

// ownKeys flattens lim.KeyLayout(p, s) into the rules' own keys in policy
// order, then the trail's and the reservations' keys (nil: no layout).
func ownKeys(lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject) []string {
	l := lim.Admin().KeyLayout(p, s)
	if l.Trail == "" {
		return nil
	}
	own, _ := ruleKeys(l, p)
	return append(own, l.Trail, l.Reservations)
}

// setKeys is, for each rule of lim.KeyLayout(p, s) in policy order, its
// set's key (nil: no layout).
func setKeys(lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject) []string {
	_, sets := ruleKeys(lim.Admin().KeyLayout(p, s), p)
	return sets
}

// ruleKeys lists, for each rule of l in p's order, its own key and its
// set's key.
func ruleKeys(l sdk.KeyLayout, p *sdk.Policy) (own, sets []string) {
	for _, r := range p.Rules() {
		for _, set := range l.Sets {
			for _, rk := range set.Rules {
				if rk.Rule == r.Name {
					own, sets = append(own, rk.Key), append(sets, set.Key)
				}
			}
		}
	}
	return own, sets
}

var keyRE = regexp.MustCompile(`^fc:\{([^{}]*)\}:push:(recv-1m|content-59s)\.([a-z2-7]{6})(:[^{}:]+)?$`)

func TestKeysScheme(t *testing.T) {
	p := keysPolicy(t)
	lim := sdk.New(nil)
	keys := ownKeys(lim, p, sdk.Subject{"user": "u1", "content": "c1"})
	if len(keys) != 4 {
		t.Fatalf("Keys(…) = %q, want 4 keys", keys)
	}
	for i, want := range []string{`^fc:\{u1\}:push:recv-1m\.[a-z2-7]{6}$`, `^fc:\{u1\}:push:content-59s\.[a-z2-7]{6}:c1$`, `^fc:\{u1\}:push:!t$`, `^fc:\{u1\}:push:!h$`} {
		if !regexp.MustCompile(want).MatchString(keys[i]) {
			t.Errorf("Keys(…)[%d] = %q, want match %s", i, keys[i], want)
		}
	}
	// A partial subject gives the keys it can; a missing shard value none.
	if got := ownKeys(lim, p, sdk.Subject{"user": "u1"}); len(got) != 3 || !strings.Contains(got[0], "recv-1m") {
		t.Errorf("Keys(user only) = %q, want recv-1m, trail and hold keys", got)
	}
	if got := ownKeys(lim, p, sdk.Subject{"content": "c1"}); got != nil {
		t.Errorf("Keys(no user) = %q, want nil", got)
	}
	if got := ownKeys(lim, nil, sdk.Subject{"user": "u1"}); got != nil {
		t.Errorf("Keys(nil policy) = %q, want nil", got)
	}
	// Multi-value hash tag: shard values in ShardBy order, ':'-separated.
	p2 := mustPolicy(t, "ads", sdk.FixedWindow("a", 3, time.Hour).By("campaign", "user"))
	if got, want := ownKeys(sdk.New(nil), p2, sdk.Subject{"user": "u", "campaign": "c"})[0], "fc:{c:u}:ads:a."; !strings.HasPrefix(got, want) {
		t.Errorf("Keys(ads)[0] = %q, want prefix %q", got, want)
	}
}

func TestKeysEscaping(t *testing.T) {
	p := keysPolicy(t)
	values := []string{
		"a", "b", "{", "}", "{a}", "}{", ":", "a:b", "a%3Ab", "%", "%25", "%7B", "a b", " ", "\t", "\n",
		"\x00", "\x7f", "x\x20y", "用户", "ユーザー}", "😀", "é", "e\u0301", "a\xffb", "{}:%", "a{b}c:d%e f",
	}
	lim := sdk.New(nil)
	seen := map[string]string{}
	for _, u := range values {
		for _, c := range values {
			s := sdk.Subject{"user": u, "content": c}
			keys := ownKeys(lim, p, s)
			if len(keys) != 4 {
				t.Fatalf("Keys(%q, %q) = %q, want 4 keys", u, c, keys)
			}
			for i, k := range keys[:2] {
				if n := strings.Count(k, "{"); n != 1 {
					t.Errorf("Keys(%q, %q)[%d] = %q has %d '{', want 1", u, c, i, k, n)
				}
				if n := strings.Count(k, "}"); n != 1 {
					t.Errorf("Keys(%q, %q)[%d] = %q has %d '}', want 1", u, c, i, k, n)
				}
				m := keyRE.FindStringSubmatch(k)
				if m == nil {
					t.Errorf("Keys(%q, %q)[%d] = %q, want match %s", u, c, i, k, keyRE)
					continue
				}
				if got, want := m[1], escape(u); got != want {
					t.Errorf("hash tag of Keys(%q, %q)[%d] = %q, want %q", u, c, i, got, want)
				}
				id := fmt.Sprintf("%q/%q/%d", u, c, i)
				if i == 0 {
					id = fmt.Sprintf("%q/%d", u, i) // recv-1m is keyed by user only
				}
				if prev, dup := seen[k]; dup && prev != id {
					t.Errorf("key %q for %s collides with %s", k, id, prev)
				}
				seen[k] = id
			}
		}
	}
}

// escape is the reference escaping of docs/DESIGN.md.
func escape(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x21 || c == 0x7f || strings.IndexByte("%{}:", c) >= 0 {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func TestKeysPrefix(t *testing.T) {
	p := mustPolicy(t, "p", sdk.FixedWindow("a", 1, time.Second).By("user"))
	tests := []struct{ prefix, want string }{
		{"", "fc:{u}:p:"},
		{"push", "push:{u}:p:"},
		{"my.app_v-2", "my.app_v-2:{u}:p:"},
		{"a{b}", "a%7Bb%7D:{u}:p:"},
		{"a:b", "a%3Ab:{u}:p:"},
		{"a%3Ab", "a%253Ab:{u}:p:"},
		{"x y", "x%20y:{u}:p:"},
	}
	for _, tc := range tests {
		t.Run(tc.prefix, func(t *testing.T) {
			keys := ownKeys(sdk.New(nil, sdk.WithPrefix(tc.prefix)), p, sdk.Subject{"user": "u"})
			if len(keys) == 0 || !strings.HasPrefix(keys[0], tc.want) {
				t.Fatalf("Keys(WithPrefix(%q)) = %q, want prefix %q", tc.prefix, keys, tc.want)
			}
			if strings.Count(keys[0], "{") != 1 || strings.Count(keys[0], "}") != 1 {
				t.Fatalf("Keys(WithPrefix(%q))[0] = %q, want exactly one hash tag", tc.prefix, keys[0])
			}
		})
	}
}

// TestRuleIdentity: the key id changes with algorithm, window, sub-windows,
// calendar unit (hour, day, week, month) and zone, and not with limit or
// burst.
func TestRuleIdentity(t *testing.T) {
	loc := shanghai(t)
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	key := func(r sdk.Rule) string {
		t.Helper()
		p := mustPolicy(t, "p", r.By("user"))
		return ownKeys(sdk.New(nil), p, sdk.Subject{"user": "u"})[0]
	}
	base := sdk.SlidingWindow("r", 10, time.Minute)
	same := []sdk.Rule{
		sdk.SlidingWindow("r", 11, time.Minute),
		base.WithSubWindows(10),
	}
	for _, r := range same {
		if got, want := key(r), key(base); got != want {
			t.Errorf("key(%+v) = %q, want %q (same identity)", r, got, want)
		}
	}
	if key(sdk.GCRA("r", 10, time.Minute, 0)) != key(sdk.GCRA("r", 20, time.Minute, 5)) {
		t.Error("key of a GCRA rule changed with limit/burst, want the same")
	}
	differ := []sdk.Rule{
		sdk.SlidingWindow("r", 10, 2*time.Minute),
		base.WithSubWindows(6),
		sdk.FixedWindow("r", 10, time.Minute),
		sdk.SlidingLog("r", 10, time.Minute),
		sdk.GCRA("r", 10, time.Minute, 0),
		sdk.SlidingWindow("r2", 10, time.Minute),
	}
	seen := map[string]int{key(base): -1}
	for i, r := range differ {
		k := key(r)
		if j, dup := seen[k]; dup {
			t.Errorf("key(%+v) = %q, same as rule %d, want a new identity", r, k, j)
		}
		seen[k] = i
	}
	if key(sdk.Daily("r", 1, loc)) == key(sdk.Daily("r", 1, ny)) {
		t.Error("calendar rules in different zones share a key, want distinct")
	}
	if key(sdk.Daily("r", 1, loc)) == key(sdk.Hourly("r", 1, loc)) {
		t.Error("day and hour calendar rules share a key, want distinct")
	}
	if key(sdk.Daily("r", 1, loc)) == key(sdk.FixedWindow("r", 1, 24*time.Hour)) {
		t.Error("calendar day and epoch 24h rules share a key, want distinct")
	}
	units := map[string]sdk.Rule{
		"hour": sdk.Hourly("r", 1, loc), "day": sdk.Daily("r", 1, loc), "week": sdk.Weekly("r", 1, loc), "month": sdk.Monthly("r", 1, loc),
		"epoch 7d": sdk.FixedWindow("r", 1, 7*24*time.Hour), "epoch 31d": sdk.FixedWindow("r", 1, 31*24*time.Hour),
	}
	byKey := map[string]string{}
	for name, r := range units {
		if other, dup := byKey[key(r)]; dup {
			t.Errorf("%s and %s rules share a key, want distinct", name, other)
		}
		byKey[key(r)] = name
	}
}

func TestFingerprint(t *testing.T) {
	a, b := sdk.Fingerprint("hello"), sdk.Fingerprint("hello!")
	if a != sdk.Fingerprint("hello") {
		t.Error("Fingerprint is not stable")
	}
	if a == b {
		t.Errorf("Fingerprint(hello) = Fingerprint(hello!) = %q", a)
	}
	if !regexp.MustCompile(`^[a-z2-7]{16}$`).MatchString(a) {
		t.Errorf("Fingerprint(hello) = %q, want 16 lowercase base32 characters", a)
	}
}

// TestSetKeys: rules with the same dimensions share their set's key,
// whatever the order of the dimensions; other sets, subjects and policies
// have other keys; no group key is a rule key.
func TestSetKeys(t *testing.T) {
	p := mustPolicy(t, "push",
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("recv-24h", 50, 24*time.Hour).By("user"),
		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content", "channel"),
		sdk.SlidingWindow("content-59m", 5, 59*time.Minute).By("channel", "content", "user"),
	)
	lim := sdk.New(nil)
	s := sdk.Subject{"user": "u:1", "content": "c{1}", "channel": "sms"}
	g := setKeys(lim, p, s)
	want := []string{"fc:{u%3A1}:push:=", "fc:{u%3A1}:push:=", "fc:{u%3A1}:push:=channel,content:sms:c%7B1%7D", "fc:{u%3A1}:push:=channel,content:sms:c%7B1%7D"}
	if !slices.Equal(g, want) {
		t.Errorf("GroupKeys(…) = %q, want %q", g, want)
	}
	for _, k := range ownKeys(lim, p, s) {
		if slices.Contains(g, k) {
			t.Errorf("key %q is both a rule's key and a group key", k)
		}
	}
	if other := setKeys(lim, p, sdk.Subject{"user": "u:2", "content": "c{1}", "channel": "sms"}); other[0] == g[0] || other[2] == g[2] {
		t.Errorf("GroupKeys of another user = %q, want other keys than %q", other, g)
	}
	if got := setKeys(lim, p, sdk.Subject{"user": "u:1"}); len(got) != 2 {
		t.Errorf("GroupKeys(user only) = %q, want the 2 rules on user", got)
	}
	if got := setKeys(lim, p, sdk.Subject{"content": "c"}); got != nil {
		t.Errorf("GroupKeys(no user) = %q, want nil", got)
	}
}

// TestKeysLongerThanSeen: the keys of a subject longer than any seen
// before (the buffer they are cut from grows) are whole and right, and
// so are those of a shorter one after it.
func TestKeysLongerThanSeen(t *testing.T) {
	p := keysPolicy(t)
	lim := sdk.New(nil)
	short := ownKeys(lim, p, sdk.Subject{"user": "u1", "content": "c1"})
	id := strings.TrimPrefix(short[0], "fc:{u1}:push:recv-1m.")
	cid := strings.TrimSuffix(strings.TrimPrefix(short[1], "fc:{u1}:push:content-59s."), ":c1")
	for _, n := range []int{1, 60, 3, sdk.MaxValueLen / 2, 2} { // "c:" * n is at most MaxValueLen
		u, c := strings.Repeat("u", n), strings.Repeat("c:", n)
		got := ownKeys(lim, p, sdk.Subject{"user": u, "content": c})
		ce := strings.Repeat("c%3A", n)
		want := []string{"fc:{" + u + "}:push:recv-1m." + id, "fc:{" + u + "}:push:content-59s." + cid + ":" + ce, "fc:{" + u + "}:push:!t", "fc:{" + u + "}:push:!h"}
		if !slices.Equal(got, want) {
			t.Errorf("Keys(user of %d bytes) = %q, want %q", n, got, want)
		}
		g := setKeys(lim, p, sdk.Subject{"user": u, "content": c})
		if wg := []string{"fc:{" + u + "}:push:=", "fc:{" + u + "}:push:=content:" + ce}; !slices.Equal(g, wg) {
			t.Errorf("GroupKeys(user of %d bytes) = %q, want %q", n, g, wg)
		}
	}
}

// TestKeyLayout: the layout groups the rules by set of dimensions (sets
// in order of their first rule, rules in policy order), says each set's
// sorted dimensions, and names the trail and the reservations.
func TestKeyLayout(t *testing.T) {
	p := mustPolicy(t, "push",
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
		sdk.SlidingWindow("recv-24h", 50, 24*time.Hour).By("user"),
	)
	l := sdk.New(nil).Admin().KeyLayout(p, sdk.Subject{"user": "u:1", "content": "c1"})
	if l.Trail != "fc:{u%3A1}:push:!t" || l.Reservations != "fc:{u%3A1}:push:!h" {
		t.Errorf("Trail, Reservations = %q, %q, want fc:{u%%3A1}:push:!t and !h", l.Trail, l.Reservations)
	}
	if len(l.Sets) != 2 {
		t.Fatalf("Sets = %+v, want 2", l.Sets)
	}
	user, content := l.Sets[0], l.Sets[1]
	if user.Key != "fc:{u%3A1}:push:=" || !slices.Equal(user.Dimensions, []string{"user"}) || len(user.Rules) != 2 ||
		user.Rules[0].Rule != "recv-1m" || user.Rules[1].Rule != "recv-24h" {
		t.Errorf("Sets[0] = %+v, want key fc:{u%%3A1}:push:=, [user], recv-1m and recv-24h", user)
	}
	if content.Key != "fc:{u%3A1}:push:=content:c1" || !slices.Equal(content.Dimensions, []string{"content", "user"}) ||
		len(content.Rules) != 1 || content.Rules[0].Rule != "content-59s" || !strings.HasSuffix(content.Rules[0].Key, ":c1") {
		t.Errorf("Sets[1] = %+v, want key fc:{u%%3A1}:push:=content:c1, [content user], content-59s", content)
	}
	if got := sdk.New(nil).Admin().KeyLayout(p, sdk.Subject{"content": "c1"}); got.Sets != nil || got.Trail != "" {
		t.Errorf("KeyLayout(no user) = %+v, want the zero layout", got)
	}
}
