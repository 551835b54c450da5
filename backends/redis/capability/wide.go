package capability

import (
	"fmt"
	"strconv"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
)

// Wide is where the Redis backend keeps a wide subject's nested sets on
// the probed server, and why (docs/DESIGN.md, "Wide subjects"): a root
// whose packed value would pass At bytes while holding sections (a
// person's hundreds of live campaigns) moves them to a hash at the
// root's key plus Suffix, one field per value, whose dead fields either
// expire by themselves or are swept. The layout does not depend on the
// dimension set: every set nested in a root (one whose key extends the
// root's, the shard dimensions') goes there once its root is wide.
type Wide struct {
	// Mode is the wide marker's mode a root going wide now takes:
	// lua.WideModeHFE ("h", each field expires by HPEXPIREAT) or
	// lua.WideModeSweep ("s", a plain hash that each write adding a field
	// sweeps); "" where no script runs (no wide roots: scripting refused,
	// or the node is a replica).
	Mode string `json:"mode,omitempty"`
	// At is lua.WideAt, the root's size in bytes past which it goes wide,
	// and Suffix lua.WideSuffix.
	At     int    `json:"at,omitempty"`
	Suffix string `json:"suffix,omitempty"`
	// Reason says how the fields expire and why this mode, one sentence.
	Reason string `json:"reason,omitempty"`
}

// String is the sentence the backend's Describe gives as a note and
// `freqcap detect` prints: "wide subjects: …"; "" without a mode.
func (w Wide) String() string {
	if w.Mode == "" {
		return ""
	}
	return "wide subjects: a root whose value would pass " + strconv.Itoa(w.At) + " bytes (lua.WideAt) with nested sets, or that holds a set " +
		"its policy declares wide (sdk.WithWide) from that set's first value, keeps them in <root key>" +
		w.Suffix + ", mode " + w.Mode + ": " + w.Reason
}

// sweepFaster is why a server with native hash-field expiry sweeps its
// wide hashes by default (docs/MODULES.md, "Wide subjects").
const sweepFaster = "native hash-field expiry (HPEXPIRE on every master) is not used for them by default: on Redis 7.4.1 " +
	"the sweep decided a person's new campaigns 7–20 % faster (HPEXPIREAT on each field written costs more than a bounded " +
	"sweep on each field added) in less memory; Config.WideFieldExpiry uses it"

// tairHashFieldExpiry is why a TairHash server's wide hashes do not use
// the module's own per-field expiry (docs/MODULES.md, "Wide subjects").
const tairHashFieldExpiry = "TairHash's per-field expiry (EXHSET … PXAT) is not used for them: its SORT_MODE build " +
	"crashed a replica within seconds of fields expiring under that write pattern, and a master at the first write " +
	"after a TairHash key given a key expiry (PEXPIREAT) reached it (docs/MODULES.md, module bugs)"

// chooseWide fills r.Wide from the features and scripting r found: the
// sweep, measured faster than native hash-field expiry on Redis 7.4.1
// (sweepFaster); native hash-field expiry where every master has it and
// cfg asks for it (Config.WideFieldExpiry; it is no module strategy:
// Config.ModuleStrategies and ForcePlainLua do not change it).
func chooseWide(r *Report, cfg Config) {
	if !r.Scripting.All() || firstReplica(r.Nodes) != nil {
		return
	}
	r.Wide = Wide{At: lua.WideAt, Suffix: lua.WideSuffix}
	hfe, th := r.Feature(HFE), r.Feature(TairHash)
	if hfe.Usable && cfg.WideFieldExpiry {
		r.Wide.Mode = lua.WideModeHFE
		r.Wide.Reason = fmt.Sprintf("one field per value, each expiring by HPEXPIREAT at its section's expiry plus %d ms "+
			"(native hash-field expiry: HPEXPIRE on %s; Config.WideFieldExpiry)", lua.ExpirySlackMs, hfe.Count)
		return
	}
	why := whyNot(r, hfe, "no native hash-field expiry")
	if hfe.Usable {
		why = sweepFaster
	}
	r.Wide.Mode = lua.WideModeSweep
	r.Wide.Reason = fmt.Sprintf("a plain hash, one field per value, whose dead fields each write adding a field sweeps "+
		"(HSCAN of %d fields from a cursor kept in the root), the hash key expiring %d ms after its latest field: %s",
		lua.WideSweep, lua.ExpirySlackMs, why)
	if th.Have > 0 {
		r.Wide.Reason += "; " + tairHashFieldExpiry
	}
}
