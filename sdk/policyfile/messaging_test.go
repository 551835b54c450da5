package policyfile_test

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

const messagingDoc = `
policies:
  - name: push
    person: user
    quiet_hours: {zone: Europe/Berlin, periods: [{from: "21:00", to: "08:00", days: [mon, tue, wed, thu, fri]}, {from: "20:00", to: "9:30"}]}
    classes:
      - {name: otp, exempt: all, counted: true, quiet_hours: true}
      - {name: security, exempt: all}
      - {name: alert, quiet_hours: true}
      - {name: receipt, exempt: [recv-24h]}
    rules:
      - {name: recv-1m, algorithm: sliding_window, limit: 15, window: 1m, by: [user]}
      - {name: recv-24h, algorithm: sliding_window, limit: 50, window: 24h, by: [user], headroom: [{priority: 1, keep: 10}, {priority: 5, keep: 2}]}
`

func TestLoadMessaging(t *testing.T) {
	ps, err := policyfile.Load(strings.NewReader(messagingDoc))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	p := ps[0]
	if got := p.Person(); got != "user" {
		t.Errorf("Person() = %q, want user", got)
	}
	loc, periods := p.QuietHours()
	if loc.String() != "Europe/Berlin" {
		t.Errorf("QuietHours() zone = %v, want Europe/Berlin", loc)
	}
	wantQ := []sdk.QuietPeriod{
		{From: 21 * time.Hour, To: 8 * time.Hour, Days: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}},
		{From: 20 * time.Hour, To: 9*time.Hour + 30*time.Minute},
	}
	if !slices.EqualFunc(periods, wantQ, func(a, b sdk.QuietPeriod) bool {
		return a.From == b.From && a.To == b.To && slices.Equal(a.Days, b.Days)
	}) {
		t.Errorf("QuietHours() periods = %v, want %v", periods, wantQ)
	}
	wantC := []sdk.Class{
		{Name: "otp", AllRules: true, Counted: true, QuietHours: true},
		{Name: "security", AllRules: true},
		{Name: "alert", QuietHours: true},
		{Name: "receipt", Rules: []string{"recv-24h"}},
	}
	if got := p.Classes(); !slices.EqualFunc(got, wantC, func(a, b sdk.Class) bool {
		return a.Name == b.Name && a.AllRules == b.AllRules && slices.Equal(a.Rules, b.Rules) && a.Counted == b.Counted && a.QuietHours == b.QuietHours
	}) {
		t.Errorf("Classes() = %+v, want %+v", got, wantC)
	}
	rules := p.Rules()
	if len(rules[0].Headroom) != 0 {
		t.Errorf("Rules()[0].Headroom = %v, want none", rules[0].Headroom)
	}
	if want := []sdk.Headroom{{Priority: 1, Keep: 10}, {Priority: 5, Keep: 2}}; !slices.Equal(rules[1].Headroom, want) {
		t.Errorf("Rules()[1].Headroom = %v, want %v", rules[1].Headroom, want)
	}
	// The file's words for them, as SettingChanges and plans write them.
	if got, want := policyfile.QuietHours(p.QuietHours()), `{zone: Europe/Berlin, periods: [{from: "21:00", to: "08:00", days: [mon, tue, wed, thu, fri]}, {from: "20:00", to: "09:30"}]}`; got != want {
		t.Errorf("QuietHours(…) = %s, want %s", got, want)
	}
	if got, want := policyfile.Headroom(rules[1].Headroom), "[{priority: 1, keep: 10}, {priority: 5, keep: 2}]"; got != want {
		t.Errorf("Headroom(…) = %s, want %s", got, want)
	}
	if got, want := policyfile.Class(wantC[0]), "{name: otp, exempt: all, counted: true, quiet_hours: true}"; got != want {
		t.Errorf("Class(otp) = %s, want %s", got, want)
	}
	if got, want := policyfile.Class(wantC[3]), "{name: receipt, exempt: [recv-24h]}"; got != want {
		t.Errorf("Class(receipt) = %s, want %s", got, want)
	}
}

// TestMessagingWrittenReadBack: what QuietHours, Class and Headroom write
// is the file's own syntax: a policy written with them loads as the same.
func TestMessagingWrittenReadBack(t *testing.T) {
	ps, err := policyfile.Parse([]byte(messagingDoc), "a")
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	var b strings.Builder
	b.WriteString("policies:\n  - name: push\n    person: user\n    quiet_hours: " + policyfile.QuietHours(p.QuietHours()) + "\n    classes:\n")
	for _, c := range p.Classes() {
		b.WriteString("      - " + policyfile.Class(c) + "\n")
	}
	b.WriteString("    rules:\n")
	for _, r := range p.Rules() {
		h := ""
		if len(r.Headroom) > 0 {
			h = ", headroom: " + policyfile.Headroom(r.Headroom)
		}
		b.WriteString("      - {name: " + r.Name + ", algorithm: sliding_window, limit: " + itoa(r.Limit) + ", window: " + r.Window.String() + ", by: [user]" + h + "}\n")
	}
	back, err := policyfile.Parse([]byte(b.String()), "b")
	if err != nil {
		t.Fatalf("Parse(written) = %v\n%s", err, b.String())
	}
	if got := back[0].SettingChanges(p); len(got) != 0 {
		t.Errorf("SettingChanges(written, read) = %q, want none\n%s", got, b.String())
	}
	for i, r := range back[0].Rules() {
		if !slices.Equal(r.Headroom, p.Rules()[i].Headroom) {
			t.Errorf("rule %s headroom = %v, want %v", r.Name, r.Headroom, p.Rules()[i].Headroom)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestMessagingSettingChanges(t *testing.T) {
	const base = `
policies:
  - name: push
%s    rules:
      - {name: recv-1m, algorithm: sliding_window, limit: 15, window: 1m, by: [user]}
      - {name: recv-24h, algorithm: sliding_window, limit: 50, window: 24h, by: [user]}
`
	parse := func(t *testing.T, extra string) policyfile.Policy {
		t.Helper()
		ps, err := policyfile.Parse([]byte(strings.Replace(base, "%s", extra, 1)), "f")
		if err != nil {
			t.Fatalf("Parse(%q) = %v", extra, err)
		}
		return ps[0]
	}
	tests := []struct {
		name     string
		from, to string
		want     []string
	}{
		{"none", "", "", nil},
		{"person added", "", "    person: user\n", []string{"person none → user"}},
		{"person removed", "    person: user\n", "", []string{"person user → none"}},
		{"quiet added", "", "    quiet_hours: {zone: UTC, periods: [{from: \"22:00\", to: \"07:00\"}]}\n",
			[]string{`quiet_hours none → {zone: UTC, periods: [{from: "22:00", to: "07:00"}]}`}},
		{"quiet zone", "    quiet_hours: {zone: UTC, periods: [{from: \"22:00\", to: \"07:00\"}]}\n", "    quiet_hours: {zone: Europe/Berlin, periods: [{from: \"22:00\", to: \"07:00\"}]}\n",
			[]string{`quiet_hours {zone: UTC, periods: [{from: "22:00", to: "07:00"}]} → {zone: Europe/Berlin, periods: [{from: "22:00", to: "07:00"}]}`}},
		{"quiet days", "    quiet_hours: {zone: UTC, periods: [{from: \"22:00\", to: \"07:00\"}]}\n", "    quiet_hours: {zone: UTC, periods: [{from: \"22:00\", to: \"07:00\", days: [sat, sun]}]}\n",
			[]string{`quiet_hours {zone: UTC, periods: [{from: "22:00", to: "07:00"}]} → {zone: UTC, periods: [{from: "22:00", to: "07:00", days: [sat, sun]}]}`}},
		{"class added, changed, removed",
			"    classes:\n      - {name: otp, exempt: all}\n      - {name: alert, quiet_hours: true}\n",
			"    classes:\n      - {name: otp, exempt: all, counted: true}\n      - {name: receipt, exempt: [recv-24h]}\n",
			[]string{"class otp: {name: otp, exempt: all} → {name: otp, exempt: all, counted: true}",
				"class receipt added: {name: receipt, exempt: [recv-24h]}",
				"class alert removed: {name: alert, quiet_hours: true}"}},
		{"class order only", "    classes:\n      - {name: otp, exempt: all}\n      - {name: alert, quiet_hours: true}\n",
			"    classes:\n      - {name: alert, quiet_hours: true}\n      - {name: otp, exempt: all}\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := parse(t, tc.to).SettingChanges(parse(t, tc.from))
			if !slices.Equal(got, tc.want) {
				t.Errorf("SettingChanges = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMessagingErrors(t *testing.T) {
	const rules = "    rules:\n      - {name: a, algorithm: sliding_window, limit: 50, window: 24h, by: [user]}\n"
	tests := []struct {
		name string
		doc  string
		want error
		msg  []string
	}{
		{"quiet without zone", "    quiet_hours: {periods: [{from: \"21:00\", to: \"08:00\"}]}\n", sdk.ErrInvalidPolicy,
			[]string{`line 3: policy "p": invalid policy: quiet_hours: zone missing`}},
		{"quiet bad zone", "    quiet_hours: {zone: Mars/Olympus, periods: [{from: \"21:00\", to: \"08:00\"}]}\n", sdk.ErrInvalidPolicy,
			[]string{"line 3", "quiet_hours", `"Mars/Olympus"`}},
		{"quiet no periods", "    quiet_hours: {zone: UTC}\n", sdk.ErrInvalidPolicy, []string{"line 3", "quiet_hours: periods missing"}},
		{"quiet bad time", "    quiet_hours:\n      zone: UTC\n      periods:\n        - {from: \"25:00\", to: \"08:00\"}\n", sdk.ErrInvalidPolicy,
			[]string{"line 6", `a time of day must be "HH:MM" (00:00 to 23:59), got "25:00"`}},
		{"quiet seconds", "    quiet_hours: {zone: UTC, periods: [{from: \"21:00:30\", to: \"08:00\"}]}\n", sdk.ErrInvalidPolicy,
			[]string{"line 3", `got "21:00:30"`}},
		{"quiet one-digit minutes", "    quiet_hours: {zone: UTC, periods: [{from: \"21:0\", to: \"08:00\"}]}\n", sdk.ErrInvalidPolicy,
			[]string{"line 3", `got "21:0"`}},
		{"quiet signed hour", "    quiet_hours: {zone: UTC, periods: [{from: \"+9:00\", to: \"08:00\"}]}\n", sdk.ErrInvalidPolicy,
			[]string{"line 3", `got "+9:00"`}},
		{"quiet 24:00", "    quiet_hours: {zone: UTC, periods: [{from: \"24:00\", to: \"08:00\"}]}\n", sdk.ErrInvalidPolicy,
			[]string{"line 3", `got "24:00"`}},
		{"quiet equal times", "    quiet_hours: {zone: UTC, periods: [{from: \"08:00\", to: \"08:00\"}]}\n", sdk.ErrInvalidPolicy,
			[]string{"line 3", "quiet period 8h0m0s to 8h0m0s"}},
		{"quiet bad day", "    quiet_hours: {zone: UTC, periods: [{from: \"21:00\", to: \"08:00\", days: [monday]}]}\n", sdk.ErrInvalidPolicy,
			[]string{"line 3", `days are mon, tue, wed, thu, fri, sat or sun, got "monday"`}},
		{"quiet unknown key", "    quiet_hours: {zone: UTC, period: []}\n", sdk.ErrInvalidPolicy, []string{"line 3", `unknown key "period"`}},
		{"person not a shard dimension", "    person: device\n", sdk.ErrInvalidPolicy,
			[]string{"line 3", `person dimension "device" must be a shard dimension`}},
		{"class unknown rule", "    classes:\n      - {name: otp, exempt: all}\n      - {name: receipt, exempt: [b]}\n", sdk.ErrInvalidPolicy,
			[]string{"line 5", `class "receipt" names rule "b", which the policy does not have`}},
		{"class exempt from nothing", "    classes:\n      - {name: otp}\n", sdk.ErrInvalidPolicy,
			[]string{"line 4", `class "otp" is exempt from nothing`}},
		{"class twice", "    classes:\n      - {name: otp, exempt: all}\n      - {name: otp, quiet_hours: true}\n", sdk.ErrInvalidPolicy,
			[]string{"line 5", `class "otp" declared twice`}},
		{"class bad exempt", "    classes:\n      - {name: otp, exempt: some}\n", sdk.ErrInvalidPolicy,
			[]string{"line 4", "class exempt must be all or a list of rule names"}},
		{"class unknown key", "    classes:\n      - {name: otp, exempt: all, count: true}\n", sdk.ErrInvalidPolicy,
			[]string{"line 4", `unknown key "count"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policyfile.Load(strings.NewReader("policies:\n  - name: p\n" + tc.doc + rules))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Load = %v, want %v", err, tc.want)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("Load = %v, want it to contain %q", err, m)
				}
			}
		})
	}
	headroom := []struct {
		name, tiers string
		msg         []string
	}{
		{"keep at limit", "[{priority: 1, keep: 50}]", []string{"line 4", `rule "a"`, "headroom must keep 1 to limit-1 (49) units, got 50"}},
		{"priority too high", "[{priority: 10, keep: 5}]", []string{"line 4", `rule "a"`, "headroom priority must be <= 9 (MaxPriority), got 10"}},
		{"priority zero", "[{priority: 0, keep: 5}]", []string{"line 4", "headroom priority must be 1 to 9, got 0"}},
		{"keep fraction", "[{priority: 1, keep: 2.5}]", []string{"line 4", "headroom keep must be an integer, got 2.5"}},
		{"tiers out of order", "[{priority: 2, keep: 5}, {priority: 1, keep: 2}]", []string{"line 4", "headroom tiers must rise in priority"}},
		{"unknown key", "[{priority: 1, kept: 5}]", []string{"line 4", `unknown key "kept"`}},
	}
	for _, tc := range headroom {
		t.Run("headroom "+tc.name, func(t *testing.T) {
			doc := "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: sliding_window, limit: 50, window: 24h, by: [user], headroom: " + tc.tiers + "}\n"
			_, err := policyfile.Load(strings.NewReader(doc))
			if !errors.Is(err, sdk.ErrInvalidRule) && !errors.Is(err, sdk.ErrInvalidPolicy) {
				t.Fatalf("Load = %v, want an invalid rule", err)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("Load = %v, want it to contain %q", err, m)
				}
			}
		})
	}
	t.Run("headroom on gcra", func(t *testing.T) {
		doc := "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: sliding_window, limit: 5, window: 1m, by: [user]}\n      - {name: g, algorithm: gcra, limit: 50, window: 1m, by: [user], headroom: [{priority: 1, keep: 5}]}\n"
		_, err := policyfile.Load(strings.NewReader(doc))
		if !errors.Is(err, sdk.ErrInvalidRule) || !strings.Contains(err.Error(), "line 5") || !strings.Contains(err.Error(), "headroom is for counting rules, not GCRA") {
			t.Errorf("Load = %v, want line 5 and headroom refused for GCRA", err)
		}
	})
}

// TestDesignDocPolicyFile: the policy file docs/DESIGN.md shows loads, its
// messaging policy with what it says.
func TestDesignDocPolicyFile(t *testing.T) {
	doc, err := os.ReadFile("../../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "### Policy file (YAML)")
	_, after, ok2 := strings.Cut(after, "```yaml\n")
	block, _, ok3 := strings.Cut(after, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`docs/DESIGN.md has no yaml block under "### Policy file (YAML)"`)
	}
	ps, err := policyfile.Load(strings.NewReader(block))
	if err != nil {
		t.Fatalf("Load(docs/DESIGN.md's policy file) = %v", err)
	}
	i := slices.IndexFunc(ps, func(p *sdk.Policy) bool { return p.Name() == "messages" })
	if i < 0 {
		t.Fatal("docs/DESIGN.md's policy file has no policy messages")
	}
	p := ps[i]
	loc, periods := p.QuietHours()
	if p.Person() != "user" || loc.String() != "Europe/Berlin" || len(periods) != 1 || len(p.Classes()) != 4 || len(p.Rules()[0].Headroom) != 1 {
		t.Errorf("messages = person %q, quiet hours %v %v, %d classes, headroom %v; want user, Europe/Berlin, 1 period, 4 classes, 1 tier",
			p.Person(), loc, periods, len(p.Classes()), p.Rules()[0].Headroom)
	}
}

// TestLoadMessagingJSON: the same keys in a JSON policy file (YAML's
// flow style).
func TestLoadMessagingJSON(t *testing.T) {
	const doc = `{"policies": [{"name": "push", "person": "user",
  "quiet_hours": {"zone": "UTC", "periods": [{"from": "21:00", "to": "08:00", "days": ["sat", "sun"]}]},
  "classes": [{"name": "otp", "exempt": "all", "counted": true}, {"name": "receipt", "exempt": ["day"]}],
  "rules": [{"name": "day", "algorithm": "sliding_window", "limit": 50, "window": "24h", "by": ["user"], "headroom": [{"priority": 1, "keep": 10}]}]}]}`
	ps, err := policyfile.Parse([]byte(doc), "push.json")
	if err != nil {
		t.Fatalf("Parse(JSON) = %v", err)
	}
	p := ps[0]
	want := []string{
		"person none → user",
		`quiet_hours none → {zone: UTC, periods: [{from: "21:00", to: "08:00", days: [sat, sun]}]}`,
		"class otp added: {name: otp, exempt: all, counted: true}",
		"class receipt added: {name: receipt, exempt: [day]}",
	}
	bare, err := policyfile.Parse([]byte(`{"policies": [{"name": "push", "rules": [{"name": "day", "algorithm": "sliding_window", "limit": 50, "window": "24h", "by": ["user"]}]}]}`), "bare.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.SettingChanges(bare[0]); !slices.Equal(got, want) {
		t.Errorf("SettingChanges(JSON) = %q, want %q", got, want)
	}
	if h := policyfile.Headroom(p.Rules()[0].Headroom); h != "[{priority: 1, keep: 10}]" {
		t.Errorf("headroom = %s, want [{priority: 1, keep: 10}]", h)
	}
}
