// Package duration reads the durations people write in policy files, on
// the command line and in the console: a Go duration with an optional
// leading whole-day count ("90s", "1h30m", "7d", "1d12h").
package duration

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

var daysRE = regexp.MustCompile(`^(\d+)d(.*)$`)

// Parse parses a Go duration with an optional leading "<n>d" (24 h days).
// It refuses negative durations and ones beyond time.Duration's range.
func Parse(s string) (time.Duration, error) {
	var days time.Duration
	if m := daysRE.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > int64(1<<63-1)/int64(24*time.Hour) {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		days = time.Duration(n) * 24 * time.Hour
		if m[2] == "" {
			return days, nil
		}
		s = m[2]
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. 90s, 1h30m, 1d)", s)
	}
	if d < 0 || days+d < days {
		return 0, fmt.Errorf("duration %q out of range", s)
	}
	return days + d, nil
}
