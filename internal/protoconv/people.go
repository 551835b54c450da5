package protoconv

import (
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Link puts an identity's link on the wire (nil stays nil: no link).
func Link(l *driver.Link) *freqcapv1.Link {
	if l == nil {
		return nil
	}
	return &freqcapv1.Link{Identity: l.ID, Person: l.Person, Created: ts(l.Created), By: l.By, Reason: l.Reason}
}

// FromLink reads a link from the wire.
func FromLink(in *freqcapv1.Link) driver.Link {
	return driver.Link{ID: in.GetIdentity(), Person: in.GetPerson(), Created: fromTS(in.GetCreated()), By: in.GetBy(), Reason: in.GetReason()}
}

// Person is GetPerson's answer: what is kept of person p, and link, the
// link of the identity asked for (nil: none, or a person was asked for).
func Person(person string, link *driver.Link, p driver.Person) *freqcapv1.GetPersonResponse {
	out := &freqcapv1.GetPersonResponse{Person: person, Link: Link(link), Zone: p.Zone,
		Links: make([]*freqcapv1.Link, 0, len(p.Links)), Audit: make([]*freqcapv1.PersonEvent, 0, len(p.Audit))}
	for i := range p.Links {
		out.Links = append(out.Links, Link(&p.Links[i]))
	}
	for _, e := range p.Audit {
		out.Audit = append(out.Audit, &freqcapv1.PersonEvent{At: ts(e.At), Op: e.Op, Identity: e.ID, Zone: e.Zone, By: e.By, Reason: e.Reason})
	}
	return out
}

// FromPerson reads GetPerson's answer: what is kept of the person (its
// links and audit nil when it has none, as the sdk's).
func FromPerson(in *freqcapv1.GetPersonResponse) driver.Person {
	p := driver.Person{Zone: in.GetZone()}
	for _, l := range in.GetLinks() {
		p.Links = append(p.Links, FromLink(l))
	}
	for _, e := range in.GetAudit() {
		p.Audit = append(p.Audit, driver.PersonEvent{At: fromTS(e.GetAt()), Op: e.GetOp(), ID: e.GetIdentity(), Zone: e.GetZone(), By: e.GetBy(), Reason: e.GetReason()})
	}
	return p
}
