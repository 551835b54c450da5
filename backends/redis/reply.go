package redis

import (
	"fmt"
	"strconv"
	"time"

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

// parseTake decodes take.lua's reply for a request of the given rules.
func parseTake(v any, rules []driver.Rule) (driver.Result, error) {
	n := len(rules)
	a, err := replyArray(v)
	if err != nil {
		return driver.Result{}, err
	}
	if len(a) < 2+n*perRuleReply {
		return driver.Result{}, fmt.Errorf("reply: want at least %d elements for %d rules, got %d", 2+n*perRuleReply, n, len(a))
	}
	var res driver.Result
	first, err := replyInt(a[0])
	if err != nil {
		return driver.Result{}, err
	}
	// 0/1: decided now; 2/3: a replay of the decision stored under the
	// request's idempotency key, followed by the original reservation id.
	if first < 0 || first > 3 {
		return driver.Result{}, fmt.Errorf("reply: first element must be 0..3, got %d", first)
	}
	res.Allowed = first%2 == 1
	res.Replayed = first >= 2
	now, err := replyInt(a[1])
	if err != nil {
		return driver.Result{}, err
	}
	res.Now = time.UnixMicro(now)
	res.Rules = make([]driver.RuleResult, n)
	for i := range res.Rules {
		r := &res.Rules[i]
		e := a[2+i*perRuleReply : 2+(i+1)*perRuleReply]
		var ints [perRuleReply]int64
		for j := range ints {
			if ints[j], err = replyInt(e[j]); err != nil {
				return driver.Result{}, fmt.Errorf("rule %d: %w", i, err)
			}
		}
		if ints[0] < 0 || ints[0] > 2 {
			return driver.Result{}, fmt.Errorf("rule %d: reply: flags must be 0, 1 or 2, got %d", i, ints[0])
		}
		r.Allowed = ints[0] == 1
		r.CostTooHigh = ints[0] == 2
		r.Used = ints[1]
		r.Limit = rules[i].ReportedLimit()
		r.Remaining = max(0, r.Limit-r.Used)
		r.ResetAfter = time.Duration(ints[2]) * time.Microsecond
		r.RetryAfter = time.Duration(ints[3]) * time.Microsecond
	}
	rest := a[2+n*perRuleReply:]
	if res.Replayed {
		if len(rest) != 1 {
			return driver.Result{}, fmt.Errorf("reply: replay: want the reservation id after %d rules, got %d extra elements", n, len(rest))
		}
		if res.ReservationID, err = replyString(rest[0]); err != nil {
			return driver.Result{}, err
		}
		return res, nil
	}
	if len(rest) > 0 {
		res.Trail = make([]driver.Denial, 0, len(rest))
		for _, x := range rest {
			s, err := replyString(x)
			if err != nil {
				return driver.Result{}, err
			}
			d, err := parseDenial(s)
			if err != nil {
				return driver.Result{}, err
			}
			res.Trail = append(res.Trail, d)
		}
	}
	return res, nil
}
