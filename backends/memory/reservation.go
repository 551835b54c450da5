package memory

import (
	"strings"
	"time"

	"github.com/freqcap/freqcap/internal/alg"
	"github.com/freqcap/freqcap/sdk/driver"
)

// reservation is an open reservation: what to give back if it is cancelled or
// lapses (expiry <= now).
type reservation struct {
	exp     time.Time
	refunds []refund
}

// refund undoes one rule's part of a reservation (docs/DESIGN.md,
// "Reservations"), unless that state has moved on.
type refund struct {
	rule driver.Rule
	alg  driver.Algorithm // what rule runs on (runs)
	cost int64
	end  time.Time // FixedWindow: the window it was taken in
	cell int64     // SlidingWindow: the cell it was added to
	at   time.Time // SlidingLog: the run's time; GCRA: the tat it stored
	seq  uint64    // SlidingLog: the run's seq
}

// worthless is when the refund can no longer change anything: the state
// it would correct has expired by then.
func (rf refund) worthless() time.Time {
	switch rf.alg {
	case driver.FixedWindow:
		return rf.end
	case driver.SlidingWindow:
		return cellLeaves(rf.rule.Span(time.Nanosecond), rf.cell)
	case driver.SlidingLog:
		return rf.at.Add(rf.rule.Window)
	}
	return rf.at
}

// reserve records req.ReservationID with the refund plan of the states
// just stored: the rules that took the cost (ruleEval.took), each the
// units it took, as evaluated (rules: with the limits overrides gave
// them).
func (x *txn) reserve(req driver.Request, rules []driver.Rule, evs []ruleEval) {
	h := &reservation{exp: x.now.Add(req.ReservationTTL), refunds: make([]refund, 0, len(rules))}
	for i, r := range rules {
		if !evs[i].took {
			continue
		}
		rf := refund{rule: r, alg: evs[i].alg, cost: evs[i].units}
		switch rf.alg {
		case driver.FixedWindow:
			rf.end = evs[i].next.fixed.end
		case driver.SlidingWindow:
			rf.cell = r.Span(time.Nanosecond).Index(x.now.UnixNano())
		case driver.SlidingLog:
			rf.at, rf.seq = x.now, evs[i].next.log.seq
		case driver.GCRA:
			rf.at = evs[i].next.tat
		}
		h.refunds = append(h.refunds, rf)
	}
	s := x.shard(req.ReservationKey)
	e := s.get(req.ReservationKey, x.now)
	if e == nil || e.kind != kindReservations {
		e = &entry{key: strings.Clone(req.ReservationKey), kind: kindReservations, reservations: make(map[string]*reservation)} // put replaces any other
	}
	e.reservations[req.ReservationID] = h
	x.saveReservations(s, e)
}

// saveReservations stores a reservation set until its last reservation has lapsed and its last
// refund become worthless, or deletes it when empty.
func (x *txn) saveReservations(s *shard, e *entry) {
	if len(e.reservations) == 0 {
		s.remove(e)
		return
	}
	var exp time.Time
	for _, h := range e.reservations {
		exp = later(exp, h.exp)
		for _, rf := range h.refunds {
			exp = later(exp, rf.worthless())
		}
	}
	s.put(e, exp, x.now)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// reservations returns the live reservation set under key.
func (x *txn) reservations(key string) (*shard, *entry) {
	s := x.shard(key)
	e := s.get(key, x.now)
	if e == nil || e.kind != kindReservations {
		return s, nil
	}
	return s, e
}

// lapse refunds and deletes the lapsed reservations under key.
func (x *txn) lapse(key string) {
	s, e := x.reservations(key)
	if e == nil {
		return
	}
	changed := false
	for id, h := range e.reservations {
		if h.exp.After(x.now) {
			continue
		}
		for _, rf := range h.refunds {
			x.refund(rf)
		}
		delete(e.reservations, id)
		changed = true
	}
	if changed {
		x.saveReservations(s, e)
	}
}

// reservationKeys lists the rule keys the reservations under key would refund.
func (x *txn) reservationKeys(key string) []string {
	_, e := x.reservations(key)
	if e == nil {
		return nil
	}
	var keys []string
	for _, h := range e.reservations {
		for _, rf := range h.refunds {
			keys = append(keys, rf.rule.Key)
		}
	}
	return keys
}

// settle commits or cancels reservation id under key, as the Redis
// backend's settle.lua: only that reservation (the others lapse at the
// next decision that reads them); a lapsed one is given back like a
// cancel and reported not found. (A give-back depends on when it runs: a
// GCRA rule gets back only what is still ahead of its TAT.)
func (x *txn) settle(key, id string, commit bool) error {
	s, e := x.reservations(key)
	if e == nil || e.reservations[id] == nil {
		return driver.ErrReservationNotFound
	}
	h := e.reservations[id]
	delete(e.reservations, id)
	lapsed := !h.exp.After(x.now)
	if lapsed || !commit {
		for _, rf := range h.refunds {
			x.refund(rf)
		}
	}
	x.saveReservations(s, e)
	if lapsed {
		return driver.ErrReservationNotFound
	}
	return nil
}

// refund gives rf's units back, never below zero, and only to state that
// still holds them. Keys of shards this call has not locked are skipped
// (as on Redis, where a script touches only its KEYS); their state
// expires by itself.
func (x *txn) refund(rf refund) {
	s := x.shard(rf.rule.Key)
	if s == nil {
		return
	}
	e := s.get(rf.rule.Key, x.now)
	if e == nil || e.kind != kindOf(rf.alg) {
		return
	}
	switch rf.alg {
	case driver.FixedWindow:
		if e.fixed.end.Equal(rf.end) {
			e.fixed.count = max(0, e.fixed.count-rf.cost)
		}
	case driver.SlidingWindow:
		sp := rf.rule.Span(time.Nanosecond)
		if rf.cell < sp.Oldest(sp.Index(x.now.UnixNano())) {
			return // the cell no longer counts
		}
		for k := range e.sliding.cells {
			if c := &e.sliding.cells[k]; c.Idx == rf.cell {
				c.N = max(0, c.N-rf.cost)
			}
		}
	case driver.SlidingLog:
		runs := e.log.runs
		for k := range runs {
			if runs[k].Seq == rf.seq && runs[k].T.Equal(rf.at) {
				e.log.runs = append(runs[:k:k], runs[k+1:]...)
				break
			}
		}
	case driver.GCRA:
		if tat, ok := alg.GCRARefund(e.tat, rf.at, rf.rule, rf.cost, x.now); ok {
			e.tat = tat
		}
	}
}
