package policystore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// DefaultPoll is how often a Live reads the store's current version
// number (and when it was applied: a few bytes) when no notification came
// (WatchOptions.Poll); it reads a version's document only when that
// changed.
const DefaultPoll = time.Second

// WatchOptions configure Store.Watch. The zero value is usable.
type WatchOptions struct {
	// Poll is how often the store's current version is read besides
	// following its notifications (default DefaultPoll): the bound on
	// how late a version can arrive when notifications are lost.
	Poll time.Duration
	// OnChange, when set, is called with each new snapshot after it
	// became Current, from the Live's goroutine (never concurrently).
	OnChange func(*Snapshot)
	// OnError, when set, is called with what kept a version from loading
	// (the previous one is kept) or the store from being read, from the
	// Live's goroutine; each failed version and each run of read errors
	// is reported once. Default: slog.Default().Warn.
	OnError func(error)
}

// Snapshot is one version of the policies as a limiter runs them: take
// one per decision (Live.Current) so that the decision uses one
// consistent version. It is immutable.
type Snapshot struct {
	Version int64
	// At, By and Reason are when, by whom and why it was applied.
	At     time.Time
	By     string
	Reason string
	// Policies are the version's policies, in file order.
	Policies []*sdk.Policy
}

// Policy returns the snapshot's policy named name, or nil.
func (s *Snapshot) Policy(name string) *sdk.Policy {
	if s == nil {
		return nil
	}
	for _, p := range s.Policies {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// A Live follows a store: Current is always a complete version, replaced
// atomically when a newer one is applied (or when the store was reset:
// emptied and applied again, e.g. a Redis restarted without persistence;
// OnError reports it). A version that does not load (ErrUnreadableVersion:
// written by hand or by a newer freqcap, larger than
// MaxPolicyDocument, or missing) is reported once through OnError and
// the version in force is kept. Each poll reads the store's version
// number and when it was applied (Store.PolicyHead), and a
// version's document only when those changed. A new version reaches it within
// about 2 s: at once through the store's notifications, else by the
// 1 s poll plus the read (WatchOptions.Poll). It owns a goroutine: Close
// stops it. It is safe for concurrent use.
type Live struct {
	s      *Store
	opts   WatchOptions
	cur    atomic.Pointer[Snapshot]
	cancel context.CancelFunc
	done   chan struct{}

	// The goroutine's own: the last version that failed to load (its
	// number and At), and whether the last read failed (to report each
	// once).
	failed  driver.PolicyVersion
	readErr bool
}

// Watch loads the store's current version (an error wrapping
// ErrNoPolicyVersion when the store is empty: apply a version first)
// and returns a Live that follows the store until ctx is done or Close.
// When the current version does not load, it starts from the newest one
// before it that loads (Head), as the store's other followers run it, and
// reports the current one through OnError; when none loads, the error
// wraps ErrUnreadableVersion.
func (s *Store) Watch(ctx context.Context, opts WatchOptions) (*Live, error) {
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.OnError == nil {
		opts.OnError = func(err error) { slog.Default().Warn("policystore: watch", "err", err) }
	}
	wctx, cancel := context.WithCancel(ctx)
	// Subscribe first: a version applied while the first one loads is
	// then not missed.
	ch, err := s.WatchPolicies(wctx)
	if err != nil {
		ch = nil // the poll covers it; Watch retries at each poll
		opts.OnError(fmt.Errorf("policystore: watch: subscribe: %w", err))
	}
	l := &Live{s: s, opts: opts, cancel: cancel, done: make(chan struct{})}
	h, err := s.Head(ctx)
	switch {
	case err != nil:
	case h.Number == 0:
		err = fmt.Errorf("the policy store is empty (no version applied yet): %w", driver.ErrNoPolicyVersion)
	case h.Loaded.Number == 0:
		err = fmt.Errorf("no version of the store loads, of the %d newest: %w", len(h.Unloadable), h.Unloadable[0].Err)
	}
	var snap *Snapshot
	if err == nil {
		snap, err = snapshot(h.Loaded)
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("policystore: watch: %w", err)
	}
	l.cur.Store(snap)
	if len(h.Unloadable) > 0 {
		l.failed = h.stamp
		opts.OnError(fmt.Errorf("policystore: watch: version %d is kept: %w", snap.Version, h.Unloadable[0].Err))
	}
	go l.run(wctx, ch)
	return l, nil
}

func snapshot(v Version) (*Snapshot, error) {
	ps, err := v.Policies()
	if err != nil {
		return nil, err
	}
	return &Snapshot{Version: v.Number, At: v.At, By: v.By, Reason: v.Reason, Policies: ps}, nil
}

// Current returns the version in force (never nil).
func (l *Live) Current() *Snapshot { return l.cur.Load() }

// Close stops following the store and waits for the goroutine to end.
// Current keeps returning the last version.
func (l *Live) Close() error {
	l.cancel()
	<-l.done
	return nil
}

func (l *Live) run(ctx context.Context, ch <-chan int64) {
	defer close(l.done)
	tick := time.NewTicker(l.opts.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case n, ok := <-ch:
			if !ok {
				ch = nil // resubscribed at the next poll
				continue
			}
			if n > l.Current().Version && n != l.failed.Version {
				l.load(ctx)
			}
		case <-tick.C:
			if ch == nil {
				if c, err := l.s.WatchPolicies(ctx); err == nil {
					ch = c
				}
			}
			l.load(ctx)
		}
	}
}

// load reads the store's current version number and, if it changed
// since Current (and is not the version that last failed), reads that
// version and, if it loads, makes it Current.
func (l *Live) load(ctx context.Context) {
	stamp, full, err := l.s.current(ctx)
	if err != nil {
		l.readFailed(ctx, err)
		return
	}
	cur := l.Current()
	if same(stamp, cur.Version, cur.At) || same(stamp, l.failed.Version, l.failed.At) {
		l.readErr = false
		return // nothing new, or a version already found not to load
	}
	var pv driver.PolicyVersion
	if full != nil {
		pv = *full
	} else if pv, err = l.s.fetch(ctx, stamp.Version, true); err != nil && !errors.Is(err, ErrUnreadableVersion) {
		l.readFailed(ctx, err)
		return
	}
	l.readErr = false
	if stamp.Version <= cur.Version {
		// Another store than the one Current came from: emptied and
		// applied again (a server restarted without persistence). Its
		// current version is the one in force.
		l.opts.OnError(fmt.Errorf("policystore: watch: the store was reset (version %d applied %v, was version %d applied %v): following it", stamp.Version, stamp.At, cur.Version, cur.At))
	}
	var snap *Snapshot
	if err == nil {
		var v Version
		if v, _, err = loadVersion(pv); err == nil {
			snap, err = snapshot(v)
		}
	}
	if err != nil {
		l.failed = stamp
		l.opts.OnError(fmt.Errorf("policystore: watch: version %d is kept: %w", cur.Version, err))
		return
	}
	l.cur.Store(snap)
	if l.opts.OnChange != nil {
		l.opts.OnChange(snap)
	}
}

// readFailed reports a failure to read the store, once per run of them.
func (l *Live) readFailed(ctx context.Context, err error) {
	if ctx.Err() == nil && !l.readErr {
		l.readErr = true
		l.opts.OnError(fmt.Errorf("policystore: watch: read the current version: %w", err))
	}
}

// same reports whether stamp is version n applied at at.
func same(stamp driver.PolicyVersion, n int64, at time.Time) bool {
	return stamp.Version == n && stamp.At.Equal(at)
}
