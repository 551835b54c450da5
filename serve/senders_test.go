package serve_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/internal/seed"
)

// sendersFile is the policy file the example senders ask for
// (examples/python/sender.py, examples/java/Sender.java): the seed's push
// and messages, with classes, headroom, quiet hours and a person.
const sendersFile = "../examples/senders.yaml"

// sendersPolicyZone is the zone of messages' calendar day and quiet
// hours in sendersFile: an attempt that gives no zone is counted in it.
const sendersPolicyZone = "Asia/Shanghai"

// What the senders print of messages (five messages, three kinds) for a
// person in a zone where it is about noon: two promotions, the third
// denied by the unit kept for priority 1, an alert of priority 1 using it,
// and a one-time password past the cap, which its class is exempt from.
// The next eligible time is the next day's end of quiet hours, 08:00
// there. A sender that sent no class, priority or zone prints otherwise.
const messagesByDay = `message #1, promotion: allowed, 1 of 3 used today
message #2, promotion: allowed, 2 of 3 used today
message #3, promotion: denied by daily: its last 1 kept for higher priorities, next eligible at 08:00
message #4, alert: allowed, 3 of 3 used today
message #5, otp: allowed, 4 of 3 used today, past daily as its class otp is exempt
`

// What they print of the same messages for a person in a zone where it is
// about 02:00: promotions denied for quiet hours until 08:00 there,
// consuming nothing, and the alert and the one-time password passing them
// as their classes allow.
const messagesAtNight = `message #1, promotion: denied by quiet hours until 08:00, next eligible at 08:00
message #2, promotion: denied by quiet hours until 08:00, next eligible at 08:00
message #3, promotion: denied by quiet hours until 08:00, next eligible at 08:00
message #4, alert: allowed, 1 of 3 used today, in quiet hours until 08:00
message #5, otp: allowed, 2 of 3 used today, in quiet hours until 08:00
`

// sendersDoc is sendersFile with push reading overrides, so that a
// person may be blocked.
func sendersDoc(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(sendersFile)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(string(doc), "  - name: push\n", "  - name: push\n    overrides: true\n", 1)
}

// senderZones returns two IANA zones (Etc/GMT±N) for the senders'
// recipients: one where it is now 12:00 to 13:59 (day: quiet hours start
// at 21:00, the calendar day at midnight), one where it is 02:00 to 03:59
// (night: quiet hours end at 08:00). Neither is at sendersPolicyZone's
// offset, so a sender that did not send the zone would print other local
// times, or be denied by day or allowed at night.
func senderZones(t *testing.T) (day, night string) {
	t.Helper()
	policy, err := time.LoadLocation(sendersPolicyZone)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	_, avoid := now.In(policy).Zone()
	pick := func(hours ...int) string {
		for _, h := range hours {
			o := ((h-now.UTC().Hour())%24 + 24) % 24 // UTC+o, from -9 to +14
			if o > 14 {
				o -= 24
			}
			if o*3600 == avoid {
				continue
			}
			switch { // Etc/GMT-3 is UTC+3
			case o > 0:
				return fmt.Sprintf("Etc/GMT-%d", o)
			case o < 0:
				return fmt.Sprintf("Etc/GMT+%d", -o)
			}
			return "Etc/GMT"
		}
		t.Fatalf("no zone where it is %v o'clock but at %s's offset", hours, sendersPolicyZone)
		return ""
	}
	return pick(12, 13), pick(2, 3)
}

// examples/senders.yaml, which the senders' tests serve, holds the seed's
// push as it is, as its comment says: the senders' push output is what
// it is against the seed policies.
func TestSendersPolicies(t *testing.T) {
	doc, err := os.ReadFile(sendersFile)
	if err != nil {
		t.Fatal(err)
	}
	_, push, ok := strings.Cut(string(seed.YAML), "  - name: push\n")
	push, _, ok2 := strings.Cut(push, "  - name: ")
	if !ok || !ok2 {
		t.Fatal("the seed policies have no push followed by another policy")
	}
	if !strings.Contains(string(doc), "  - name: push\n"+push+"  - name: messages\n") {
		t.Errorf("%s's push is not the seed's:\n%s", sendersFile, push)
	}
	ps := mustLoad(t, string(doc))
	if len(ps) != 2 || ps[0].Name() != "push" || ps[1].Name() != "messages" {
		t.Fatalf("%s loads %d policies, want push and messages", sendersFile, len(ps))
	}
}

// docs/serve/python.md and docs/serve/java.md show what the senders print
// of messages, by day and at night, as the senders' tests check it.
func TestSendersDocsMessages(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want []string
	}{
		{pythonDoc, []string{"```text\n" + messagesByDay + "```\n", "```text\n" + messagesAtNight + "```\n"}},
		{javaDoc, []string{messagesByDay, "```text\n" + messagesAtNight + "```\n"}},
	} {
		md, err := os.ReadFile(c.doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range c.want {
			if !strings.Contains(string(md), want) {
				t.Errorf("%s does not show what the sender prints of messages:\n%s", c.doc, want)
			}
		}
	}
}
