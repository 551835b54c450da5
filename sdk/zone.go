package sdk

import (
	"fmt"
	"sync"
	"time"
)

// MaxZoneNameLen is the longest zone name LoadZone accepts, in bytes (the
// longest IANA name is about 30).
const MaxZoneNameLen = 64

// zones caches LoadZone's locations by name: time.LoadLocation reads and
// parses the zone's data on every call. It holds only names that loaded,
// so it is bounded by the zone database (about 600 names).
var zones sync.Map // string -> *time.Location

// LoadZone returns the time zone named name, an IANA name such as
// "Europe/Berlin" or "UTC", for Attempt.Zone. It loads each name once
// (time.LoadLocation, from the system's zone database or, where a program
// imports time/tzdata, the embedded one) and is safe for concurrent use.
// The error wraps ErrInvalidZone and names the zone: an empty name,
// "Local" (it differs per machine), one longer than MaxZoneNameLen or
// one that does not load.
func LoadZone(name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	switch {
	case name == "":
		return nil, fmt.Errorf("%w: empty zone name", ErrInvalidZone)
	case len(name) > MaxZoneNameLen:
		return nil, fmt.Errorf("%w: zone name of %d bytes, want <= %d", ErrInvalidZone, len(name), MaxZoneNameLen)
	case name == "Local":
		return nil, fmt.Errorf("%w: zone %q differs per machine: give an IANA name", ErrInvalidZone, name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w: zone %q: not an IANA time zone this program can load", ErrInvalidZone, name)
	}
	zones.Store(name, loc)
	return loc, nil
}
