package redistest

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestClock checks that servers on a Clock read it: TIME gives the
// clock's instant to the microsecond, before and after it is set (days
// ahead: a cluster stays ok across the jump), and a key expires by it.
func TestClock(t *testing.T) {
	start := time.Date(2026, 10, 25, 0, 59, 59, 123456000, time.UTC)
	c := NewClock(t, start)
	s := c.Server(t)
	addrs := append([]string{s.Addr()}, c.Cluster(t)...)
	for _, at := range []time.Time{start, start.Add(14*24*time.Hour + 999*time.Microsecond)} {
		c.Set(at)
		for _, a := range addrs {
			got, err := commandArray(a, "TIME")
			if err != nil || len(got) != 2 {
				t.Fatalf("TIME on %s = %v, %v", a, got, err)
			}
			want := []string{"", ""}
			want[0], want[1] = itoa(at.Unix()), itoa(int64(at.Nanosecond()/1000))
			if got[0] != want[0] || got[1] != want[1] {
				t.Errorf("TIME on %s at %v = %v, want %v", a, at, got, want)
			}
		}
	}
	for _, a := range addrs[1:] {
		if info, err := command(a, "CLUSTER", "INFO"); err != nil || !strings.Contains(info, "cluster_state:ok") {
			t.Errorf("CLUSTER INFO on %s after the jump = %q, %v, want cluster_state:ok", a, info, err)
		}
	}
	if _, err := command(s.Addr(), "SET", "k", "v", "PX", "1000"); err != nil {
		t.Fatal(err)
	}
	c.Advance(1001 * time.Millisecond)
	if got, err := commandArray(s.Addr(), "EXISTS", "k"); err != nil || len(got) != 1 || got[0] != "0" {
		t.Errorf("EXISTS k 1001 ms after SET k PX 1000 = %v, %v, want 0", got, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
