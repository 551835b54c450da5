package redis

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Checked accessors for script replies: a reply of an unexpected shape is
// an error, never a panic.

func replyInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reply: want an integer, got %q", x)
		}
		return n, nil
	}
	return 0, fmt.Errorf("reply: want an integer, got %T", v)
}

func replyArray(v any) ([]any, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("reply: want an array, got %T", v)
	}
	return a, nil
}

func replyString(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("reply: want a string, got %T", v)
	}
	return s, nil
}

// parseTake decodes take.lua's reply for a request of the given rules:
// {first, now µs, the rules' bytes (perRuleBytes each: flags, used, reset
// µs, retry µs), then, first with lua.ReplyOverride, the override element, then,
// first with lua.ReplyQuiet, the quiet span's end µs, then trail
// entries or a replay's reservation id}; or a fast script's, one string:
// first and now in fastHead bytes, the rules' bytes, then, first with
// lua.ReplyQuiet, the quiet span's end (lua.ReplyInt bytes); {that
// string, the override element} where an override applied.
func parseTake(v any, rules []driver.Rule) (driver.Result, error) {
	var rest []any
	if a, ok := v.([]any); ok && len(a) == 2 {
		// A fast script's reply where an override applied: {its string,
		// the override element} (take.lua's first element, a string, is
		// a short integer).
		if s, ok := a[0].(string); ok && len(s) >= fastHead {
			v, rest = a[0], a[1:]
		}
	}
	if s, ok := v.(string); ok {
		n := fastHead + len(rules)*perRuleBytes
		var quiet string // the quiet span's end, after the rules
		if len(s) == n+lua.ReplyInt && s[0]&lua.ReplyQuiet != 0 {
			s, quiet = s[:n], s[n:]
		}
		if len(s) != n {
			return driver.Result{}, fmt.Errorf("reply: want %d bytes for %d rules, got %d", n, len(rules), len(s))
		}
		first := int64(s[0])
		if quiet != "" {
			first &^= lua.ReplyQuiet // read here, not from rest
		}
		res, err := parseReply(first, le7(s[1:fastHead]), rest, rules, func(i int) [perRuleReply]int64 {
			return ruleInts(s[fastHead+i*perRuleBytes:])
		})
		if err != nil {
			return driver.Result{}, err
		}
		if quiet != "" {
			res.Quiet = time.UnixMicro(le7(quiet))
		}
		return res, nil
	}
	a, err := replyArray(v)
	if err != nil {
		return driver.Result{}, err
	}
	if len(a) < 3 {
		return driver.Result{}, fmt.Errorf("reply: want at least 3 elements, got %d", len(a))
	}
	bin, err := replyString(a[2])
	if err != nil {
		return driver.Result{}, err
	}
	if len(bin) != len(rules)*perRuleBytes {
		return driver.Result{}, fmt.Errorf("reply: want %d bytes for %d rules, got %d", len(rules)*perRuleBytes, len(rules), len(bin))
	}
	return parseArrayReply(a[0], a[1], a[3:], rules, func(i int) [perRuleReply]int64 {
		return ruleInts(bin[i*perRuleBytes:])
	})
}

// ruleInts reads one rule's numbers from the perRuleBytes at b's start.
func ruleInts(b string) (ints [perRuleReply]int64) {
	ints[0] = int64(b[0])
	for j := 1; j < perRuleReply; j++ {
		ints[j] = le7(b[1+(j-1)*lua.ReplyInt : 1+j*lua.ReplyInt])
	}
	return ints
}

// appendRule appends one rule's numbers (flags, used, reset µs, retry
// µs) as perRuleBytes, as take.lua packs them (ruleInts reads them).
func appendRule(b []byte, ints [perRuleReply]int64) []byte {
	b = append(b, byte(ints[0]))
	for _, n := range ints[1:] {
		b = appendLE(b, n, lua.ReplyInt)
	}
	return b
}

// le7 reads a signed lua.ReplyInt-byte (7) little-endian integer
// (struct's 'i7').
func le7(b string) int64 {
	const ext = 64 - 8*lua.ReplyInt
	return leUint(b[:lua.ReplyInt]) << ext >> ext // sign-extend from 56 bits
}

// parseArrayReply is parseReply of a reply's first element and clock.
func parseArrayReply(f, at any, rest []any, rules []driver.Rule, rule func(int) [perRuleReply]int64) (driver.Result, error) {
	first, err := replyInt(f)
	if err != nil {
		return driver.Result{}, err
	}
	now, err := replyInt(at)
	if err != nil {
		return driver.Result{}, err
	}
	return parseReply(first, now, rest, rules, rule)
}

// parseReply builds a Result from a reply's first element, its clock (µs),
// each rule's four numbers (rule(i)) and the elements after them.
func parseReply(first, now int64, rest []any, rules []driver.Rule, rule func(int) [perRuleReply]int64) (driver.Result, error) {
	var res driver.Result
	var err error
	// Bits (lua.Reply*): allowed; a replay of the decision stored under
	// the request's idempotency key, followed by the original reservation
	// id; an override applied, its element first after the rules.
	const all = lua.ReplyAllowed | lua.ReplyReplayed | lua.ReplyOverride | lua.ReplyQuiet | lua.ReplyKeep
	if first < 0 || first&^all != 0 {
		return driver.Result{}, fmt.Errorf("reply: first element must be 0..%d, got %d", all, first)
	}
	var lims []int64
	if first&lua.ReplyOverride != 0 {
		if res.Override, lims, err = replyOverride(rest, len(rules)); err != nil {
			return driver.Result{}, err
		}
		rest = rest[1:]
	}
	var keeps []int64
	if res.Quiet, keeps, rest, err = replyQuietKeeps(first, rest, len(rules)); err != nil {
		return driver.Result{}, err
	}
	res.Allowed = first&lua.ReplyAllowed != 0
	res.Replayed = first&lua.ReplyReplayed != 0
	res.Now = time.UnixMicro(now)
	if res.Rules, err = replyRules(rules, lims, keeps, rule); err != nil {
		return driver.Result{}, err
	}
	if res.Replayed {
		if len(rest) != 1 {
			return driver.Result{}, fmt.Errorf("reply: replay: want the reservation id after the rules, got %d extra elements", len(rest))
		}
		if res.ReservationID, err = replyString(rest[0]); err != nil {
			return driver.Result{}, err
		}
		return res, nil
	}
	if res.Trail, err = replyTrail(rest); err != nil {
		return driver.Result{}, err
	}
	return res, nil
}

// replyQuietKeeps parses the elements after the override's: the quiet
// span's end (first has lua.ReplyQuiet) and a replay's keeps
// (lua.ReplyKeep; a replay without them kept none), and returns the rest.
func replyQuietKeeps(first int64, rest []any, n int) (quiet time.Time, keeps []int64, _ []any, err error) {
	if first&lua.ReplyQuiet != 0 {
		if len(rest) == 0 {
			return quiet, nil, nil, fmt.Errorf("reply: want the quiet span's end after the rules")
		}
		end, err := replyInt(rest[0])
		if err != nil {
			return quiet, nil, nil, err
		}
		quiet, rest = time.UnixMicro(end), rest[1:]
	}
	if first&lua.ReplyKeep != 0 { // a replay: the original attempt's headroom, whatever the retry's
		if len(rest) == 0 {
			return quiet, nil, nil, fmt.Errorf("reply: want the keeps element after the rules")
		}
		s, err := replyString(rest[0])
		if err != nil {
			return quiet, nil, nil, err
		}
		if keeps, err = parseKeeps(s, n); err != nil {
			return quiet, nil, nil, err
		}
		rest = rest[1:]
	}
	if first&lua.ReplyReplayed != 0 && keeps == nil {
		keeps = make([]int64, n) // the original kept none
	}
	return quiet, keeps, rest, nil
}

// replyOverride parses the override element, the first of rest: the
// override that applied and, for a limit override, the rules' limits.
func replyOverride(rest []any, n int) (driver.Override, []int64, error) {
	if len(rest) == 0 {
		return driver.Override{}, nil, fmt.Errorf("reply: want the override element after the rules")
	}
	s, err := replyString(rest[0])
	if err != nil {
		return driver.Override{}, nil, err
	}
	return parseOverrideElement(s, n)
}

// parseKeeps reads a keeps element (lua.ReplyKeep): n rules' Keep,
// comma-separated.
func parseKeeps(s string, n int) ([]int64, error) {
	f := strings.Split(s, ",")
	if len(f) != n {
		return nil, fmt.Errorf("reply: keeps element: want %d values, got %d", n, len(f))
	}
	keeps := make([]int64, n)
	for i, x := range f {
		k, err := strconv.ParseInt(x, 10, 64)
		if err != nil || k < 0 {
			return nil, fmt.Errorf("reply: keeps element: %q is not a keep", x)
		}
		keeps[i] = k
	}
	return keeps, nil
}

// replyRules builds the rules' results from their reply integers
// (flags, used, reset µs, retry µs); lims, when not nil, are the limits an
// override gave them, keeps the headroom a replayed attempt had (nil:
// the rules').
func replyRules(rules []driver.Rule, lims, keeps []int64, rule func(int) [perRuleReply]int64) ([]driver.RuleResult, error) {
	out := make([]driver.RuleResult, len(rules))
	for i := range out {
		r := &out[i]
		ints := rule(i)
		switch ints[0] {
		case lua.RuleFlagDenied, lua.RuleFlagAllowed, lua.RuleFlagTooHigh:
		default:
			return nil, fmt.Errorf("rule %d: reply: flags must be %d, %d or %d, got %d", i,
				lua.RuleFlagDenied, lua.RuleFlagAllowed, lua.RuleFlagTooHigh, ints[0])
		}
		r.Allowed = ints[0] == lua.RuleFlagAllowed
		r.CostTooHigh = ints[0] == lua.RuleFlagTooHigh
		r.Used = ints[1]
		r.Limit = rules[i].ReportedLimit()
		if lims != nil {
			r.Limit = lims[i]
		}
		// Headroom (driver.Rule.Keep): the room left for this attempt's
		// priority.
		keep := rules[i].Keep
		if keeps != nil {
			keep = keeps[i]
		}
		r.Remaining = max(0, r.Limit-keep-r.Used)
		r.ResetAfter = time.Duration(ints[2]) * time.Microsecond
		r.RetryAfter = time.Duration(ints[3]) * time.Microsecond
	}
	return out, nil
}

// replyTrail parses the trail entries after the rules (nil when none).
func replyTrail(rest []any) ([]driver.Denial, error) {
	if len(rest) == 0 {
		return nil, nil
	}
	trail := make([]driver.Denial, 0, len(rest))
	for _, x := range rest {
		s, err := replyString(x)
		if err != nil {
			return nil, err
		}
		d, err := parseDenial(s)
		if err != nil {
			return nil, err
		}
		trail = append(trail, d)
	}
	return trail, nil
}
