package views

// PersonView is the person section (the person page, the subject page):
// the person of an identity, its identities, stored zone and audit, and
// for admins the forms changing them.
type PersonView struct {
	Shown bool // false: no section (the subject page of a policy with several shard dimensions)
	Error string
	// ID is the value looked up; Person its person (ID itself when it has
	// no link); Linked that ID is an identity of another person.
	ID     string
	Person string
	Linked bool
	// PersonURL is the person page of Person; SubjectURL the subject page
	// of Person under the same policy ("" elsewhere, or when not linked).
	PersonURL  string
	SubjectURL string
	Zone       string // the person's stored zone ("" none)
	Identities []PersonLinkRow
	Audit      []PersonEventRow
	CanEdit    bool
	Back       string // the page the forms return to
	Notice     string // the change just made
}

// PersonLinkRow is one identity of a person.
type PersonLinkRow struct {
	ID, Linked, By, Reason string
}

// PersonEventRow is one entry of a person's audit, newest first.
type PersonEventRow struct {
	At, Change, By, Reason string
}

// PersonPageView is the person lookup page.
type PersonPageView struct {
	Page
	Query  string // the id looked up
	Person PersonView
}
