package capability

import (
	"fmt"
	"slices"
	"strings"

	"github.com/freqcap/freqcap/sdk/driver"
)

// Choose decides, from what the masters answered, which strategy each
// algorithm uses. It does no I/O. Only what every master has is used; when
// masters disagree the report says so in Notes.
//
// Preferences, when scripting runs on every master: every algorithm uses
// plain Lua (its packed layout measures faster than every module strategy:
// moduleSlower), and the reasons say why a usable module is not used; with
// Config.ModuleStrategies, sliding windows use native hash-field expiry,
// else TairHash, else plain Lua, and GCRA uses redis-cell, else plain Lua.
// Without scripting only bare module commands remain: TairHash for
// sliding windows, redis-cell's CL.THROTTLE for GCRA (each atomic per
// rule), and the report is NonAtomic. Where a node is a replica no
// feature is usable and no algorithm has a strategy (Report.Writable).
func Choose(nodes []Node, cfg Config) Report {
	ns := slices.Clone(nodes)
	slices.SortFunc(ns, func(a, b Node) int { return strings.Compare(a.Addr, b.Addr) })
	r := Report{Nodes: ns, ForcedPlainLua: cfg.ForcePlainLua}
	for _, f := range Features {
		if cfg.forbids(f) {
			r.Forbidden = append(r.Forbidden, f)
		}
	}
	addrs := make([]string, len(ns))
	for i, n := range ns {
		addrs[i] = n.Addr
	}
	r.Target = strings.Join(addrs, ",")
	if len(ns) == 0 {
		r.Notes = append(r.Notes, "no master answered the probe")
	}

	for i := range ns {
		r.Notes = append(r.Notes, nodeNotes(&ns[i])...)
	}
	r.Warnings = Risks(r.Memory())
	replica := firstReplica(ns)

	// Features, counted over the masters.
	for _, f := range Features {
		fc := FeatureCount{Feature: f, Count: Count{Of: len(ns)}, Forbidden: cfg.forbids(f)}
		unsafe := false
		for i := range ns {
			if ns[i].has(f) {
				fc.Have++
			} else {
				fc.Missing = append(fc.Missing, ns[i].Addr)
			}
			if f == TairHash && ns[i].has(f) && ns[i].tairHashScanMode() {
				unsafe = true
			}
		}
		fc.Usable = fc.All() && !fc.Forbidden && !unsafe && replica == nil
		if fc.Have > 0 && fc.Have < fc.Of {
			r.Notes = append(r.Notes, fmt.Sprintf("masters disagree on %s: %s on %s (missing on %s); only what every master has is used",
				f, commandList(f), fc.Count, strings.Join(fc.Missing, ", ")))
		}
		r.Features = append(r.Features, fc)
	}

	// Scripting.
	r.Scripting.Of = len(ns)
	var refusals []string
	for _, n := range ns {
		if n.Scripting {
			r.Scripting.Have++
		} else {
			refusals = append(refusals, fmt.Sprintf("%s: %s", n.Addr, n.ScriptingRefused))
		}
		if n.Scripting && n.EvalSHARefused != "" {
			r.EvalOnly = true
		}
	}
	if r.Scripting.Have > 0 && r.Scripting.Have < r.Scripting.Of {
		r.Notes = append(r.Notes, fmt.Sprintf("masters disagree on scripting: EVAL runs on %s (refused on %s); scripting is treated as refused everywhere",
			r.Scripting, strings.Join(refusals, "; ")))
	}
	if r.EvalOnly {
		r.Notes = append(r.Notes, "EVALSHA is refused while EVAL runs: scripts must be sent with EVAL")
	}

	for _, a := range Algorithms {
		c := choose(&r, a, cfg)
		if replica != nil {
			c.Strategy, c.Reason = Unavailable, replica.reason()
		}
		r.Choices = append(r.Choices, c)
	}
	chooseWide(&r, cfg)
	for _, c := range r.Choices {
		if c.Strategy.NonAtomic() {
			r.NonAtomic = true
		}
	}
	if r.NonAtomic {
		n := "multi-rule atomicity is degraded: without scripting a decision over several rules is applied rule by rule and compensated on denial; every Decision says NonAtomic"
		if r.Choice(driver.GCRA).Strategy == CellBare {
			n += "; CL.THROTTLE cannot be compensated: GCRA rules consume last, and when a GCRA rule refuses after another consumed, those units stay consumed (under-admission, never over-admission)"
		}
		r.Notes = append(r.Notes, n)
	}
	return r
}

// nodeNotes explains one master's refused probes and doubtful evidence.
func nodeNotes(n *Node) []string {
	var notes []string
	if n.CommandInfoRefused != "" {
		s := fmt.Sprintf("%s refused COMMAND INFO (%s): modules are judged from MODULE LIST only and hash-field expiry is not detected", n.Addr, n.CommandInfoRefused)
		if n.ModuleListRefused != "" && !n.InfoModules {
			s = fmt.Sprintf("%s refused COMMAND INFO (%s) and MODULE LIST (%s): no module strategy is used", n.Addr, n.CommandInfoRefused, n.ModuleListRefused)
		}
		notes = append(notes, s)
	} else {
		for _, name := range []string{"tairhash", "redis-cell"} {
			f := moduleFeature[name]
			if _, listed := n.module(name); listed && !n.has(f) {
				notes = append(notes, fmt.Sprintf("%s lists the %s module, but COMMAND INFO does not find %s (renamed?): it is not used", n.Addr, name, commandList(f)))
			}
		}
	}
	if n.Replica {
		notes = append(notes, (&ReplicaError{Addr: n.Addr, Master: n.Master}).sentence())
	}
	if n.has(TairHash) && n.tairHashScanMode() {
		notes = append(notes, fmt.Sprintf("%s runs the open-source TairHash module's default scan-mode build (INFO modules has no tairhash_ sections), which crashes the server when a write meets an expired, unreclaimed field: TairHash is not used; build the module with SORT_MODE", n.Addr))
	}
	return notes
}

func choose(r *Report, a driver.Algorithm, cfg Config) Choice {
	c := Choice{Algorithm: a}
	scripting := r.Scripting.All()
	noScript := fmt.Sprintf("scripting refused (EVAL runs on %s)", r.Scripting)

	if cfg.ForcePlainLua {
		if scripting {
			c.Strategy, c.Reason = PlainLua, "plain Lua forced by configuration"
		} else {
			c.Strategy, c.Reason = Unavailable, "plain Lua forced by configuration, but "+noScript
		}
		return c
	}

	switch a {
	case driver.SlidingWindow:
		hfe, th := r.Feature(HFE), r.Feature(TairHash)
		switch {
		case scripting && !cfg.ModuleStrategies:
			c.Strategy = PlainLua
			c.Reason = "plain Lua: " + notUsed(r, hfe, "no native hash-field expiry") + "; " + notUsed(r, th, "no TairHash")
		case scripting && hfe.Usable:
			c.Strategy = HFELua
			c.Reason = fmt.Sprintf("native hash-field expiry: HPEXPIRE on %s", hfe.Count)
			if th.Usable {
				c.Reason += " (preferred to TairHash, also present)"
			}
		case scripting && th.Usable:
			c.Strategy = TairHashLua
			c.Reason = fmt.Sprintf("TairHash per-field expiry: EXHINCRBY on %s", th.Count)
		case scripting:
			c.Strategy = PlainLua
			c.Reason = "plain Lua: " + whyNot(r, hfe, "no native hash-field expiry") + "; " + whyNot(r, th, "no TairHash")
		case th.Usable:
			c.Strategy = TairHashBare
			c.Reason = fmt.Sprintf("TairHash without scripting (%s): EXHINCRBY … MAX per rule on %s, compensating decrement when a later rule denies; multi-rule decisions are not atomic", noScript, th.Count)
		default:
			c.Strategy = Unavailable
			c.Reason = noScript + ", and " + whyNot(r, th, "no TairHash")
		}
	case driver.GCRA:
		cell := r.Feature(Cell)
		switch {
		case scripting && !cfg.ModuleStrategies:
			c.Strategy = PlainLua
			c.Reason = "plain Lua: " + notUsed(r, cell, "no redis-cell")
		case scripting && cell.Usable:
			c.Strategy = CellLua
			c.Reason = fmt.Sprintf("redis-cell: CL.THROTTLE on %s", cell.Count)
		case scripting:
			c.Strategy = PlainLua
			c.Reason = "plain Lua: " + whyNot(r, cell, "no redis-cell")
		case cell.Usable:
			c.Strategy = CellBare
			c.Reason = fmt.Sprintf("redis-cell without scripting (%s): plain Lua GCRA cannot run, and CL.THROTTLE on %s is a whole GCRA step in one command, atomic per rule; it consumes after every other rule of a request, and units one GCRA rule consumed before another refused stay consumed (under-admission, never over-admission); multi-rule decisions are not atomic", noScript, cell.Count)
		default:
			c.Strategy = Unavailable
			c.Reason = noScript + ", and " + whyNot(r, cell, "no redis-cell")
		}
	default:
		if scripting {
			c.Strategy = PlainLua
			c.Reason = "plain Lua: no module strategy for " + algoPhrase(a)
		} else {
			c.Strategy = Unavailable
			c.Reason = noScript + ", and there is no module strategy for " + algoPhrase(a)
		}
	}
	return c
}

// moduleSlower says, per feature, what was measured against plain Lua
// (docs/MODULES.md, "Why plain Lua"): why detection leaves a usable module
// to Config.ModuleStrategies.
var moduleSlower = map[Feature]string{
	HFE:      "per-rule hash fields (lua+hfe) decided sliding-4 at 0.32 × raw(4) against 0.56 for packed Lua on the same server, and one hash per subject took 27.0 µs of server time per script against 25.8 for packed strings at the floor, 492 B per seed-policy subject against 429",
	TairHash: "per-rule TairHash fields (lua+tairhash) decided sliding-4 at 0.22 × raw(4) against 0.67 for packed Lua on the same server, and one TairHash per subject took 54.7 to 62.6 µs of server time per script against 38.6 for packed strings at the floor, 2185 B per seed-policy subject against 457",
	Cell:     "CL.THROTTLE per rule (lua+redis-cell) decided gcra-1 at 0.43 × raw(1) and gcra-4 at 0.31 × raw(4) against 0.65 and 0.62 for packed Lua GCRA on the same server",
}

// notUsed is whyNot for plain Lua chosen by default: a usable feature is
// named with what it measured and how to use it anyway.
func notUsed(r *Report, fc FeatureCount, absent string) string {
	if !fc.Usable {
		return whyNot(r, fc, absent)
	}
	return fmt.Sprintf("%s usable on %s but not used: %s (docs/MODULES.md); Config.ModuleStrategies uses it", fc.Feature, fc.Count, moduleSlower[fc.Feature])
}

// whyNot says why a feature is not used: forbidden, missing somewhere, or
// an unsafe build. absent is the phrase for "found nowhere".
func whyNot(r *Report, fc FeatureCount, absent string) string {
	switch {
	case fc.Forbidden:
		return fmt.Sprintf("%s forbidden by configuration", fc.Feature)
	case fc.Have == 0:
		return fmt.Sprintf("%s (%s on %s)", absent, strings.ToUpper(fc.Feature.Commands()[0]), fc.Count)
	case !fc.All():
		return fmt.Sprintf("%s on %s only", strings.ToUpper(fc.Feature.Commands()[0]), fc.Count)
	case !fc.Usable:
		return fmt.Sprintf("%s present but unsafe (see notes)", fc.Feature)
	}
	return fmt.Sprintf("%s usable", fc.Feature)
}

func commandList(f Feature) string {
	cs := f.Commands()
	up := make([]string, len(cs))
	for i, c := range cs {
		up[i] = strings.ToUpper(c)
	}
	return strings.Join(up, ", ")
}

func algoPhrase(a driver.Algorithm) string {
	switch a {
	case driver.FixedWindow:
		return "fixed windows"
	case driver.SlidingLog:
		return "sliding logs"
	}
	return a.String()
}
