package serve_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/gen/freqcap/v1/freqcapv1connect"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/serve"
)

// personPolicies are testPolicies and people, whose person dimension is
// user: an attempt's identity counts for the person it is linked to.
const personPolicies = testPolicies + `
  - name: people
    person: user
    rules:
      - {name: daily, algorithm: fixed_window, limit: 2, window: 24h, by: [user]}
`

// personCallers: ops may change links (admin on every policy), support
// read them (inspect on every policy), pushadmin is admin on one policy
// only, sender takes.
const personCallers = "ops:0ps-s3cret-1:admin@*\tsupport:" + supportSecret + ":*@*\t" +
	"pushadmin:pushadm1n-s3cret:admin@push\tsender:" + senderSecret + ":take@people"

func personCallersOf(t *testing.T) []serve.Caller {
	t.Helper()
	cs, err := serve.ParseCallers(personCallers)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Through the real server on memory, Redis and the cluster, over gRPC and
// HTTP/JSON: identities linked to a person share its caps; the person is
// read from an identity and by name, with its links, stored zone and
// audit (by the caller's name, with each reason, newest first); unlinking
// and clearing the zone; each change audited; refusals with their codes
// and the sdk's sentinels.
func TestPersonAPI(t *testing.T) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b, _ := bk.new(t)
			e := startWith(t, b, serve.Config{Callers: personCallersOf(t)}, personPolicies)
			for _, proto := range protocols {
				t.Run(proto.name, func(t *testing.T) {
					testPersonAPI(t, e, proto.p, proto.name+"-")
				})
			}
			var got []string
			for _, a := range e.audits() {
				if strings.HasPrefix(a.Action, "person-") {
					got = append(got, a.Caller+" "+a.Action+" "+a.Outcome)
				}
			}
			// Per protocol: link, link, zone, zone, unlink, unlink (not
			// found), then the refusals the sdk or backend made.
			once := "ops person-link ok,ops person-link ok,ops person-zone ok,ops person-zone ok,ops person-unlink ok," +
				"ops person-unlink failed: not_found,ops person-link failed: invalid_argument,ops person-link failed: already_exists," +
				"ops person-zone failed: invalid_argument,ops person-zone failed: invalid_argument,ops person-link failed: invalid_argument"
			if want := once + "," + once; strings.Join(got, ",") != want {
				t.Errorf("audit =\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// testPersonAPI runs TestPersonAPI's calls over proto; pre starts every
// identity and person it uses.
func testPersonAPI(t *testing.T, e *env, proto client.Protocol, pre string) {
	ctx := context.Background()
	people := e.policies["people"]
	ops := client.New(e.url, &client.Options{Protocol: proto, Token: "0ps-s3cret-1"})
	support := client.New(e.url, &client.Options{Protocol: proto, Token: supportSecret})
	pushadmin := client.New(e.url, &client.Options{Protocol: proto, Token: "pushadm1n-s3cret"})
	sender := client.New(e.url, &client.Options{Protocol: proto, Token: senderSecret})
	for _, c := range []*client.Client{ops, support, pushadmin, sender} {
		t.Cleanup(func() { c.Close() })
	}
	person, phone, device := pre+"42", pre+"+12125550123", pre+"dev-8f2c"
	auditBefore := len(e.audits())

	// Two identities linked to the person: by is the caller's name.
	l, err := ops.Admin().Link(ctx, phone, person, "someone else", "verified phone")
	if err != nil || l.ID != phone || l.Person != person || l.By != "ops" || l.Reason != "verified phone" || l.Created.IsZero() {
		t.Fatalf("Link(phone) = %+v, %v; want the link by ops, with its reason and created", l, err)
	}
	if _, err := ops.Admin().Link(ctx, device, person, "", "same device"); err != nil {
		t.Fatalf("Link(device): %v", err)
	}

	// They share the person's caps (daily: 2).
	for i, a := range []sdk.Attempt{{Identity: phone}, {Identity: device}, {Subject: sdk.Subject{"user": person}}} {
		d, err := sender.Take(ctx, people, a)
		if used := int64(min(i+1, 2)); err != nil || d.Allowed != (i < 2) || d.Rules[0].Used != used {
			t.Fatalf("Take #%d (%+v) = %+v, %v; want allowed %v, the person's daily at %d", i+1, a, d, err, i < 2, used)
		}
	}

	// The person, from an identity and by name.
	got, err := support.Admin().LinkOf(ctx, device)
	if err != nil || got.Person != person || got.ID != device || got.By != "ops" || got.Reason != "same device" {
		t.Fatalf("LinkOf(device) = %+v, %v; want device's link to the person, by ops", got, err)
	}
	p, err := support.Admin().Person(ctx, person)
	if err != nil || len(p.Links) != 2 || p.Links[0].ID != phone || p.Links[1].ID != device || p.Zone != "" ||
		len(p.Audit) != 2 || p.Audit[0].Op != "link" || p.Audit[0].ID != device || p.Audit[0].By != "ops" || p.Audit[1].Reason != "verified phone" {
		t.Fatalf("Person = %+v, %v; want the phone then the device, no zone, two link events newest first", p, err)
	}
	raw := freqcapv1connect.NewPersonServiceClient(http.DefaultClient, e.url, protoconv.JSONCodecs()[0])
	req := connect.NewRequest(&freqcapv1.GetPersonRequest{Identity: phone})
	req.Header().Set("Authorization", "Bearer "+supportSecret)
	res, err := raw.GetPerson(ctx, req)
	if err != nil || res.Msg.GetPerson() != person || res.Msg.GetLink().GetIdentity() != phone || len(res.Msg.GetLinks()) != 2 {
		t.Fatalf("GetPerson(identity: phone) over JSON = %v, %v; want the person, phone's link and both links", res, err)
	}
	req = connect.NewRequest(&freqcapv1.GetPersonRequest{Identity: pre + "nobody"})
	req.Header().Set("Authorization", "Bearer "+supportSecret)
	if res, err := raw.GetPerson(ctx, req); err != nil || res.Msg.GetPerson() != pre+"nobody" || res.Msg.GetLink() != nil || len(res.Msg.GetLinks()) != 0 {
		t.Fatalf("GetPerson(identity: an unlinked one) = %v, %v; want itself, no link, nothing kept", res, err)
	}

	// The stored zone, set and cleared.
	if err := ops.Admin().SetPersonZone(ctx, person, "Europe/Berlin", "", "moved"); err != nil {
		t.Fatalf("SetPersonZone: %v", err)
	}
	if p, err := support.Admin().Person(ctx, person); err != nil || p.Zone != "Europe/Berlin" || p.Audit[0].Op != "zone" || p.Audit[0].Zone != "Europe/Berlin" || p.Audit[0].Reason != "moved" {
		t.Fatalf("Person after SetPersonZone = %+v, %v; want zone Europe/Berlin, its event first", p, err)
	}
	if err := ops.Admin().SetPersonZone(ctx, person, "", "", "asked"); err != nil {
		t.Fatalf("SetPersonZone(clear): %v", err)
	}
	if p, err := support.Admin().Person(ctx, person); err != nil || p.Zone != "" || p.Audit[0].Op != "zone" || p.Audit[0].Zone != "" {
		t.Fatalf("Person after clearing the zone = %+v, %v; want no zone, a zone event", p, err)
	}

	// Unlinked, the phone is its own person again.
	if err := ops.Admin().Unlink(ctx, phone, "", "lost phone"); err != nil {
		t.Fatalf("Unlink(phone): %v", err)
	}
	if _, err := support.Admin().LinkOf(ctx, phone); !errors.Is(err, driver.ErrLinkNotFound) {
		t.Fatalf("LinkOf(phone) after Unlink = %v, want ErrLinkNotFound", err)
	}
	if d, err := sender.Take(ctx, people, sdk.Attempt{Identity: phone}); err != nil || !d.Allowed || d.Rules[0].Used != 1 {
		t.Fatalf("Take(phone) after Unlink = %+v, %v; want allowed, its own count at 1", d, err)
	}
	p, err = support.Admin().Person(ctx, person)
	if err != nil || len(p.Links) != 1 || p.Links[0].ID != device || len(p.Audit) != 5 || p.Audit[0].Op != "unlink" || p.Audit[0].ID != phone || p.Audit[0].By != "ops" {
		t.Fatalf("Person after Unlink = %+v, %v; want the device only, an unlink event first of 5", p, err)
	}

	// Refusals: code, sentinel.
	for _, tc := range []struct {
		name string
		call func() error
		code connect.Code
		is   error
	}{
		{"unlink an identity without a link", func() error { return ops.Admin().Unlink(ctx, phone, "", "again") }, connect.CodeNotFound, driver.ErrLinkNotFound},
		{"empty identity", func() error { _, err := ops.Admin().Link(ctx, "", person, "", "r"); return err }, connect.CodeInvalidArgument, sdk.ErrInvalidIdentity},
		{"no reason", func() error { _, err := ops.Admin().Link(ctx, phone, person, "", " "); return err }, connect.CodeInvalidArgument, nil},
		{"linked to another person", func() error { _, err := ops.Admin().Link(ctx, device, pre+"43", "", "r"); return err }, connect.CodeAlreadyExists, driver.ErrIdentityLinked},
		{"an unknown zone", func() error { return ops.Admin().SetPersonZone(ctx, person, "Mars/Olympus_Mons", "", "r") }, connect.CodeInvalidArgument, sdk.ErrInvalidZone},
		{"Local", func() error { return ops.Admin().SetPersonZone(ctx, person, "Local", "", "r") }, connect.CodeInvalidArgument, sdk.ErrInvalidZone},
		{"a reason over two lines", func() error { _, err := ops.Admin().Link(ctx, phone, person, "", "a\nb"); return err }, connect.CodeInvalidArgument, sdk.ErrInvalidIdentity},
		{"inspect may not link", func() error { _, err := support.Admin().Link(ctx, phone, person, "", "r"); return err }, connect.CodePermissionDenied, nil},
		{"admin on one policy may not link", func() error { _, err := pushadmin.Admin().Link(ctx, phone, person, "", "r"); return err }, connect.CodePermissionDenied, nil},
		{"admin on one policy may not unlink", func() error { return pushadmin.Admin().Unlink(ctx, device, "", "r") }, connect.CodePermissionDenied, nil},
		{"admin on one policy may not set a zone", func() error { return pushadmin.Admin().SetPersonZone(ctx, person, "", "", "r") }, connect.CodePermissionDenied, nil},
		{"admin on one policy may not read", func() error { _, err := pushadmin.Admin().Person(ctx, person); return err }, connect.CodePermissionDenied, nil},
		{"take may not read", func() error { _, err := sender.Admin().LinkOf(ctx, device); return err }, connect.CodePermissionDenied, nil},
		{"identity and person", func() error {
			req := connect.NewRequest(&freqcapv1.GetPersonRequest{Identity: device, Person: person})
			req.Header().Set("Authorization", "Bearer "+supportSecret)
			_, err := raw.GetPerson(ctx, req)
			return err
		}, connect.CodeInvalidArgument, nil},
		{"neither identity nor person", func() error { _, err := support.Admin().Person(ctx, ""); return err }, connect.CodeInvalidArgument, sdk.ErrInvalidIdentity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if connect.CodeOf(err) != tc.code || tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%s: %v, want %v (%v)", tc.name, err, tc.code, tc.is)
			}
		})
	}
	if p, err := support.Admin().Person(ctx, person); err != nil || len(p.Links) != 1 || p.Zone != "" || len(p.Audit) != 5 {
		t.Errorf("Person after the refusals = %+v, %v; want it unchanged (the device, no zone, 5 events)", p, err)
	}

	// Each change is in the audit log, with the identity and person it
	// names, and its reason in the detail.
	as := e.audits()[auditBefore:]
	if len(as) == 0 || as[0].Action != serve.ActionPersonLink || as[0].Caller != "ops" || as[0].Policy != "" ||
		as[0].Subject["identity"] != phone || as[0].Subject["person"] != person || as[0].Detail != "link: verified phone" {
		t.Errorf("first audit entry = %+v, want ops's link of the phone to the person, its reason", as)
	}
	for _, a := range as {
		if a.Action == serve.ActionPersonZone && a.Outcome == "ok" && a.Detail != "zone Europe/Berlin: moved" && a.Detail != "zone cleared: asked" {
			t.Errorf("zone audit entry = %+v, want the zone set or cleared and the reason", a)
		}
	}
}

// A person has at most driver.MaxLinks identities: one more is
// failed_precondition, TOO_MANY_LINKS, driver.ErrTooManyLinks.
func TestPersonTooManyLinks(t *testing.T) {
	e := startWith(t, memory.New(nil), serve.Config{Callers: personCallersOf(t)}, personPolicies)
	c := client.New(e.url, &client.Options{Protocol: client.ConnectJSON, Token: "0ps-s3cret-1"})
	ctx := context.Background()
	for i := range driver.MaxLinks {
		if _, err := c.Admin().Link(ctx, fmt.Sprintf("id-%d", i), "crowd", "", "r"); err != nil {
			t.Fatalf("Link #%d: %v", i+1, err)
		}
	}
	_, err := c.Admin().Link(ctx, "one-more", "crowd", "", "r")
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || protoconv.ReasonOf(err) != freqcapv1.Reason_REASON_TOO_MANY_LINKS || !errors.Is(err, driver.ErrTooManyLinks) {
		t.Errorf("Link #%d = %v, want failed_precondition, TOO_MANY_LINKS, ErrTooManyLinks", driver.MaxLinks+1, err)
	}
}

// unlinking is a backend that keeps no links (no driver.Linker).
type unlinking struct{ driver.Backend }

// A backend that keeps no links answers unimplemented, UNSUPPORTED:
// errors.ErrUnsupported through the client.
func TestPersonUnsupported(t *testing.T) {
	e := startWith(t, unlinking{memory.New(nil)}, serve.Config{Callers: personCallersOf(t)}, personPolicies)
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			c := client.New(e.url, &client.Options{Protocol: proto.p, Token: "0ps-s3cret-1"})
			defer c.Close()
			ctx := context.Background()
			_, lerr := c.Admin().Link(ctx, "a", "b", "", "r")
			_, perr := c.Admin().Person(ctx, "b")
			for _, err := range []error{lerr, perr} {
				if connect.CodeOf(err) != connect.CodeUnimplemented || protoconv.ReasonOf(err) != freqcapv1.Reason_REASON_UNSUPPORTED || !errors.Is(err, errors.ErrUnsupported) {
					t.Errorf("= %v, want unimplemented, UNSUPPORTED, errors.ErrUnsupported", err)
				}
			}
		})
	}
}
