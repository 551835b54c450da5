package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Linker is what the console asks of a Limiter that keeps identity links
// and persons' stored zones (sdk's "One person, several identities": the
// person page, the subject page's person section, /api/v1/person).
// *sdk.Admin implements it; the console finds it on Config.Admin with a
// type assertion. Without it those pages say the backend keeps no links
// and the API answers 501.
type Linker interface {
	Link(ctx context.Context, identity, person string, by, reason string) (driver.Link, error)
	Unlink(ctx context.Context, identity, by, reason string) error
	LinkOf(ctx context.Context, identity string) (driver.Link, error)
	Person(ctx context.Context, person string) (driver.Person, error)
	SetPersonZone(ctx context.Context, person string, zone string, by, reason string) error
}

var _ Linker = (*sdk.Admin)(nil)

// markedLinker is the Linker the console calls, its errors marked as the
// backend's (see markedLimiter).
type markedLinker struct{ l Linker }

func (m markedLinker) Link(ctx context.Context, identity, person string, by, reason string) (driver.Link, error) {
	out, err := m.l.Link(ctx, identity, person, by, reason)
	return out, marked(err)
}

func (m markedLinker) Unlink(ctx context.Context, identity, by, reason string) error {
	return marked(m.l.Unlink(ctx, identity, by, reason))
}

func (m markedLinker) LinkOf(ctx context.Context, identity string) (driver.Link, error) {
	out, err := m.l.LinkOf(ctx, identity)
	return out, marked(err)
}

func (m markedLinker) Person(ctx context.Context, person string) (driver.Person, error) {
	out, err := m.l.Person(ctx, person)
	return out, marked(err)
}

func (m markedLinker) SetPersonZone(ctx context.Context, person string, zone string, by, reason string) error {
	return marked(m.l.SetPersonZone(ctx, person, zone, by, reason))
}

// linkerOf returns a's Linker, marked; nil when a keeps no links.
func linkerOf(a Admin) Linker {
	if l, ok := a.(Linker); ok {
		return markedLinker{l}
	}
	return nil
}

var errNoLinks = echo.NewHTTPError(http.StatusNotImplemented, "this console's limiter keeps no identity links")

// personError turns a failed link operation into the HTTP error to
// answer (sdk errors never contain identities).
func personError(op string, err error) error {
	switch {
	case errors.Is(err, sdk.ErrInvalidIdentity), errors.Is(err, sdk.ErrInvalidZone):
		return badRequest(err.Error())
	case errors.Is(err, driver.ErrIdentityLinked):
		return echo.NewHTTPError(http.StatusConflict, "this identity is linked to another person: unlink it first")
	case errors.Is(err, driver.ErrTooManyLinks):
		return echo.NewHTTPError(http.StatusConflict, fmt.Sprintf("this person has %d identities already", driver.MaxLinks))
	case errors.Is(err, driver.ErrLinkNotFound):
		return echo.NewHTTPError(http.StatusNotFound, "this identity has no link")
	case errors.Is(err, errors.ErrUnsupported):
		return echo.NewHTTPError(http.StatusNotImplemented, "this backend keeps no identity links")
	}
	return fmt.Errorf("%s: %w", op, err)
}

// personReason checks a change's reason, as overrides' are checked.
func personReason(reason string) (string, error) {
	reason = strings.TrimSpace(reason)
	switch {
	case reason == "":
		return "", badRequest("give a reason: it is kept with the person and in the audit log")
	case len(reason) > driver.MaxOverrideReasonLen:
		return "", badRequest(fmt.Sprintf("the reason is longer than %d bytes", driver.MaxOverrideReasonLen))
	case !utf8.ValidString(reason) || strings.ContainsAny(reason, "\r\n"):
		return "", badRequest("the reason must be one line of text")
	}
	return reason, nil
}

// personChange is one change of links or zones, as a form or the API
// gives it.
type personChange struct {
	Op       string // "link", "unlink" or "zone"
	Identity string // link, unlink
	Person   string // link, zone
	Zone     string // zone ("" clears)
	Reason   string
}

// changePerson makes ch, by the signed-in staff member (recorded by the
// backend with the person, and in the console's audit log as
// "person-link", "person-unlink" or "person-zone"). It returns the link
// made (Op "link").
func (s *Server) changePerson(c echo.Context, ch personChange) (driver.Link, error) {
	if s.ppl == nil {
		return driver.Link{}, errNoLinks
	}
	reason, err := personReason(ch.Reason)
	if err != nil {
		return driver.Link{}, err
	}
	by := identityOf(c).Name
	ctx := c.Request().Context()
	entry := s.auditEntry(c, "person-"+ch.Op, nil, nil)
	entry.Reason, entry.Outcome = reason, "ok"
	var l driver.Link
	var cerr error
	switch ch.Op {
	case "link":
		entry.Subject = sdk.Subject{"identity": ch.Identity, "person": ch.Person}
		entry.Detail = "linked to person " + ch.Person
		l, cerr = s.ppl.Link(ctx, ch.Identity, ch.Person, by, reason)
	case "unlink":
		entry.Subject = sdk.Subject{"identity": ch.Identity}
		entry.Detail = "unlinked"
		cerr = s.ppl.Unlink(ctx, ch.Identity, by, reason)
	case "zone":
		entry.Subject = sdk.Subject{"person": ch.Person}
		entry.Detail = "stored zone " + ch.Zone
		if ch.Zone == "" {
			entry.Detail = "stored zone cleared"
		}
		cerr = s.ppl.SetPersonZone(ctx, ch.Person, ch.Zone, by, reason)
	default:
		return l, badRequest("unknown change")
	}
	if cerr != nil {
		entry.Outcome = "failed"
		if refusedChange(cerr) {
			entry.Outcome = "refused"
		}
	}
	if err := s.audit.Record(entry); err != nil {
		return l, fmt.Errorf("person %s: recording the audit entry: %w", ch.Op, err)
	}
	if cerr != nil {
		return l, personError("person "+ch.Op, cerr)
	}
	s.backendAnswered()
	s.log.Info("console: person changed", "op", ch.Op, "actor", entry.Actor)
	return l, nil
}

// refusedChange reports whether err is the sdk or the backend refusing a
// change (bad input, a conflict, no such link, no links kept), not a
// failure.
func refusedChange(err error) bool {
	for _, e := range []error{sdk.ErrInvalidIdentity, sdk.ErrInvalidZone, driver.ErrIdentityLinked, driver.ErrTooManyLinks, driver.ErrLinkNotFound, errors.ErrUnsupported} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// resolvePerson returns the person of id (id itself when it has no link)
// and whether id is linked.
func (s *Server) resolvePerson(ctx context.Context, id string) (string, bool, error) {
	l, err := s.ppl.LinkOf(ctx, id)
	switch {
	case err == nil:
		return l.Person, true, nil
	case errors.Is(err, driver.ErrLinkNotFound):
		return id, false, nil
	}
	return "", false, err
}

// personView reads what the person section shows for id: its person,
// the person's identities, stored zone and audit. back is the page the
// section's forms return to; done the change just made ("" none).
func (s *Server) personView(ctx context.Context, id string, canEdit bool, back, done string) views.PersonView {
	v := views.PersonView{Shown: true, ID: id, CanEdit: canEdit, Back: back, Notice: personNotice(done)}
	if s.ppl == nil {
		v.Error = "This console's limiter keeps no identity links."
		return v
	}
	person, linked, err := s.resolvePerson(ctx, id)
	if err == nil {
		v.Person, v.Linked = person, linked
		var p driver.Person
		if p, err = s.ppl.Person(ctx, person); err == nil {
			fillPerson(&v, p)
			v.PersonURL = "/person?id=" + url.QueryEscape(person)
			return v
		}
	}
	switch {
	case errors.Is(err, sdk.ErrInvalidIdentity):
		v.Error = "This value cannot be an identity: " + err.Error() + "."
	case errors.Is(err, errors.ErrUnsupported):
		v.Error = "This backend keeps no identity links."
	default:
		s.warn.Warn("people", "console: reading a person failed", "err", err)
		v.Error = "The person could not be read: " + backendUnavailable + "."
	}
	return v
}

// fillPerson puts p's identities, zone and audit into v.
func fillPerson(v *views.PersonView, p driver.Person) {
	v.Zone = p.Zone
	for _, l := range p.Links {
		v.Identities = append(v.Identities, views.PersonLinkRow{ID: l.ID, Linked: fmtTime(l.Created), By: l.By, Reason: l.Reason})
	}
	for _, e := range p.Audit {
		v.Audit = append(v.Audit, views.PersonEventRow{At: fmtTime(e.At), Change: eventText(e), By: e.By, Reason: e.Reason})
	}
}

// eventText says what a person's audit event changed.
func eventText(e driver.PersonEvent) string {
	switch e.Op {
	case "zone":
		if e.Zone == "" {
			return "zone cleared"
		}
		return "zone " + e.Zone
	case "link", "unlink":
		return e.Op + " " + e.ID
	}
	return e.Op
}

func personNotice(done string) string {
	switch done {
	case "person-linked":
		return "Identity linked; the change is in the person's audit below and in the audit log."
	case "person-unlinked":
		return "Identity unlinked: it is its own person again; the change is in the person's audit below and in the audit log."
	case "person-zone":
		return "Stored zone changed; the change is in the person's audit below and in the audit log."
	}
	return ""
}

// subjectPersonView is the subject page's person section, for the value
// subj gives of p's person dimension (sdk.WithPerson), else of its one
// shard dimension; none when p has several and no person dimension, or
// subj lacks the value.
func (s *Server) subjectPersonView(ctx context.Context, p *sdk.Policy, subj sdk.Subject, canEdit bool, query, done string) views.PersonView {
	dim := p.Person()
	if shard := p.ShardBy(); dim == "" && len(shard) == 1 {
		dim = shard[0]
	}
	if dim == "" || subj[dim] == "" {
		return views.PersonView{}
	}
	v := s.personView(ctx, subj[dim], canEdit, "/subject?"+query, done)
	if v.Linked {
		v.SubjectURL = "/subject?" + subjectQuery(p.Name(), sdk.Subject{dim: v.Person})
	}
	return v
}

// personPage is GET /person?id=X: the person of any identity.
func (s *Server) personPage(c echo.Context) error {
	v := views.PersonPageView{Page: s.page(c, "person")}
	v.Title = "Person lookup"
	if id := c.QueryParam("id"); id != "" {
		v.Query = id
		v.Person = s.personView(c.Request().Context(), id, identityOf(c).Role >= RoleAdmin, "/person?id="+url.QueryEscape(id), c.QueryParam("done"))
	}
	return render(c, http.StatusOK, views.PersonPage(v))
}

// personBack is where a person form returns: its back field when it is
// one of the console's pages that show the section, else the person page
// of id.
func personBack(back, id, done string) string {
	if !strings.HasPrefix(back, "/subject?") && !strings.HasPrefix(back, "/person?") {
		back = "/person?id=" + url.QueryEscape(id)
	}
	if i := strings.IndexByte(back, '#'); i >= 0 {
		back = back[:i]
	}
	q, err := url.ParseQuery(back[strings.IndexByte(back, '?')+1:])
	if err != nil {
		return "/person?id=" + url.QueryEscape(id) + "&done=" + done + "#person"
	}
	q.Set("done", done)
	return back[:strings.IndexByte(back, '?')+1] + q.Encode() + "#person"
}

// personForm is POST /person/link, /person/unlink and /person/zone: the
// person section's forms (admin).
func (s *Server) personForm(op string) echo.HandlerFunc {
	return func(c echo.Context) error {
		ch := personChange{Op: op, Identity: c.FormValue("identity"), Person: c.FormValue("person"),
			Zone: strings.TrimSpace(c.FormValue("zone")), Reason: c.FormValue("reason")}
		if _, err := s.changePerson(c, ch); err != nil {
			return err
		}
		id := ch.Identity
		if op == "zone" {
			id = ch.Person
		}
		done := map[string]string{"link": "person-linked", "unlink": "person-unlinked", "zone": "person-zone"}[op]
		return c.Redirect(http.StatusSeeOther, personBack(c.FormValue("back"), id, done))
	}
}

// PersonJSON is the answer of GET /api/v1/person: the person of an
// identity (itself when it has no link), its identities, stored zone and
// audit (newest first).
type PersonJSON struct {
	ID         string            `json:"id"`
	Person     string            `json:"person"`
	Linked     bool              `json:"linked"` // ID is an identity of Person
	Zone       string            `json:"zone,omitempty"`
	Identities []LinkJSON        `json:"identities"`
	Audit      []PersonEventJSON `json:"audit"`
}

// LinkJSON is an identity's link to its person.
type LinkJSON struct {
	ID      string    `json:"id"`
	Person  string    `json:"person"`
	Created time.Time `json:"created"`
	By      string    `json:"by,omitempty"`
	Reason  string    `json:"reason,omitempty"`
}

func linkJSON(l driver.Link) LinkJSON {
	return LinkJSON{ID: l.ID, Person: l.Person, Created: l.Created.UTC(), By: l.By, Reason: l.Reason}
}

// PersonEventJSON is one entry of a person's audit.
type PersonEventJSON struct {
	At     time.Time `json:"at"`
	Op     string    `json:"op"` // link, unlink or zone
	ID     string    `json:"id,omitempty"`
	Zone   string    `json:"zone,omitempty"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

// PersonChangeRequest is the body of POST /api/v1/person/link (identity,
// person, reason), /api/v1/person/unlink (identity, reason) and
// /api/v1/person/zone (person, zone: "" clears, reason).
type PersonChangeRequest struct {
	Identity string `json:"identity,omitempty"`
	Person   string `json:"person,omitempty"`
	Zone     string `json:"zone,omitempty"`
	Reason   string `json:"reason"`
}

// apiPerson is GET /api/v1/person?id=X (viewer).
func (s *Server) apiPerson(c echo.Context) error {
	id := c.QueryParam("id")
	if id == "" {
		return badRequest("id is required")
	}
	if s.ppl == nil {
		return errNoLinks
	}
	ctx := c.Request().Context()
	person, linked, err := s.resolvePerson(ctx, id)
	if err != nil {
		return personError("person", err)
	}
	p, err := s.ppl.Person(ctx, person)
	if err != nil {
		return personError("person", err)
	}
	s.backendAnswered()
	out := PersonJSON{ID: id, Person: person, Linked: linked, Zone: p.Zone, Identities: []LinkJSON{}, Audit: []PersonEventJSON{}}
	for _, l := range p.Links {
		out.Identities = append(out.Identities, linkJSON(l))
	}
	for _, e := range p.Audit {
		out.Audit = append(out.Audit, PersonEventJSON{At: e.At.UTC(), Op: e.Op, ID: e.ID, Zone: e.Zone, By: e.By, Reason: e.Reason})
	}
	return c.JSON(http.StatusOK, out)
}

// apiPersonChange is POST /api/v1/person/link, /unlink and /zone
// (admin), audited as the forms are.
func (s *Server) apiPersonChange(op string) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req PersonChangeRequest
		if err := decodeJSON(c, &req); err != nil {
			return err
		}
		l, err := s.changePerson(c, personChange{Op: op, Identity: req.Identity, Person: req.Person, Zone: req.Zone, Reason: req.Reason})
		if err != nil {
			return err
		}
		switch op {
		case "link":
			return c.JSON(http.StatusCreated, linkJSON(l))
		case "unlink":
			return c.JSON(http.StatusOK, map[string]string{"unlinked": req.Identity})
		}
		return c.JSON(http.StatusOK, map[string]string{"person": req.Person, "zone": req.Zone})
	}
}
