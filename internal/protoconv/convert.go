// Package protoconv translates between the sdk's types and the messages of
// proto/freqcap/v1 (package freqcapv1), both ways: freqcap serve answers
// with them and package client reads them back. It also holds the JSON
// codec both use. It is the one owner of that mapping.
package protoconv

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/ratelimitheaders"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// DegradedReason is what a degraded decision says instead of the
// backend's error, which names servers.
const DegradedReason = "decided without the backend: the backend is unavailable (details are in the server's log)"

// ErrDegraded stands for the backend error behind a degraded decision
// read from the wire (sdk.Decision.Err): the server keeps the real one in
// its log.
var ErrDegraded = errors.New(DegradedReason)

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// setDur sets *p to d (as durationpb.New) and returns p.
func setDur(p *durationpb.Duration, d time.Duration) *durationpb.Duration {
	p.Seconds, p.Nanos = int64(d/time.Second), int32(d%time.Second)
	return p
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// fromDur and fromTS read optional fields (nil is zero).
func fromDur(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

func fromTS(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// Rules converts rule decisions to the wire.
func Rules(rds []sdk.RuleDecision) []*freqcapv1.RuleDecision {
	if len(rds) == 0 {
		return nil
	}
	// One allocation for the messages and one for their durations (a
	// batch answer holds many).
	out := make([]*freqcapv1.RuleDecision, len(rds))
	msgs := make([]freqcapv1.RuleDecision, len(rds))
	durs := make([]durationpb.Duration, 2*len(rds))
	for i, rd := range rds {
		m := &msgs[i]
		m.Rule, m.Algorithm, m.Allowed = rd.Rule, freqcapv1.Algorithm(rd.Algorithm), rd.Allowed
		m.Used, m.Limit, m.Remaining = rd.Used, rd.Limit, rd.Remaining
		m.ResetAfter, m.RetryAfter = setDur(&durs[2*i], rd.ResetAfter), setDur(&durs[2*i+1], rd.RetryAfter)
		m.CostTooHigh, m.Strategy, m.Shadow, m.Before = rd.CostTooHigh, rd.Strategy, rd.Shadow, rd.Before
		m.Exempt, m.Keep, m.Headroom = freqcapv1.Exemption(rd.Exempt), rd.Keep, rd.Headroom
		out[i] = m
	}
	return out
}

// FromRules reads rule decisions from the wire.
func FromRules(in []*freqcapv1.RuleDecision) []sdk.RuleDecision {
	if len(in) == 0 {
		return nil
	}
	out := make([]sdk.RuleDecision, len(in))
	for i, rd := range in {
		out[i] = sdk.RuleDecision{
			Rule: rd.GetRule(), Algorithm: driver.Algorithm(rd.GetAlgorithm()), Allowed: rd.GetAllowed(),
			Used: rd.GetUsed(), Limit: rd.GetLimit(), Remaining: rd.GetRemaining(),
			ResetAfter: fromDur(rd.GetResetAfter()), RetryAfter: fromDur(rd.GetRetryAfter()),
			CostTooHigh: rd.GetCostTooHigh(), Strategy: rd.GetStrategy(),
			Shadow: rd.GetShadow(), Before: rd.GetBefore(),
			Exempt: driver.Exemption(rd.GetExempt()), Keep: rd.GetKeep(), Headroom: rd.GetHeadroom(),
		}
	}
	return out
}

// Decision converts d to the wire. A degraded decision's error is not
// sent (it names servers): DegradedReason is.
func Decision(d sdk.Decision) *freqcapv1.Decision {
	out := &freqcapv1.Decision{
		Allowed: d.Allowed, Policy: d.Policy, At: ts(d.At), Rules: Rules(d.Rules),
		Denied: d.Denied, RetryAfter: dur(d.RetryAfter), CostTooHigh: d.CostTooHigh,
		Degraded: d.Degraded, NonAtomic: d.NonAtomic, Replayed: d.Replayed, Cached: d.Cached,
		ShadowDenied: d.ShadowDenied, Durable: d.Durable, Replicas: int32(d.Replicas),
		Class: d.Class, Exempted: d.Exempted, Headroom: d.Headroom,
		QuietUntil: ts(d.Quiet), NextEligible: ts(d.NextEligible),
	}
	if len(d.Rooms) > 0 {
		// One allocation for the messages, as Rules (every decision of a
		// policy with headroom has rooms).
		out.Rooms = make([]*freqcapv1.Room, len(d.Rooms))
		msgs := make([]freqcapv1.Room, len(d.Rooms))
		for i, r := range d.Rooms {
			m := &msgs[i]
			m.Rule, m.Priority, m.Remaining = r.Rule, int32(r.Priority), r.Remaining
			out.Rooms[i] = m
		}
	}
	if d.Override.ID != 0 {
		out.Override = Override(d.Override)
	}
	if d.Degraded {
		out.DegradedReason = DegradedReason
	}
	return out
}

// FromDecision reads a decision from the wire. A degraded decision's Err
// is ErrDegraded.
func FromDecision(in *freqcapv1.Decision) sdk.Decision {
	if in == nil {
		return sdk.Decision{}
	}
	d := sdk.Decision{
		Allowed: in.GetAllowed(), Policy: in.GetPolicy(), At: fromTS(in.GetAt()),
		Rules: FromRules(in.GetRules()), Denied: in.GetDenied(), RetryAfter: fromDur(in.GetRetryAfter()),
		CostTooHigh: in.GetCostTooHigh(), Degraded: in.GetDegraded(), NonAtomic: in.GetNonAtomic(),
		Replayed: in.GetReplayed(), Cached: in.GetCached(), ShadowDenied: in.GetShadowDenied(),
		Durable: in.GetDurable(), Replicas: int(in.GetReplicas()),
		Class: in.GetClass(), Exempted: in.GetExempted(), Headroom: in.GetHeadroom(),
		Quiet: fromTS(in.GetQuietUntil()), NextEligible: fromTS(in.GetNextEligible()),
	}
	if rs := in.GetRooms(); len(rs) > 0 {
		d.Rooms = make([]sdk.Room, len(rs))
		for i, r := range rs {
			d.Rooms[i] = sdk.Room{Rule: r.GetRule(), Priority: int(r.GetPriority()), Remaining: r.GetRemaining()}
		}
	}
	if o := in.GetOverride(); o != nil {
		d.Override = FromOverride(o)
	}
	if d.Degraded {
		d.Err = ErrDegraded
	}
	return d
}

// Zone reads an attempt's zone: nil for none (""), else the zone of that
// name (sdk.LoadZone: an error wrapping sdk.ErrInvalidZone when it does
// not load).
func Zone(name string) (*time.Location, error) {
	if name == "" {
		return nil, nil
	}
	return sdk.LoadZone(name)
}

// ToZone converts sdk.Attempt.Zone to the wire: "" for none, else its
// name (time.Local's is "Local", which the server refuses as the sdk
// does).
func ToZone(loc *time.Location) string {
	if loc == nil {
		return ""
	}
	return loc.String()
}

// Attempts reads a batch's attempts, but for their zones (Zone: a zone
// that does not load is the attempt's own error).
func Attempts(in []*freqcapv1.Attempt) []sdk.Attempt {
	out := make([]sdk.Attempt, len(in))
	for i, a := range in {
		out[i] = sdk.Attempt{
			Subject: a.GetSubject(), Cost: a.GetCost(), IdempotencyKey: a.GetIdempotencyKey(),
			IdempotencyTTL: IdempotencyTTL(a.GetIdempotencyTtl()),
			Class:          a.GetClass(), Priority: int(a.GetPriority()), Identity: a.GetIdentity(),
		}
	}
	return out
}

// ToAttempts converts a batch's attempts to the wire.
func ToAttempts(in []sdk.Attempt) []*freqcapv1.Attempt {
	out := make([]*freqcapv1.Attempt, len(in))
	for i, a := range in {
		out[i] = ToAttempt(a)
	}
	return out
}

// ToAttempt converts an attempt to the wire (SetAttempt).
func ToAttempt(a sdk.Attempt) *freqcapv1.Attempt {
	w := &freqcapv1.Attempt{}
	SetAttempt(w, a)
	return w
}

// SetAttempt sets w's fields to a's; the Take, Peek and Reserve requests
// carry the same fields, so a caller building one of them can convert
// into a w of its own stack (w does not escape) instead of allocating.
func SetAttempt(w *freqcapv1.Attempt, a sdk.Attempt) {
	w.Subject, w.Cost, w.IdempotencyKey = a.Subject, a.Cost, a.IdempotencyKey
	w.IdempotencyTtl, w.Zone = ToIdempotencyTTL(a.IdempotencyTTL), ToZone(a.Zone)
	w.Class, w.Priority, w.Identity = a.Class, ToPriority(a.Priority), a.Identity
}

// ToPriority converts sdk.Attempt.Priority to the wire. One outside
// int32 is sent as -1, which the server refuses as the sdk refuses it
// (sdk.ErrInvalidPriority).
func ToPriority(p int) int32 {
	if p < math.MinInt32 || p > math.MaxInt32 {
		return -1
	}
	return int32(p)
}

// IdempotencyTTL reads an attempt's idempotency_ttl (absent: 0, the
// policy's). A negative one is passed on for the sdk to refuse.
func IdempotencyTTL(in *durationpb.Duration) time.Duration { return fromDur(in) }

// ToIdempotencyTTL converts sdk.Attempt.IdempotencyTTL to the wire: nil
// (absent) for 0, the policy's.
func ToIdempotencyTTL(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return dur(d)
}

// Inspection converts in to the wire.
func Inspection(in sdk.Inspection) *freqcapv1.InspectResponse {
	out := &freqcapv1.InspectResponse{
		Policy: in.Policy, At: ts(in.At), Rules: Rules(in.Rules), Skipped: in.Skipped,
		TrailMax: int32(in.TrailMax), TrailTtl: dur(in.TrailTTL), TrailFull: in.TrailFull,
	}
	for _, d := range in.Denials {
		out.Denials = append(out.Denials, &freqcapv1.Denial{
			At: ts(d.At), Rule: d.Rule, Used: d.Used, Limit: d.Limit, Cost: d.Cost,
			RetryAfter: dur(d.RetryAfter), CostTooHigh: d.CostTooHigh,
			Values: d.Values, ValuesPartial: d.ValuesPartial,
			Shadow: d.Shadow, Override: d.Override,
			Exempt: d.Exempt, Quiet: d.Quiet, Class: d.Class, Priority: int32(d.Priority), Identity: d.Identity,
		})
	}
	return out
}

// FromInspection reads an inspection from the wire.
func FromInspection(in *freqcapv1.InspectResponse) sdk.Inspection {
	out := sdk.Inspection{
		Policy: in.GetPolicy(), At: fromTS(in.GetAt()), Rules: FromRules(in.GetRules()),
		Skipped: in.GetSkipped(), TrailMax: int(in.GetTrailMax()), TrailTTL: fromDur(in.GetTrailTtl()),
		TrailFull: in.GetTrailFull(),
	}
	for _, d := range in.GetDenials() {
		out.Denials = append(out.Denials, sdk.Denial{
			At: fromTS(d.GetAt()), Policy: in.GetPolicy(), Rule: d.GetRule(), Used: d.GetUsed(),
			Limit: d.GetLimit(), Cost: d.GetCost(), RetryAfter: fromDur(d.GetRetryAfter()),
			CostTooHigh: d.GetCostTooHigh(), Values: d.GetValues(), ValuesPartial: d.GetValuesPartial(),
			Shadow: d.GetShadow(), Override: d.GetOverride(),
			Exempt: d.GetExempt(), Quiet: d.GetQuiet(), Class: d.GetClass(), Priority: int(d.GetPriority()),
			Identity: d.GetIdentity(),
		})
	}
	return out
}

// Policy converts p to the wire.
func Policy(p *sdk.Policy) *freqcapv1.Policy {
	tmax, tttl := p.Trail()
	out := &freqcapv1.Policy{
		Name: p.Name(), FailOpen: p.FailOpen(), Dimensions: p.Dimensions(), ShardBy: p.ShardBy(),
		HotDenyCache: int32(p.HotDenyCache()), TrailMax: int32(tmax), TrailTtl: dur(tttl),
		Overrides: p.ReadsOverrides(), Wide: p.Wide(), Person: p.Person(),
	}
	for _, c := range p.Classes() {
		out.Classes = append(out.Classes, &freqcapv1.MessageClass{
			Name: c.Name, AllRules: c.AllRules, Rules: c.Rules, Counted: c.Counted, QuietHours: c.QuietHours,
		})
	}
	if loc, periods := p.QuietHours(); loc != nil {
		q := &freqcapv1.QuietHours{Timezone: loc.String()}
		for _, qp := range periods {
			wp := &freqcapv1.QuietPeriod{From: dur(qp.From), To: dur(qp.To)}
			for _, d := range qp.Days {
				wp.Days = append(wp.Days, weekday(d))
			}
			q.Periods = append(q.Periods, wp)
		}
		out.QuietHours = q
	}
	for _, r := range p.Rules() {
		rj := &freqcapv1.Rule{
			Name: r.Name, Algorithm: freqcapv1.Algorithm(r.Algorithm), Limit: r.Limit,
			Window: dur(r.Window), Dimensions: r.Dimensions, SubWindows: int32(r.SubWindows),
			Burst: r.Burst, Calendar: freqcapv1.Calendar(r.Calendar),
			Quota: r.Limit, QuotaWindow: dur(ratelimitheaders.QuotaWindow(r)),
			Shadow: r.Shadow, Epoch: r.Epoch,
		}
		for _, h := range r.Headroom {
			rj.Headroom = append(rj.Headroom, &freqcapv1.Headroom{Priority: int32(h.Priority), Keep: h.Keep})
		}
		if r.Algorithm == driver.GCRA {
			rj.Quota = r.Burst + 1
		}
		if r.Calendar != driver.NoCalendar && r.Location != nil {
			rj.Timezone = r.Location.String()
		}
		out.Rules = append(out.Rules, rj)
	}
	return out
}

// FromPolicy builds the policy the wire describes, as the server loaded
// it (its rules, failure mode, trail and hot-deny cache).
func FromPolicy(in *freqcapv1.Policy) (*sdk.Policy, error) {
	rules := make([]sdk.Rule, 0, len(in.GetRules()))
	for _, r := range in.GetRules() {
		sr := sdk.Rule{
			Name: r.GetName(), Algorithm: driver.Algorithm(r.GetAlgorithm()), Limit: r.GetLimit(),
			Window: fromDur(r.GetWindow()), Dimensions: r.GetDimensions(), SubWindows: int(r.GetSubWindows()),
			Burst: r.GetBurst(), Calendar: driver.CalendarUnit(r.GetCalendar()),
			Shadow: r.GetShadow(), Epoch: r.GetEpoch(),
		}
		for _, h := range r.GetHeadroom() {
			sr.Headroom = append(sr.Headroom, sdk.Headroom{Priority: int(h.GetPriority()), Keep: h.GetKeep()})
		}
		if tz := r.GetTimezone(); tz != "" {
			loc, err := time.LoadLocation(tz)
			if err != nil {
				return nil, fmt.Errorf("policy %q: rule %q: %w", in.GetName(), r.GetName(), err)
			}
			sr.Location = loc
		}
		rules = append(rules, sr)
	}
	opts := []sdk.PolicyOption{sdk.WithTrail(int(in.GetTrailMax()), fromDur(in.GetTrailTtl()))}
	if in.GetFailOpen() {
		opts = append(opts, sdk.WithFailOpen())
	}
	if n := in.GetHotDenyCache(); n > 0 {
		opts = append(opts, sdk.WithHotDenyCache(int(n)))
	}
	if in.GetOverrides() {
		opts = append(opts, sdk.WithOverrides())
	}
	if w := in.GetWide(); len(w) > 0 {
		opts = append(opts, sdk.WithWide(w...))
	}
	mopts, err := fromMessaging(in)
	if err != nil {
		return nil, err
	}
	opts = append(opts, mopts...)
	return sdk.NewPolicy(in.GetName(), rules, opts...)
}

// fromMessaging converts in's messaging settings (classes, quiet hours,
// person) to policy options.
func fromMessaging(in *freqcapv1.Policy) ([]sdk.PolicyOption, error) {
	var opts []sdk.PolicyOption
	if cs := in.GetClasses(); len(cs) > 0 {
		classes := make([]sdk.Class, len(cs))
		for i, c := range cs {
			classes[i] = sdk.Class{Name: c.GetName(), AllRules: c.GetAllRules(), Rules: c.GetRules(),
				Counted: c.GetCounted(), QuietHours: c.GetQuietHours()}
		}
		opts = append(opts, sdk.WithClass(classes...))
	}
	if q := in.GetQuietHours(); q != nil {
		loc, err := sdk.LoadZone(q.GetTimezone()) // "" is an error, not UTC
		if err != nil {
			return nil, fmt.Errorf("policy %q: quiet hours: %w", in.GetName(), err)
		}
		periods := make([]sdk.QuietPeriod, len(q.GetPeriods()))
		for i, qp := range q.GetPeriods() {
			periods[i] = sdk.QuietPeriod{From: fromDur(qp.GetFrom()), To: fromDur(qp.GetTo())}
			for _, d := range qp.GetDays() {
				wd, err := fromWeekday(d)
				if err != nil {
					return nil, fmt.Errorf("policy %q: quiet hours: %w", in.GetName(), err)
				}
				periods[i].Days = append(periods[i].Days, wd)
			}
		}
		opts = append(opts, sdk.WithQuietHours(loc, periods...))
	}
	if person := in.GetPerson(); person != "" {
		opts = append(opts, sdk.WithPerson(person))
	}
	return opts, nil
}

// weekday converts a Go weekday to the wire's (ISO numbers: Sunday 7).
func weekday(d time.Weekday) freqcapv1.Weekday {
	if d == time.Sunday {
		return freqcapv1.Weekday_WEEKDAY_SUNDAY
	}
	return freqcapv1.Weekday(d)
}

// fromWeekday reads a weekday from the wire.
func fromWeekday(d freqcapv1.Weekday) (time.Weekday, error) {
	if d < freqcapv1.Weekday_WEEKDAY_MONDAY || d > freqcapv1.Weekday_WEEKDAY_SUNDAY {
		return 0, fmt.Errorf("weekday %v", d)
	}
	return time.Weekday(d % 7), nil
}

// Override converts o to the wire.
func Override(o driver.Override) *freqcapv1.Override {
	return &freqcapv1.Override{
		Id: o.ID, Kind: freqcapv1.OverrideKind(o.Kind), Counted: o.Counted, Limits: o.Limits,
		Until: ts(o.Until), Reason: o.Reason, By: o.By, Created: ts(o.Created),
	}
}

// FromOverride reads an override from the wire.
func FromOverride(in *freqcapv1.Override) driver.Override {
	o := driver.Override{
		ID: in.GetId(), Kind: driver.OverrideKind(in.GetKind()), Counted: in.GetCounted(), Limits: in.GetLimits(),
		Until: fromTS(in.GetUntil()), Reason: in.GetReason(), By: in.GetBy(), Created: fromTS(in.GetCreated()),
	}
	if len(o.Limits) == 0 {
		o.Limits = nil // as the sdk's: a JSON body decodes an absent map as an empty one
	}
	return o
}
