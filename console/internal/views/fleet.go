package views

import "strconv"

// FleetView is the overview's fleet panel: every policy's recorded
// traffic, and how the services' policies differ from the console's.
type FleetView struct {
	// Error says why there are no statistics (empty: there are).
	Error string
	// Warnings are the differences between the announced policies and
	// the console's, one sentence each.
	Warnings []string
	// Announced lists the policies services announced (name: services'
	// versions).
	Announced []string
	Policies  []FleetPolicy
}

// FleetPolicy is one policy's charts.
type FleetPolicy struct {
	Name      string
	Hour, Day Chart
	Rules     []FleetRule
	// Messaging sums up the last hour's messaging caps: denials for quiet
	// hours, per class what its exemptions decided, per rule its exempted
	// and headroom counts ("" when none).
	Messaging      []string
	TopDenied      []TopSubject
	Allowed1h      int64
	Denied1h       int64
	NoTraffic      bool // nothing recorded in 24 h
	DeniedShare    string
	NearLimit1h    int64
	RecordedPolicy bool // some service announced it within announcedWithin
}

// FleetRule is one rule's last hour, with a chart of its verdicts.
type FleetRule struct {
	Name                       string
	Allowed, Denied, NearLimit int64
	Chart                      Chart
	// Exempted counts the rule's would-be denials a message class was
	// exempt from; Headroom its denials for headroom only.
	Exempted, Headroom int64
}

// TopSubject is a denied subject linking to its subject page.
type TopSubject struct {
	Values []Field // its shard values, in policy order: user=u42
	URL    string
	Count  int64
}

// Chart is an inline SVG line chart of allowed and denied counts per
// bucket, laid out server-side.
type Chart struct {
	Title                 string
	Width, Height         int
	Allowed, Denied       string // SVG polyline points
	Max                   int64  // the y axis' top
	From, To              string // the x axis' ends
	StepNote              string // e.g. "10 s buckets"
	AllowedSum, DeniedSum int64
	// Evicted is the polyline of the keys the backend's servers evicted
	// per bucket (fleet.Reader.Evictions), on the same axis; "" where no
	// recorder sampled evictions (EvictedSum is then 0).
	Evicted    string
	EvictedSum int64
}

// viewBox is a chart's SVG viewBox.
func viewBox(c Chart) string { return "0 0 " + strconv.Itoa(c.Width) + " " + strconv.Itoa(c.Height) }
