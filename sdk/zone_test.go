package sdk_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
)

func TestLoadZone(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		msg  string // substring of the error
	}{
		{"Europe/Berlin", true, ""},
		{"UTC", true, ""},
		{"Australia/Lord_Howe", true, ""},
		{"", false, "empty zone name"},
		{"Local", false, `zone "Local" differs per machine`},
		{"Mars/Olympus", false, `zone "Mars/Olympus": not an IANA time zone`},
		{"../../etc/passwd", false, `zone "../../etc/passwd"`},
		{"Europe/" + strings.Repeat("x", 80), false, "zone name of 87 bytes, want <= 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc, err := sdk.LoadZone(tc.name)
			if tc.ok {
				if err != nil || loc == nil || loc.String() != tc.name {
					t.Fatalf("LoadZone(%q) = %v, %v, want the zone", tc.name, loc, err)
				}
				again, err := sdk.LoadZone(tc.name)
				if err != nil || again != loc {
					t.Errorf("LoadZone(%q) again = %p, %v, want the same *time.Location %p (loaded once)", tc.name, again, err, loc)
				}
				return
			}
			if !errors.Is(err, sdk.ErrInvalidZone) || !strings.Contains(err.Error(), tc.msg) || loc != nil {
				t.Errorf("LoadZone(%q) = %v, %v, want nil and an error wrapping %v containing %q", tc.name, loc, err, sdk.ErrInvalidZone, tc.msg)
			}
		})
	}
}

// TestAttemptZoneLocal: time.Local is refused before anything is
// decided (it differs per machine), by Take, Peek, Check and a batch.
func TestAttemptZoneLocal(t *testing.T) {
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.Daily("d", 3, time.UTC).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	lim := sdk.New(memory.New(nil))
	a := sdk.Attempt{Subject: sdk.Subject{"user": "u"}, Zone: time.Local}
	ctx := t.Context()
	_, terr := lim.Take(ctx, p, a)
	_, perr := lim.Peek(ctx, p, a)
	for name, err := range map[string]error{
		"take":  terr,
		"peek":  perr,
		"check": lim.Check(p, a),
		"batch": lim.TakeBatch(ctx, p, []sdk.Attempt{a})[0].Err,
	} {
		if !errors.Is(err, sdk.ErrInvalidZone) {
			t.Errorf("%s(zone time.Local) = %v, want %v", name, err, sdk.ErrInvalidZone)
		}
	}
	in, err := lim.Admin().Inspect(ctx, p, a.Subject)
	if err != nil || in.Rules[0].Used != 0 {
		t.Errorf("Inspect after the refusals = %+v, %v, want nothing used", in.Rules, err)
	}
}
