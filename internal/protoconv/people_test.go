package protoconv_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// A person (links, zone, audit) and a link survive the trip to the wire
// and back; a person with nothing kept comes back empty.
func TestPersonRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 123456789, time.UTC)
	l := driver.Link{ID: "+12125550123", Person: "42", Created: at, By: "ops", Reason: "verified phone"}
	p := driver.Person{
		Links: []driver.Link{l, {ID: "dev-8f2c", Person: "42", Created: at.Add(time.Minute), By: "ops"}},
		Zone:  "Europe/Berlin",
		Audit: []driver.PersonEvent{
			{At: at.Add(2 * time.Minute), Op: "zone", Zone: "Europe/Berlin", By: "ops", Reason: "moved"},
			{At: at.Add(time.Minute), Op: "unlink", ID: "old", By: "alice", Reason: "sold"},
			{At: at, Op: "link", ID: "+12125550123", By: "ops", Reason: "verified phone"},
		},
	}
	w := protoconv.Person("42", &l, p)
	if got := protoconv.FromPerson(w); !reflect.DeepEqual(got, p) {
		t.Errorf("person round trip = %+v, want %+v", got, p)
	}
	if w.GetPerson() != "42" || protoconv.FromLink(w.GetLink()) != l {
		t.Errorf("person, link = %q, %+v; want 42, %+v", w.GetPerson(), w.GetLink(), l)
	}
	empty := protoconv.Person("7", nil, driver.Person{})
	if empty.GetLink() != nil || empty.GetLinks() == nil || empty.GetAudit() == nil {
		t.Errorf("empty person = %+v; want no link, empty (not null) links and audit", empty)
	}
	if got := protoconv.FromPerson(empty); !reflect.DeepEqual(got, driver.Person{}) {
		t.Errorf("empty person round trip = %+v, want the zero Person", got)
	}
}

// The errors of links and persons are classified as their codes and
// reasons, and read back as themselves.
func TestPersonErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   connect.Code
		reason freqcapv1.Reason
	}{
		{sdk.ErrInvalidIdentity, connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_IDENTITY},
		{driver.ErrLinkNotFound, connect.CodeNotFound, freqcapv1.Reason_REASON_LINK_NOT_FOUND},
		{driver.ErrIdentityLinked, connect.CodeAlreadyExists, freqcapv1.Reason_REASON_IDENTITY_LINKED},
		{driver.ErrTooManyLinks, connect.CodeFailedPrecondition, freqcapv1.Reason_REASON_TOO_MANY_LINKS},
	} {
		code, reason := protoconv.Classify(fmt.Errorf("sdk: link: %w", tc.err))
		if code != tc.code || reason != tc.reason {
			t.Errorf("Classify(%v) = %v, %v, want %v, %v", tc.err, code, reason, tc.code, tc.reason)
		}
		if got := protoconv.Sentinel(tc.reason); !errors.Is(got, tc.err) {
			t.Errorf("Sentinel(%v) = %v, want %v", tc.reason, got, tc.err)
		}
	}
}
