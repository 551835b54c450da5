package redis

import (
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/sdk/driver"
)

// maxExactNs bounds the nanosecond quantities the redis-cell strategy
// sends or computes (period, tolerance): 2^53, the largest range where
// redis-cell's float64 division and take.lua's doubles are exact.
const maxExactNs = 1 << 53

// cellArgs returns CL.THROTTLE's count and period (whole seconds) for a
// GCRA rule when they express its emission interval Window/Limit exactly
// and it is a whole number of microseconds (period/count = Window/Limit,
// so redis-cell's interval, computed as period·1e9/count in float64 and
// truncated, is the same number of nanoseconds as the T of
// driver.Rule.GCRAParams that Lua GCRA and the memory backend use).
// Otherwise it says why the rule stays on Lua GCRA. The rule's limit,
// window and burst are already validated.
func cellArgs(r *driver.Rule) (count, period int64, why string) {
	w, l := int64(r.Window), r.Limit
	if w%l != 0 || (w/l)%int64(time.Microsecond) != 0 {
		return 0, 0, fmt.Sprintf("emission interval %v/%d is not a whole number of microseconds", r.Window, l)
	}
	t := w / l
	if r.Burst+1 > maxExactNs/t {
		return 0, 0, fmt.Sprintf("tolerance %v × %d exceeds 2^53 ns", time.Duration(t), r.Burst+1)
	}
	// period/count = w / (l·1e9), reduced.
	num := big.NewInt(w)
	den := new(big.Int).Mul(big.NewInt(l), big.NewInt(int64(time.Second)))
	g := new(big.Int).GCD(nil, nil, num, den)
	num.Quo(num, g)
	den.Quo(den, g)
	if !num.IsInt64() || !den.IsInt64() || num.Int64() > maxExactNs/int64(time.Second) {
		return 0, 0, fmt.Sprintf("%v/%d needs a CL.THROTTLE period beyond 2^53 ns", r.Window, l)
	}
	return den.Int64(), num.Int64(), ""
}

// ruleChoice is how take.lua runs one rule: its algorithm code, its
// state key and, for the redis-cell strategy, CL.THROTTLE's count and
// period. encode makes one per rule; finish names the strategy from it.
type ruleChoice struct {
	code, key             string
	cellCount, cellPeriod int64
	wide                  bool // its set is declared wide (driver.Rule.Wide): take.lua's lua.NestWide
}

// strategy names the strategy of c, as capability.Strategy prints it.
func (c ruleChoice) strategy() string {
	switch c.code {
	case "t":
		return capability.TairHashLua.String()
	case "h":
		return capability.HFELua.String()
	case "x":
		return capability.CellLua.String()
	}
	return capability.PlainLua.String()
}

// chooseRule returns how take.lua runs r under rep's choices. The
// algorithm code is set for the module strategies only ("t", "h", "x");
// encode fills in the plain ones.
func chooseRule(rep *capability.Report, r *driver.Rule) (ruleChoice, error) {
	ch := rep.Choice(r.Algorithm)
	switch ch.Strategy {
	case capability.Unavailable, capability.TairHashBare, capability.CellBare:
		return ruleChoice{}, unsupported(r.Algorithm, ch)
	}
	switch {
	case r.ExactLog():
		// A sliding window evaluated as an exact log: the packed log,
		// on every Lua strategy (driver.LogLine).
	case r.Algorithm == driver.SlidingWindow && ch.Strategy == capability.TairHashLua:
		return ruleChoice{code: "t", key: r.Key + suffixTairHash}, nil
	case r.Algorithm == driver.SlidingWindow && ch.Strategy == capability.HFELua:
		return ruleChoice{code: "h", key: r.Key + suffixHFE}, nil
	case r.Algorithm == driver.GCRA && ch.Strategy == capability.CellLua:
		if count, period, why := cellArgs(r); why == "" {
			return ruleChoice{code: "x", key: r.Key + suffixCell, cellCount: count, cellPeriod: period}, nil
		}
	}
	return ruleChoice{key: r.Key}, nil
}

// unsupported is the error for an algorithm the server cannot run.
func unsupported(a driver.Algorithm, ch capability.Choice) error {
	return fmt.Errorf("%w: %s rules on this server: %s", errors.ErrUnsupported, a, ch.Reason)
}

// stateKeys returns every key r's state may live under, whatever the
// strategy: Reset deletes them all.
func stateKeys(r *driver.Rule) []string {
	switch r.Algorithm {
	case driver.SlidingWindow:
		return []string{r.Key, r.Key + suffixTairHash, r.Key + suffixHFE}
	case driver.GCRA:
		return []string{r.Key, r.Key + suffixCell}
	}
	return []string{r.Key}
}

// describeReport turns a report into the backend's description, with what
// the backend adds to the choices: how plain Lua keeps each algorithm's
// state, which GCRA rules redis-cell can take, the key suffixes.
func describeReport(rep *capability.Report) driver.Description {
	d := rep.Description()
	for a, st := range d.Strategies {
		switch st.Name {
		case capability.PlainLua.String():
			st.Reason += "; " + plainDetail[a]
		case capability.CellLua.String():
			st.Reason += "; only for rules whose Window/Limit CL.THROTTLE's whole-second period expresses exactly (a whole number of µs, period and tolerance within 2^53 ns): other GCRA rules stay on plain Lua GCRA; state under <key>" + suffixCell
		case capability.TairHashLua.String():
			st.Reason += "; state under <key>" + suffixTairHash
		case capability.HFELua.String():
			st.Reason += "; state under <key>" + suffixHFE
		case capability.TairHashBare.String():
			st.Reason += "; state under <key>" + suffixTairHash + "; take, peek and inspect only (no reservations)"
		case capability.CellBare.String():
			st.Reason += "; only rules whose Window/Limit CL.THROTTLE's whole-second period expresses exactly (a whole number of µs, period and tolerance within 2^53 ns), other GCRA rules are refused; state under <key>" + suffixCell + "; take, peek and inspect only (no reservations); peeks read the TAT and never call CL.THROTTLE"
		}
		d.Strategies[a] = st
	}
	return d
}
