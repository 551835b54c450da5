package alg

import "time"

// Quiet is one daily quiet period in local time: from From until To
// (durations since local midnight, in [0, 24h)), starting on the weekdays
// of Days (bit time.Weekday set; 0: every day). To <= From runs past
// midnight into the next day: From 21h, To 8h is 21:00 to 08:00.
type Quiet struct {
	From, To time.Duration
	Days     uint8
}

// QuietSpans appends to dst, in order, the quiet spans of qs in loc that
// end after from and start before to: each a local day's period, from its
// From to its To (the next day's when To <= From) as loc's wall clock
// gives them (time.Date: a local time a DST change skips is read in the
// offset before the change), overlapping spans merged.
func QuietSpans(dst [][2]time.Time, qs []Quiet, loc *time.Location, from, to time.Time) [][2]time.Time {
	if len(qs) == 0 || !from.Before(to) {
		return dst
	}
	start := len(dst)
	// Local days from the day before from (a span may start then and run
	// past midnight) to the day of to.
	// The dates are counted in UTC at noon: a local midnight a DST change
	// skips (Beirut's, the Azores') reads as the day before in loc.
	fy, fm, fd := from.In(loc).Date()
	for d := 0; d < 400; d++ {
		date := time.Date(fy, fm, fd-1+d, 12, 0, 0, 0, time.UTC)
		by, bm, bd := date.Date()
		if !time.Date(by, bm, bd, 0, 0, 0, 0, loc).Before(to) && d > 1 {
			break
		}
		for _, q := range qs {
			if q.Days != 0 && q.Days&(1<<uint(date.Weekday())) == 0 {
				continue
			}
			s := wall(loc, by, bm, bd, q.From)
			ed := bd
			if q.To <= q.From {
				ed++
			}
			e := wall(loc, by, bm, ed, q.To)
			if !e.After(from) || !s.Before(to) || !s.Before(e) {
				continue
			}
			dst = append(dst, [2]time.Time{s, e})
		}
	}
	return mergeSpans(dst, start)
}

// wall returns the instant loc's clock reads h into the local day y-m-d.
func wall(loc *time.Location, y int, m time.Month, d int, h time.Duration) time.Time {
	return time.Date(y, m, d, int(h/time.Hour), int(h%time.Hour/time.Minute), int(h%time.Minute/time.Second), int(h%time.Second), loc)
}

// mergeSpans sorts dst[start:] and merges overlapping or touching spans.
func mergeSpans(dst [][2]time.Time, start int) [][2]time.Time {
	s := dst[start:]
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j][0].Before(s[j-1][0]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	out := start
	for i := start; i < len(dst); i++ {
		if out > start && !dst[i][0].After(dst[out-1][1]) {
			if dst[i][1].After(dst[out-1][1]) {
				dst[out-1][1] = dst[i][1]
			}
			continue
		}
		dst[out] = dst[i]
		out++
	}
	return dst[:out]
}

// QuietEnd returns the first instant at or after t outside every quiet
// span of qs in loc (t itself when t is not quiet).
func QuietEnd(qs []Quiet, loc *time.Location, t time.Time) time.Time {
	var buf [8][2]time.Time
	for range 8 {
		sp := QuietSpans(buf[:0], qs, loc, t, t.Add(time.Millisecond))
		moved := false
		for _, s := range sp {
			if !t.Before(s[0]) && t.Before(s[1]) {
				t, moved = s[1], true
			}
		}
		if !moved {
			return t
		}
	}
	return t
}
