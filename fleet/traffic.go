package fleet

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/driver/stats"
)

// The traffic sample: every consuming attempt (the decisions a Recorder
// counts) of the subjects whose shard values hash into a 1/Sample share,
// so that package fleet/whatif can replay them through other policies.
const (
	// DefaultSample is Options.Sample's default: 1 subject in 16.
	DefaultSample = 16
	// DefaultSampleKeep is Options.SampleKeep's default: entries kept per
	// policy per hour.
	DefaultSampleKeep = 20000
	// SampleStep is the span of one list of the sample (per policy), and
	// SampleRetention how long a list is kept after its span ends.
	SampleStep      = time.Hour
	SampleRetention = 24 * time.Hour
	// MaxSampleValues bounds the subject values one entry records (the
	// first ones by dimension name); an attempt with more is recorded
	// with the first ones and marked partial.
	MaxSampleValues = 16
	// maxSamplePending bounds the entries a policy holds between two
	// flushes; beyond, entries are dropped and counted in Lost.
	maxSamplePending = 1 << 14
)

// sampleFormat is the first field of every entry: the format's version;
// sampleFormatMessaging, of an entry of an attempt with a message class,
// a priority or a zone (older readers skip it as malformed; every other
// entry is written as before).
const (
	sampleFormat          = "1"
	sampleFormatMessaging = "2"
)

// samplePending holds a policy's sampled entries until a flush takes
// them, by hour (unix seconds of its start).
type samplePending struct {
	mu      sync.Mutex
	n       int
	count   atomic.Int64 // n, for full
	entries map[int64][]string
}

func (s *samplePending) add(hour int64, entry string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= maxSamplePending {
		return false
	}
	if s.entries == nil {
		s.entries = map[int64][]string{}
	}
	s.entries[hour] = append(s.entries[hour], entry)
	s.n++
	s.count.Store(int64(s.n))
	return true
}

// full reports that no more entries are taken until the next flush
// (a hint, read without the lock: add decides).
func (s *samplePending) full() bool { return s.count.Load() >= maxSamplePending }

func (s *samplePending) drain() (map[int64][]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, n := s.entries, s.n
	s.entries, s.n = nil, 0
	s.count.Store(0)
	return m, n
}

// sampled reports whether a subject of hash h is in a 1/n sample (n a
// power of two). The samples of two such rates nest: a subject in the
// 1/32 sample is in the 1/16 one.
func sampled(h uint64, n int) bool { return h&uint64(n-1) == 0 }

// sample records e's attempt in ps's pending entries (e is in the
// sample: its subject hash is h).
func (r *Recorder) sample(ps *policyStats, e *sdk.Event, h uint64) {
	if ps.sample.full() {
		r.lost.Add(1)
		return
	}
	d := &e.Decision
	a := SampledAttempt{At: d.At, Cost: max(e.Cost, 1), Op: e.Op, Allowed: d.Allowed, Cached: d.Cached,
		Override: overrideOf(d), Person: h, Class: d.Class, Priority: e.Priority}
	if e.Zone != nil {
		a.Zone = e.Zone.String()
	}
	entry := encodeSample(a, r.sampleN, e.Subject)
	hour := d.At.Truncate(SampleStep).Unix()
	if !ps.sample.add(hour, entry) {
		r.lost.Add(1)
	}
}

// overrideOf is the kind of the override that decided d (Exempt, Block)
// or changed its limits (Limit); 0 when none.
func overrideOf(d *sdk.Decision) driver.OverrideKind {
	if d.Override.ID == 0 {
		return 0
	}
	return d.Override.Kind
}

// appendSample adds ps's drained entries to logs, one stats.Log per hour.
func (r *Recorder) appendSample(logs []stats.Log, ps *policyStats) ([]stats.Log, int) {
	m, n := ps.sample.drain()
	hours := make([]int64, 0, len(m))
	for h := range m {
		hours = append(hours, h)
	}
	slices.Sort(hours)
	for _, h := range hours {
		start := time.Unix(h, 0)
		logs = append(logs, stats.Log{Key: sampleKey(r.prefix, ps.name, start), Append: m[h], Keep: r.sampleKeep,
			ExpireAt: start.Add(SampleStep + SampleRetention)})
	}
	return logs, n
}

// sampleKey is the list of a policy's sampled attempts of the SampleStep
// starting at start: "<prefix>:stats:{<policy>:sample:<unix>}".
func sampleKey(prefix, policy string, start time.Time) string {
	return statsKey(prefix, policy, "sample", start)
}

// SampledAttempt is one attempt of the traffic sample, as Reader.Traffic
// returns it.
type SampledAttempt struct {
	// At is the decision's time (the backend's clock); Cost its cost; Op
	// the operation ("take", "reserve", "wait").
	At   time.Time
	Cost int64
	Op   string
	// Allowed is what the policy run then decided; Cached, that the
	// hot-deny cache answered.
	Allowed, Cached bool
	// Override is the kind of the per-person override that decided the
	// decision (Exempt, Block) or changed its limits (Limit); 0: none.
	Override driver.OverrideKind
	// Class, Priority and Zone are the attempt's message class, priority
	// and zone name (sdk.Attempt.Class, Priority, Zone; empty and 0 when
	// it gave none), so that a replay decides it as it was. The attempt's
	// identity (sdk.Attempt.Identity) is not recorded: Values hold the
	// subject's values as the caller gave them.
	Class    string
	Priority int
	Zone     string
	// Person identifies the subject (a 64-bit hash of its shard values,
	// the same in every process).
	Person uint64
	// Sample is the 1/Sample share of subjects the recording process
	// logged (Options.Sample).
	Sample int
	// Values are the subject's values, each replaced by a 64-bit hash of
	// it (16 hex digits), by dimension: equal values have equal hashes,
	// which is all a replay needs, and no subject value is stored.
	// Partial reports that more than MaxSampleValues were given (the
	// first ones by name are kept).
	Values  map[string]string
	Partial bool
}

// encodeSample is an entry of the sample:
//
//	1|<unix ms>|<cost>|<op>|<flags>|<sample>|<person: hex>|<dim>=<hex>,…
//
// or, for an attempt with a message class, a priority or a zone, the same
// fields after a "2" and then three more:
//
//	2|…|<dim>=<hex>,…|<class>|<priority>|<zone>
//
// (empty for none; class and zone escaped as names are).
//
// flags: "a" allowed or "d" denied, then "c" for a cached denial, "E",
// "B" or "L" for an override, "+" for partial values. Dimension names
// are escaped as keyname.Prefix escapes (only [A-Za-z0-9_.-] stay), so
// '|', ',' and '=' never appear in them; values are hashes.
func encodeSample(a SampledAttempt, n int, s sdk.Subject) string {
	var dimBuf [MaxSampleValues]string
	dims := dimBuf[:0]
	partial := false
	for d := range s { // the first MaxSampleValues names, sorted
		if len(dims) < MaxSampleValues {
			dims = append(dims, d)
			continue
		}
		partial = true
		if m := slices.Max(dims); d < m {
			dims[slices.Index(dims, m)] = d
		}
	}
	slices.Sort(dims)
	b := make([]byte, 0, 64+40*len(dims))
	messaging := a.Class != "" || a.Priority != 0 || a.Zone != ""
	if messaging {
		b = append(b, sampleFormatMessaging...)
	} else {
		b = append(b, sampleFormat...)
	}
	b = append(b, '|')
	b = strconv.AppendInt(b, a.At.UnixMilli(), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, a.Cost, 10)
	b = append(b, '|')
	b = appendName(b, a.Op)
	b = append(b, '|')
	if a.Allowed {
		b = append(b, 'a')
	} else {
		b = append(b, 'd')
	}
	if a.Cached {
		b = append(b, 'c')
	}
	switch a.Override {
	case driver.Exempt:
		b = append(b, 'E')
	case driver.Block:
		b = append(b, 'B')
	case driver.Limit:
		b = append(b, 'L')
	}
	if partial {
		b = append(b, '+')
	}
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, '|')
	b = strconv.AppendUint(b, a.Person, 16)
	b = append(b, '|')
	for i, d := range dims {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendName(b, d)
		b = append(b, '=')
		b = strconv.AppendUint(b, valueHash(s[d]), 16)
	}
	if messaging {
		b = append(b, '|')
		if a.Class != "" {
			b = appendName(b, a.Class)
		}
		b = append(b, '|')
		b = strconv.AppendInt(b, int64(a.Priority), 10)
		b = append(b, '|')
		if a.Zone != "" {
			b = appendName(b, a.Zone)
		}
	}
	return string(b)
}

// appendName appends name escaped as keyname.Prefix escapes ("-" for an
// empty one).
func appendName(b []byte, name string) []byte {
	if name == "" {
		return append(b, '-')
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if keyname.NameByte(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', keyname.Hex[c>>4], keyname.Hex[c&15])
	}
	return b
}

// hex is a hash as entries and people counters write it.
func hex(h uint64) string { return strconv.FormatUint(h, 16) }

// valueHash is a subject value's stand-in in the sample.
func valueHash(v string) uint64 { return subjectHash(v) }

// decodeSample reverses encodeSample; false for an entry it did not
// write.
func decodeSample(entry string) (SampledAttempt, bool) {
	f := strings.Split(entry, "|")
	var msg []string // the messaging fields of format 2
	switch {
	case len(f) == 8 && f[0] == sampleFormat:
	case len(f) == 11 && f[0] == sampleFormatMessaging:
		f, msg = f[:8], f[8:]
	default:
		return SampledAttempt{}, false
	}
	ms, err1 := strconv.ParseInt(f[1], 10, 64)
	cost, err2 := strconv.ParseInt(f[2], 10, 64)
	n, err3 := strconv.Atoi(f[5])
	person, err4 := strconv.ParseUint(f[6], 16, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || cost < 1 || n < 1 || bits.OnesCount(uint(n)) != 1 || f[4] == "" {
		return SampledAttempt{}, false
	}
	a := SampledAttempt{At: time.UnixMilli(ms), Cost: cost, Op: keyname.Unescape(f[3]), Person: person, Sample: n}
	if msg != nil {
		p, err := strconv.Atoi(msg[1])
		if err != nil || p < 0 || p > sdk.MaxPriority || msg[1] != strconv.Itoa(p) {
			return SampledAttempt{}, false
		}
		a.Class, a.Priority, a.Zone = keyname.Unescape(msg[0]), p, keyname.Unescape(msg[2])
		if a.Class == "" && a.Priority == 0 && a.Zone == "" {
			return SampledAttempt{}, false // written as format 1
		}
	}
	for i, c := range []byte(f[4]) {
		switch {
		case i == 0 && (c == 'a' || c == 'd'):
			a.Allowed = c == 'a'
		case i > 0 && c == 'c':
			a.Cached = true
		case i > 0 && c == 'E':
			a.Override = driver.Exempt
		case i > 0 && c == 'B':
			a.Override = driver.Block
		case i > 0 && c == 'L':
			a.Override = driver.Limit
		case i > 0 && c == '+':
			a.Partial = true
		default:
			return SampledAttempt{}, false
		}
	}
	if f[7] != "" {
		a.Values = map[string]string{}
		for _, pair := range strings.Split(f[7], ",") {
			d, v, ok := strings.Cut(pair, "=")
			if !ok || d == "" || v == "" {
				return SampledAttempt{}, false
			}
			a.Values[keyname.Unescape(d)] = v
		}
	}
	return a, true
}

// Traffic is a policy's sampled attempts over a window (Reader.Traffic).
type Traffic struct {
	Policy string
	// From and To bound the window: attempts at or after From, up to To
	// (the Reader's now).
	From, To time.Time
	// Sample is the share of subjects the attempts stand for: 1 in
	// Sample, the coarsest share any recording process used (attempts of
	// subjects outside it, recorded by processes sampling more finely,
	// are left out, so that every subject in the sample is whole). 0 when
	// there are no attempts.
	Sample int
	// Attempts are the sampled attempts, oldest first.
	Attempts []SampledAttempt
	// Full counts the lists (one per policy per SampleStep) that held
	// their bound (Options.SampleKeep): their oldest attempts were
	// dropped, so the sample is missing some.
	Full int
	// Malformed counts entries no Recorder wrote, skipped.
	Malformed int
}

// Traffic reads the attempts Recorders sampled for the policy named
// policy over the window ending now (at most SampleStep +
// SampleRetention). Keys read: "<prefix>:stats:{<policy>:sample:<unix>}",
// one list per SampleStep. A list holding the Reader's
// Options.SampleKeep entries is counted in Full.
func (rd *Reader) Traffic(ctx context.Context, policy string, window time.Duration) (Traffic, error) {
	if !validName(policy) {
		return Traffic{}, fmt.Errorf("fleet: traffic: %w: invalid policy name", sdk.ErrInvalidPolicy)
	}
	if window <= 0 || window > SampleStep+SampleRetention {
		return Traffic{}, fmt.Errorf("fleet: traffic: window must be in (0, %v], got %v", SampleStep+SampleRetention, window)
	}
	now := rd.now()
	out := Traffic{Policy: policy, From: now.Add(-window), To: now}
	var q stats.Query
	for at := out.From.Truncate(SampleStep); !at.After(now); at = at.Add(SampleStep) {
		q.Logs = append(q.Logs, sampleKey(rd.prefix, policy, at))
	}
	ctx, cancel := rd.withTimeout(ctx)
	defer cancel()
	data, err := rd.st.ReadStats(ctx, q)
	if err != nil {
		return Traffic{}, fmt.Errorf("fleet: traffic: %w", err)
	}
	if len(data.Logs) != len(q.Logs) {
		return Traffic{}, fmt.Errorf("fleet: traffic: backend answered %d lists, want %d", len(data.Logs), len(q.Logs))
	}
	for _, l := range data.Logs {
		if len(l) >= rd.keep {
			out.Full++
		}
		for _, e := range l {
			a, ok := decodeSample(e)
			if !ok {
				out.Malformed++
				continue
			}
			if a.At.Before(out.From) || a.At.After(now) {
				continue
			}
			out.Sample = max(out.Sample, a.Sample)
			out.Attempts = append(out.Attempts, a)
		}
	}
	out.Attempts = slices.DeleteFunc(out.Attempts, func(a SampledAttempt) bool { return !sampled(a.Person, out.Sample) })
	slices.SortStableFunc(out.Attempts, func(a, b SampledAttempt) int { return a.At.Compare(b.At) })
	return out, nil
}
