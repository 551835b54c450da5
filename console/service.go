package console

import (
	"os"
	"strings"

	"github.com/freqcap/freqcap/fleet"
)

// ServiceName is the name the console announces its own policies under
// (fleet.Options.Service): "freqcap-console/<host>". With a name, the
// overview knows that the console's announcement of the version it ran
// before an apply is superseded by its newer one (superseded), instead of
// warning "behind" until the old one fades (announcedWithin).
func ServiceName() string {
	const base = "freqcap-console"
	host, err := os.Hostname()
	if err != nil || host == "" {
		return base
	}
	host = strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' {
			return '_'
		}
		return r
	}, host)
	return (base + "/" + host)[:min(len(base)+1+len(host), fleet.MaxServiceLen)]
}

// superseded reports, per announcement of anns, whether the same named
// service announces the same policy at a higher store version (versions
// only grow: it moved on, by an apply). An unnamed process's
// announcements are never superseded (nothing tells two unnamed
// processes apart).
func superseded(anns []fleet.Announcement) []bool {
	newest := map[[2]string]int64{}
	for _, a := range anns {
		if k := [2]string{a.Service, a.Policy}; a.Service != "" {
			newest[k] = max(newest[k], a.Version)
		}
	}
	out := make([]bool, len(anns))
	for i, a := range anns {
		out[i] = a.Service != "" && a.Version < newest[[2]string{a.Service, a.Policy}]
	}
	return out
}
