package serve_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/freqcap/freqcap/client"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/gen/freqcap/v1/freqcapv1connect"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/serve"
)

// Through the real server on Redis and the cluster: set, list and delete
// overrides (admin on the policy; list with inspect), decisions and trail
// entries naming the override that decided, shadow rules reported and
// never denying, and each write audited with the caller's name.
func TestOverridesAPI(t *testing.T) {
	for _, bk := range backendKinds[1:] {
		t.Run(bk.name, func(t *testing.T) {
			b, _ := bk.new(t)
			cs, err := serve.ParseCallers("vipadmin:v1padm1n-s3cret:admin,take,inspect@vip;admin@push\tauditor:" + auditorSecret + ":inspect@vip\t" +
				"sender:" + senderSecret + ":take@vip")
			if err != nil {
				t.Fatal(err)
			}
			e := start(t, b, serve.Config{Callers: cs})
			ctx := context.Background()
			vip, push := e.policies["vip"], e.policies["push"]
			admin := client.New(e.url, &client.Options{Token: "v1padm1n-s3cret"})
			auditor := client.New(e.url, &client.Options{Protocol: client.ConnectJSON, Token: auditorSecret})
			sender := client.New(e.url, &client.Options{Protocol: client.ConnectJSON, Token: senderSecret})

			// A block denies, names itself, and is trailed.
			abuser := sdk.Subject{"user": "abuser"}
			until := time.Now().Add(time.Hour).Truncate(time.Second)
			blk, err := admin.Admin().SetOverride(ctx, vip, abuser, driver.Override{Kind: driver.Block, Until: until, Reason: "abuse report 7", By: "someone else"})
			if err != nil || blk.ID <= 0 || blk.Kind != driver.Block || blk.By != "vipadmin" || !blk.Until.Equal(until) || blk.Created.IsZero() {
				t.Fatalf("SetOverride(block) = %+v, %v; want an id, by vipadmin, until %v", blk, err, until)
			}
			d, err := sender.Take(ctx, vip, sdk.Attempt{Subject: abuser})
			if err != nil || d.Allowed || len(d.Denied) != 0 || d.Override.ID != blk.ID || d.Override.Kind != driver.Block || d.Override.Reason != "abuse report 7" ||
				!d.Override.Until.Equal(until) || d.RetryAfter <= 50*time.Minute {
				t.Fatalf("Take(abuser) = %+v, %v; want denied by override #%d until %v", d, err, blk.ID, until)
			}
			in, err := auditor.Admin().Inspect(ctx, vip, abuser)
			if err != nil || len(in.Denials) == 0 || in.Denials[0].Override != blk.ID || in.Denials[0].Rule != "" {
				t.Fatalf("Inspect(abuser) = %+v, %v; want a trail entry naming override #%d", in.Denials, err, blk.ID)
			}
			list, err := auditor.Admin().Overrides(ctx, vip, abuser)
			if err != nil || len(list) != 1 || list[0].ID != blk.ID || list[0].Reason != "abuse report 7" {
				t.Fatalf("Overrides(abuser) = %+v, %v; want override #%d", list, err, blk.ID)
			}
			if err := admin.Admin().DeleteOverride(ctx, vip, abuser, blk.ID); err != nil {
				t.Fatalf("DeleteOverride: %v", err)
			}
			if err := admin.Admin().DeleteOverride(ctx, vip, abuser, blk.ID); !errors.Is(err, sdk.ErrOverrideNotFound) || connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("DeleteOverride again = %v, want not_found, ErrOverrideNotFound", err)
			}
			if d, err := sender.Take(ctx, vip, sdk.Attempt{Subject: abuser}); err != nil || !d.Allowed || d.Override.ID != 0 {
				t.Fatalf("Take(abuser) after the delete = %+v, %v; want allowed, no override", d, err)
			}

			// An uncounted exempt admits past the limit, naming itself.
			star := sdk.Subject{"user": "star"}
			ex, err := admin.Admin().SetOverride(ctx, vip, star, driver.Override{Kind: driver.Exempt, Reason: "ceo"})
			if err != nil {
				t.Fatalf("SetOverride(exempt): %v", err)
			}
			for i := range 4 {
				d, err := sender.Take(ctx, vip, sdk.Attempt{Subject: star})
				if err != nil || !d.Allowed || d.Override.ID != ex.ID || d.Override.Kind != driver.Exempt {
					t.Fatalf("Take(star) #%d = %+v, %v; want allowed by override #%d", i+1, d, err, ex.ID)
				}
			}

			// A limit override raises daily to 4 (a ttl instead of until,
			// over the raw wire).
			partner := sdk.Subject{"user": "partner"}
			raw := freqcapv1connect.NewOverrideServiceClient(http.DefaultClient, e.url)
			req := connect.NewRequest(&freqcapv1.SetOverrideRequest{Policy: "vip", Subject: partner, Ttl: durationpb.New(time.Hour),
				Override: &freqcapv1.Override{Kind: freqcapv1.OverrideKind_OVERRIDE_KIND_LIMIT, Limits: map[string]int64{"daily": 4}, Reason: "partner quota"}})
			req.Header().Set("Authorization", "Bearer v1padm1n-s3cret")
			res, err := raw.SetOverride(ctx, req)
			if err != nil || res.Msg.GetOverride().GetUntil() == nil || res.Msg.GetOverride().GetUntil().AsTime().Before(time.Now().Add(50*time.Minute)) {
				t.Fatalf("SetOverride(limit, ttl 1h) = %v, %v; want until about an hour from now", res, err)
			}
			lim := res.Msg.GetOverride().GetId()
			for i := 1; i <= 5; i++ {
				d, err := sender.Take(ctx, vip, sdk.Attempt{Subject: partner})
				if err != nil || d.Allowed != (i <= 4) || d.Override.ID != lim || d.Rules[0].Limit != 4 {
					t.Fatalf("Take(partner) #%d = %+v, %v; want allowed %v under daily 4 (override #%d)", i, d, err, i <= 4, lim)
				}
			}

			// The shadow rule (1 a day) reports what it would deny, never
			// denies.
			plain := sdk.Subject{"user": "plain"}
			for i := 1; i <= 2; i++ {
				d, err := sender.Take(ctx, vip, sdk.Attempt{Subject: plain})
				wantShadow := ""
				if i == 2 {
					wantShadow = "trial"
				}
				if err != nil || !d.Allowed || strings.Join(d.ShadowDenied, ",") != wantShadow || len(d.Denied) != 0 || !d.Rules[1].Shadow {
					t.Fatalf("Take(plain) #%d = %+v, %v; want allowed, shadow_denied %q", i, d, err, wantShadow)
				}
			}
			in, err = auditor.Admin().Inspect(ctx, vip, plain)
			if err != nil || len(in.Denials) != 1 || !in.Denials[0].Shadow || in.Denials[0].Rule != "trial" {
				t.Fatalf("Inspect(plain).Denials = %+v, %v; want one shadow entry of trial", in.Denials, err)
			}

			// Refusals.
			for _, tc := range []struct {
				name string
				call func() error
				code connect.Code
			}{
				{"a policy without overrides", func() error {
					_, err := admin.Admin().SetOverride(ctx, push, sdk.Subject{"user": "x"}, driver.Override{Kind: driver.Exempt})
					return err
				}, connect.CodeInvalidArgument},
				{"inspect may not set", func() error {
					_, err := auditor.Admin().SetOverride(ctx, vip, star, driver.Override{Kind: driver.Exempt})
					return err
				}, connect.CodePermissionDenied},
				{"inspect may not delete", func() error { return auditor.Admin().DeleteOverride(ctx, vip, star, ex.ID) }, connect.CodePermissionDenied},
				{"take may not list", func() error { _, err := sender.Admin().Overrides(ctx, vip, star); return err }, connect.CodePermissionDenied},
				{"no kind", func() error { _, err := admin.Admin().SetOverride(ctx, vip, star, driver.Override{}); return err }, connect.CodeInvalidArgument},
				{"a rule the policy lacks", func() error {
					_, err := admin.Admin().SetOverride(ctx, vip, star, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"nope": 3}})
					return err
				}, connect.CodeInvalidArgument},
				{"ended already", func() error {
					_, err := admin.Admin().SetOverride(ctx, vip, star, driver.Override{Kind: driver.Block, Until: time.Now().Add(-time.Hour)})
					return err
				}, connect.CodeInvalidArgument},
			} {
				t.Run(tc.name, func(t *testing.T) {
					if err := tc.call(); connect.CodeOf(err) != tc.code {
						t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
					}
				})
			}

			var got []string
			for _, a := range e.audits() {
				got = append(got, a.Caller+" "+a.Action+" "+a.Outcome)
			}
			want := "vipadmin override-set ok,vipadmin override-delete ok,vipadmin override-delete failed: not_found," +
				"vipadmin override-set ok,vipadmin override-set ok,vipadmin override-set failed: invalid_argument," +
				"vipadmin override-set failed: invalid_argument," +
				"vipadmin override-set failed: invalid_argument"
			if strings.Join(got, ",") != want {
				t.Errorf("audit = %q, want %q", got, want)
			}
			if a := e.audits()[0]; a.Policy != "vip" || a.Subject["user"] != "abuser" || !strings.Contains(a.Detail, "block until") || !strings.Contains(a.Detail, "abuse report 7") {
				t.Errorf("first audit entry = %+v, want the block, its subject and reason", a)
			}
		})
	}
}
