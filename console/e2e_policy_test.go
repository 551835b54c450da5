package console

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
)

// signIn opens path and signs in with token.
func signIn(t *testing.T, ctx context.Context, url, token, waitFor string) {
	t.Helper()
	run(t, ctx, "sign in",
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(waitFor),
	)
}

// setSource replaces the editor's text.
func setSource(t *testing.T, ctx context.Context, src string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.getElementById('policy-source').value = `+strconv.Quote(src)+`, true)`)); err != nil {
		t.Fatal(err)
	}
}

// TestE2EPolicyEditor drives the policy editor in headless Chromium: an
// invalid document's preview names its line; a valid one shows its plan;
// the apply (with a reason) makes version 2, which the console then runs;
// the history lists who and why, the diff shows the added line, and a
// rollback to version 1, confirmed, makes version 3 with version 1's
// document.
func TestE2EPolicyEditor(t *testing.T) {
	f, st := newStoreFixtureOn(t, testCredentials(), "memory-now")
	base := serveConsole(t, f.srv)
	ctx := startBrowser(t, 1280, 900)
	signIn(t, ctx, base+"/policies/edit", adminToken, "#editor-form")
	waitText(t, ctx, "#current-version", "1")

	setSource(t, ctx, withRule("{name: bad, algorithm: sliding_window, limit: 0, window: 1m, by: [user]}"))
	run(t, ctx, "preview an invalid document", chromedp.Click(chromedp.ID("preview")), chromedp.WaitVisible(chromedp.ID("invalid")))
	waitContains(t, ctx, "#invalid", `line 16: policy "push": rule "bad": invalid rule: limit must be > 0`)

	setSource(t, ctx, withRule("{name: recv-24h-40, algorithm: sliding_window, limit: 40, window: 24h, by: [user], shadow: true}"))
	run(t, ctx, "preview", chromedp.Click(chromedp.ID("preview")), chromedp.WaitVisible(chromedp.ID("plan-changes")))
	waitContains(t, ctx, "#plan-changes tbody code", "recv-24h-40")
	waitText(t, ctx, "#plan-changes tbody td.kind", "added")
	waitText(t, ctx, "#plan-changes tbody td.carries", "nothing")
	waitText(t, ctx, "#apply", "Apply as version 2")
	screenshot(t, ctx, "policy-preview.png")
	run(t, ctx, "apply",
		chromedp.SendKeys(chromedp.ID("apply-reason"), "try 40 per 24 h beside 50"),
		chromedp.Click(chromedp.ID("apply")),
		chromedp.WaitVisible(chromedp.ID("history")),
	)
	waitContains(t, ctx, "#notice", "Version 2 applied")
	waitContains(t, ctx, `#history tr[data-version="2"]`, "v2 current")
	waitContains(t, ctx, `#history tr[data-version="2"] td.reason`, "try 40 per 24 h beside 50")
	waitContains(t, ctx, `#history tr[data-version="2"] td.by`, "alice")
	waitVersion(t, f, 2)

	run(t, ctx, "diff", chromedp.Click(`#history tr[data-version="2"] a.diff-link`), chromedp.WaitVisible(chromedp.ID("diff")))
	waitContains(t, ctx, "#diff .add", "+ - {name: recv-24h-40, algorithm: sliding_window, limit: 40, window: 24h, by: [user], shadow: true}")

	run(t, ctx, "history", chromedp.Click(chromedp.ID("nav-history")), chromedp.WaitVisible(chromedp.ID("history")))
	run(t, ctx, "rollback page", chromedp.Click(`#history tr[data-version="1"] a.rollback-link`), chromedp.WaitVisible(chromedp.ID("confirm-rollback")))
	waitContains(t, ctx, "#plan-changes tbody code", "recv-24h-40")
	waitText(t, ctx, "#plan-changes tbody td.kind", "removed")
	run(t, ctx, "roll back",
		chromedp.SendKeys(chromedp.ID("rollback-reason"), "back to the seed"),
		chromedp.Click(chromedp.ID("confirm-rollback")),
		chromedp.WaitVisible(chromedp.ID("notice")),
	)
	waitContains(t, ctx, "#notice", "Version 3 applied")
	waitContains(t, ctx, `#history tr[data-version="3"] td.reason`, "back to the seed")
	waitVersion(t, f, 3)
	v3, err := st.Version(context.Background(), 3)
	if err != nil || string(v3.Source) != string(storeYAML) {
		t.Errorf("version 3 = %q, %v; want version 1's document", v3.Source, err)
	}
	if e := f.srv.audit.Filter(AuditFilter{Action: "policy-rollback"}); len(e) != 1 || e[0].Reason != "back to the seed" || e[0].Name != "alice" {
		t.Errorf("rollback audit = %+v", e)
	}
}

// TestE2EShadowView: the policies page shows what a shadow rule would
// have denied, recorded by a service, beside the enforced rules.
func TestE2EShadowView(t *testing.T) {
	f, st := newStoreFixtureOn(t, testCredentials(), "memory-now")
	ctx0 := context.Background()
	plan, err := st.Plan(ctx0, []byte(withRule("{name: recv-1m-3, algorithm: sliding_window, limit: 3, window: 1m, by: [user], shadow: true}")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx0, plan, "alice", "try 3 per minute"); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, f, 2)
	rec, err := fleet.NewRecorder(f.backend, &fleet.Options{Prefix: f.prefix, FlushEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	service := sdk.New(f.backend, sdk.WithPrefix(f.prefix), sdk.WithObserver(rec.Observe))
	push := f.srv.snap().byName["push"]
	for i := range 5 {
		if d, err := service.Allow(ctx0, push, sdk.Subject{"user": "s1", "content": "c" + strconv.Itoa(i)}); err != nil || !d.Allowed {
			t.Fatalf("Allow #%d = %+v, %v", i, d, err)
		}
	}
	if err := rec.Flush(ctx0); err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, f.srv)
	ctx := startBrowser(t, 1280, 900)
	signIn(t, ctx, base+"/policies", viewerToken, "#shadow-push")
	row := `.shadow-table tr.shadow-row[data-rule="recv-1m-3"]`
	waitText(t, ctx, row+" td.attempts-1h", "2")
	waitText(t, ctx, row+" td.allowed-1h", "2")
	waitText(t, ctx, row+" td.people-1h", "1")
	waitText(t, ctx, row+" td.attempts-24h", "2")
	waitText(t, ctx, `.shadow-table tr.enforced-row[data-rule="recv-1m"] td.attempts-1h`, "0")
	waitContains(t, ctx, "#policy-version", "Policy-store version 2 in force")
	screenshot(t, ctx, "shadow-view.png")

	// The trail's shadow entries told nobody to wait: no retry-after as if
	// they were denials.
	run(t, ctx, "open the subject", chromedp.Navigate(base+"/subject?"+subjectQuery("push", sdk.Subject{"user": "s1"})), chromedp.WaitVisible(chromedp.ID("trail")))
	waitContains(t, ctx, "#trail td.retry-after", "none: not enforced")
	waitContains(t, ctx, `#rules tr[data-rule="recv-1m-3"] .retry`, "not enforced (enforced: retry in ")

	// On a phone (390 CSS px) the rules and shadow tables fit: the page
	// does not scroll sideways, and neither does a table in its card —
	// every cell (the rules' By and keys, the shadow's 24 h columns) lies
	// on the screen (the rows reflow into labelled cells, as the subject
	// page's tables do).
	run(t, ctx, "phone-wide policies page", chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(base+"/policies"), chromedp.WaitVisible(row))
	if vw := evalInt(t, ctx, `window.innerWidth`); vw != 390 {
		t.Fatalf("viewport is %d px wide, want 390", vw)
	}
	if w := evalInt(t, ctx, `document.scrollingElement.scrollWidth`); w > 390 {
		t.Errorf("/policies with the shadow table is %d px wide at 390 px", w)
	}
	for _, table := range []string{".shadow-table", ".policy-rules"} {
		off, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+table+` td')].flatMap(td => {
		const r = td.getBoundingClientRect();
		return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth + 0.5 ? [] :
			[td.className + " " + Math.round(r.left) + ".." + Math.round(r.right)];
	})`))
		if err != nil {
			t.Fatal(err)
		}
		if len(off) > 0 {
			t.Errorf("at 390 px, %d %s cells are off the screen: %v", len(off), table, off)
		}
	}
	if cells := evalInt(t, ctx, `document.querySelectorAll('.shadow-table td').length`); cells < 7*5 {
		t.Errorf("the shadow table has %d cells, want at least 35 (the shadow rule and 4 enforced rules, 7 columns)", cells)
	}
	// push's rules table: the shadow rule and 4 enforced rules, 8 cells
	// each; its By cells are on the screen and say what they say on a
	// desktop.
	if cells := evalInt(t, ctx, `document.querySelectorAll('.policy-rules[data-policy="push"] td').length`); cells != 8*5 {
		t.Errorf("push's rules table has %d cells, want 40 (5 rules, 8 columns)", cells)
	}
	waitText(t, ctx, `.policy-rules[data-policy="push"] tr[data-rule="recv-1m-3"] td.by`, "user")
	screenshot(t, ctx, "phone-shadow-view.png")
}

// TestE2EOverride: an admin blocks a person from the subject page; the
// verdict and, after the service's next attempt, the trail say "denied by
// block #1"; deleting it (confirmed) lets the rules decide again.
func TestE2EOverride(t *testing.T) {
	f, _ := newStoreFixtureOn(t, testCredentials(), "memory-now")
	base := serveConsole(t, f.srv)
	ctx := startBrowser(t, 1280, 900)
	user := "18829340007"
	signIn(t, ctx, base+"/subject?"+subjectQuery("push", sdk.Subject{"user": user}), adminToken, "#overrides-card")
	waitContains(t, ctx, "#no-overrides", "No override is in force")
	run(t, ctx, "add a block",
		chromedp.Click("#override-add summary"),
		chromedp.WaitVisible(chromedp.ID("override-reason")),
		chromedp.SetValue(chromedp.ID("override-kind"), "block"),
		chromedp.SetValue(chromedp.ID("override-until"), "2h"),
		chromedp.SetValue(chromedp.ID("override-reason"), "abuse report 4411"),
		chromedp.Click(chromedp.ID("override-submit")),
		chromedp.WaitVisible(chromedp.ID("notice")),
	)
	waitContains(t, ctx, "#notice", "Override #1 set")
	waitText(t, ctx, `#override-list tr[data-override="1"] td.kind`, "block")
	waitContains(t, ctx, `#override-list tr[data-override="1"] td.reason`, "abuse report 4411")
	waitContains(t, ctx, "#verdict-override", "A request now would be denied by block #1 until ")

	push := f.srv.snap().byName["push"]
	d, err := f.lim.Allow(context.Background(), push, sdk.Subject{"user": user, "content": sdk.Fingerprint("hello")})
	if err != nil || d.Allowed || d.Override.ID != 1 {
		t.Fatalf("Allow under the block = %+v, %v; want denied by override 1", d, err)
	}
	// The live refresh brings the trail row.
	waitContains(t, ctx, "#trail td.rule", "denied by block #1")
	waitContains(t, ctx, "#trail td.rule div", "until ")
	screenshot(t, ctx, "override-block.png")
	if e := f.srv.audit.Filter(AuditFilter{Action: "override-set"}); len(e) != 1 || e[0].Reason != "abuse report 4411" || e[0].Subject["user"] != user {
		t.Errorf("override audit = %+v", e)
	}

	run(t, ctx, "delete", chromedp.Click(`#override-list tr[data-override="1"] a.delete-override`), chromedp.WaitVisible(chromedp.ID("confirm-delete-override")))
	run(t, ctx, "confirm", chromedp.Click(chromedp.ID("confirm-delete-override")), chromedp.WaitVisible(chromedp.ID("notice")))
	waitContains(t, ctx, "#notice", "Override #1 deleted")
	waitContains(t, ctx, "#no-overrides", "No override is in force")
	deadline := time.Now().Add(15 * time.Second)
	for {
		txt, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('verdict').textContent`))
		if !strings.Contains(txt, "denied by block") && strings.Contains(txt, "A request now would") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the verdict still names the block: %q", txt)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
