// Package capability finds out what a Redis-compatible server can do for
// freqcap — TairHash per-field expiry, redis-cell, native hash-field expiry
// (Redis ≥ 7.4, Valkey ≥ 9), Lua scripting — and chooses a strategy for
// each algorithm, and how a wide subject's nested sets keep their fields
// (Wide).
//
// Detection never trusts a version string (Valkey 8 reports
// redis_version 7.2.4 and has no HEXPIRE). Probe asks every master, in one
// pipelined round trip each, for COMMAND INFO of the commands the module
// strategies need, runs a trivial script, reads MODULE LIST and INFO
// modules as extra evidence where the server permits them, and asks INFO
// replication whether the node is a replica (no strategy runs on one:
// Report.Writable). Choose turns those findings into a Report; it does no
// I/O, so it can be tested on replies recorded from real servers
// (testdata/detect).
//
// Most callers want a Detector, which probes on first use and caches the
// report.
package capability

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/freqcap/freqcap/sdk/driver"
)

// Feature is a server capability a module strategy depends on.
type Feature uint8

const (
	// TairHash is per-field expiry from the TairHash module (Alibaba Tair,
	// or the open-source module): EXHINCRBY, EXHPEXPIREAT, EXHVALS.
	TairHash Feature = iota + 1
	// Cell is the redis-cell module's CL.THROTTLE (GCRA).
	Cell
	// HFE is native hash-field expiry (Redis ≥ 7.4, Valkey ≥ 9): HEXPIRE,
	// HPEXPIRE.
	HFE
)

// Features lists every Feature in report order.
var Features = []Feature{TairHash, Cell, HFE}

// String returns the feature's name as used in configuration and reports:
// "tairhash", "redis-cell" or "hfe".
func (f Feature) String() string {
	switch f {
	case TairHash:
		return "tairhash"
	case Cell:
		return "redis-cell"
	case HFE:
		return "hfe"
	}
	return fmt.Sprintf("Feature(%d)", uint8(f))
}

// MarshalText encodes the feature as its name.
func (f Feature) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// ParseFeature parses a feature name ("tairhash", "redis-cell" or "cell",
// "hfe"), ignoring case.
func ParseFeature(s string) (Feature, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "tairhash":
		return TairHash, nil
	case "redis-cell", "cell":
		return Cell, nil
	case "hfe":
		return HFE, nil
	}
	return 0, fmt.Errorf("capability: unknown feature %q (want tairhash, redis-cell or hfe)", s)
}

// Commands returns the commands (lower case) a server must have, on every
// master, for the feature to be used. The first one names the feature in
// reasons.
func (f Feature) Commands() []string {
	switch f {
	case TairHash:
		return []string{"exhincrby", "exhpexpireat", "exhvals"}
	case Cell:
		return []string{"cl.throttle"}
	case HFE:
		return []string{"hpexpire", "hexpire"}
	}
	return nil
}

// probedCommands are the commands Probe looks up with COMMAND INFO, in the
// order it asks for them.
var probedCommands = []string{"exhincrby", "exhpexpireat", "exhvals", "cl.throttle", "hexpire", "hpexpire"}

// moduleFeature maps a module name, as MODULE LIST reports it, to the
// feature it provides.
var moduleFeature = map[string]Feature{"tairhash": TairHash, "redis-cell": Cell}

// Strategy is how freqcap implements one algorithm on the probed server.
type Strategy uint8

const (
	// Unavailable: the server can run no strategy for the algorithm
	// (scripting refused and no module command that fits).
	Unavailable Strategy = iota
	// PlainLua is the portable decide script (backends/redis).
	PlainLua
	// TairHashLua is the decide script using TairHash per-field expiry.
	TairHashLua
	// HFELua is the decide script using native hash-field expiry.
	HFELua
	// CellLua is the decide script calling CL.THROTTLE.
	CellLua
	// TairHashBare runs TairHash commands without scripting (EXHINCRBY …
	// MAX per rule, with a compensating decrement when a later rule
	// denies): multi-rule decisions are not atomic.
	TairHashBare
	// CellBare runs GCRA rules as bare CL.THROTTLE commands without
	// scripting, after every other rule of the request; a CL.THROTTLE
	// consumption cannot be given back, so when one GCRA rule refuses
	// after another consumed, those units stay consumed (under-admission,
	// never over-admission): multi-rule decisions are not atomic.
	CellBare
)

// String returns the strategy's name as shown by the console and
// `freqcap detect`.
func (s Strategy) String() string {
	switch s {
	case Unavailable:
		return "unavailable"
	case PlainLua:
		return "lua"
	case TairHashLua:
		return "lua+tairhash"
	case HFELua:
		return "lua+hfe"
	case CellLua:
		return "lua+redis-cell"
	case TairHashBare:
		return "tairhash-bare"
	case CellBare:
		return "redis-cell-bare"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// MarshalText encodes the strategy as its name.
func (s Strategy) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// NonAtomic reports whether a decision made with s can be only partly
// applied (it compensates instead of being all-or-nothing).
func (s Strategy) NonAtomic() bool { return s == TairHashBare || s == CellBare }

// Config overrides detection. The zero value detects everything and uses
// what it finds.
type Config struct {
	// ForcePlainLua uses the plain Lua script for every algorithm, whatever
	// modules the server has.
	ForcePlainLua bool
	// ModuleStrategies uses the per-rule module strategies where their
	// features are usable (sliding windows on native hash-field expiry or
	// TairHash, GCRA on redis-cell), as detection chose before they were
	// measured slower than plain Lua (docs/MODULES.md). Without it, every
	// algorithm runs on plain Lua whenever scripting runs, and the report
	// says why each usable module is not used. ForcePlainLua wins over it.
	ModuleStrategies bool
	// Forbid lists features never to use even when found.
	Forbid []Feature
	// WideFieldExpiry makes wide roots' hashes expire each field by
	// HPEXPIREAT (mode h) where every master has native hash-field expiry
	// (Redis >= 7.4, Valkey >= 9). By default they are swept there too, as
	// on servers without it: measured faster on Redis 7.4.1 (docs/MODULES.md,
	// "Wide subjects"). Forbid of HFE wins over it.
	WideFieldExpiry bool
	// ProbeKey is the key named by the scripting probe on a standalone
	// server (proxies such as Alibaba Cloud's route EVAL by its first key and
	// refuse scripts without one). The probe script never reads or writes
	// it. Default "fc:{probe}". Cluster masters are probed with no key.
	ProbeKey string
}

func (c Config) forbids(f Feature) bool {
	for _, x := range c.Forbid {
		if x == f {
			return true
		}
	}
	return false
}

func (c Config) probeKey() string {
	if c.ProbeKey == "" {
		return "fc:{probe}"
	}
	return c.ProbeKey
}

// Module is one module a node reported (MODULE LIST or INFO modules).
type Module struct {
	Name    string `json:"name"`
	Version int64  `json:"ver"`
}

// Node is what one master answered. Probe fills it in from the server's
// replies; tests build it from recorded replies.
type Node struct {
	// Addr is the node's address as the client dials it.
	Addr string `json:"addr"`
	// Commands are the probed commands COMMAND INFO found, lower case, in
	// probe order.
	Commands []string `json:"commands"`
	// CommandInfoRefused is the server's refusal of COMMAND INFO ("" when it
	// answered). Then Commands is empty and modules are judged from
	// MODULE LIST alone.
	CommandInfoRefused string `json:"command_info_refused,omitempty"`
	// Scripting reports that EVAL ran the probe script.
	Scripting bool `json:"scripting"`
	// ScriptingRefused is the refusal of EVAL when Scripting is false.
	ScriptingRefused string `json:"scripting_refused,omitempty"`
	// EvalSHARefused is the refusal of EVALSHA ("" when it ran or answered
	// NOSCRIPT). Scripts must then be sent with EVAL.
	EvalSHARefused string `json:"evalsha_refused,omitempty"`
	// Modules are the loaded modules from MODULE LIST and INFO modules,
	// when either answered.
	Modules []Module `json:"modules,omitempty"`
	// ModuleListRefused is the refusal of MODULE LIST (often @admin-only on
	// managed services); it is only extra evidence.
	ModuleListRefused string `json:"module_list_refused,omitempty"`
	// InfoModules reports that INFO modules answered.
	InfoModules bool `json:"info_modules"`
	// TairHashIndex reports that INFO modules shows the tairhash_ sections,
	// which only the SORT_MODE and SLAB_MODE builds of the open-source
	// module register. The default (scan-mode) build crashes the server
	// under the per-field-expiry write pattern.
	TairHashIndex bool `json:"tairhash_index"`
	// Replica reports that INFO replication says the node is a replica
	// (role:slave), and Master is then its master's address (host:port,
	// from master_host and master_port; "" if not given). Every decision
	// writes, and a replica refuses writes (READONLY) or, made writable,
	// keeps them from its master and loses them at its next sync: no
	// strategy runs there. False when INFO replication was refused.
	Replica bool   `json:"replica,omitempty"`
	Master  string `json:"master,omitempty"`
	// Memory is what INFO memory and INFO stats said of the node's
	// memory, or their refusal (Memory.Refused).
	Memory Memory `json:"memory"`
}

// ReplicaError is Report.Writable's error: the probed node Addr is a
// replica of Master ("" if INFO replication did not say), where freqcap
// cannot decide. Match it with errors.As.
type ReplicaError struct {
	Addr, Master string
}

func (e *ReplicaError) Error() string { return "capability: " + e.sentence() }

// sentence says what e means: the report's note on a replica.
func (e *ReplicaError) sentence() string {
	return fmt.Sprintf("%s is a replica of %s: it takes no writes of its own, and every decision writes; point the client at the master", e.Addr, e.master())
}

// reason is every strategy's reason on a replica.
func (e *ReplicaError) reason() string {
	return e.Addr + " is a replica of " + e.master() + " (see notes)"
}

func (e *ReplicaError) master() string {
	if e.Master == "" {
		return "an unknown master"
	}
	return e.Master
}

func (n *Node) hasCommand(name string) bool {
	for _, c := range n.Commands {
		if c == name {
			return true
		}
	}
	return false
}

func (n *Node) module(name string) (Module, bool) {
	for _, m := range n.Modules {
		if strings.EqualFold(m.Name, name) {
			return m, true
		}
	}
	return Module{}, false
}

// has reports whether the node has every command of f. COMMAND INFO is
// authoritative; only when it was refused does MODULE LIST decide.
func (n *Node) has(f Feature) bool {
	if n.CommandInfoRefused != "" {
		for name, mf := range moduleFeature {
			if mf == f {
				_, ok := n.module(name)
				return ok
			}
		}
		return false
	}
	for _, c := range f.Commands() {
		if !n.hasCommand(c) {
			return false
		}
	}
	return true
}

// tairHashScanMode reports evidence that the node runs the open-source
// TairHash module in its default scan mode: the module is listed but its
// INFO sections are missing.
func (n *Node) tairHashScanMode() bool {
	_, listed := n.module("tairhash")
	return listed && n.InfoModules && !n.TairHashIndex
}

// Count is how many of the probed masters have something.
type Count struct {
	Have int `json:"have"`
	Of   int `json:"of"`
}

// All reports whether every master has it (and there is at least one).
func (c Count) All() bool { return c.Of > 0 && c.Have == c.Of }

// String renders the count as "2/3 masters".
func (c Count) String() string {
	if c.Of == 1 {
		return fmt.Sprintf("%d/1 master", c.Have)
	}
	return fmt.Sprintf("%d/%d masters", c.Have, c.Of)
}

// Choice is the strategy chosen for one algorithm, and why.
type Choice struct {
	Algorithm driver.Algorithm `json:"-"`
	Strategy  Strategy         `json:"strategy"`
	// Reason is one sentence, e.g. "TairHash per-field expiry: EXHINCRBY
	// on 3/3 masters".
	Reason string `json:"reason"`
}

// MarshalJSON encodes the choice with the algorithm's name.
func (c Choice) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Algorithm string   `json:"algorithm"`
		Strategy  Strategy `json:"strategy"`
		Reason    string   `json:"reason"`
	}{c.Algorithm.String(), c.Strategy, c.Reason})
}

// FeatureCount is one feature's presence across the masters.
type FeatureCount struct {
	Feature Feature `json:"feature"`
	Count
	// Missing lists the masters without the feature.
	Missing []string `json:"missing,omitempty"`
	// Forbidden reports that configuration forbids the feature.
	Forbidden bool `json:"forbidden,omitempty"`
	// Usable reports that strategies may use the feature: every master
	// has it, configuration allows it, and no master showed a reason
	// not to (see Notes).
	Usable bool `json:"usable"`
}

// Report is the outcome of detection: what each master has, what all of
// them agree on, and the strategy chosen for each algorithm. A Report is
// not modified after it is returned; treat it as read-only.
type Report struct {
	// Target names what was probed: an address, or the masters of a
	// cluster.
	Target string `json:"target"`
	// Cluster reports that the client was a cluster client.
	Cluster bool `json:"cluster"`
	// Nodes are the masters' findings, sorted by address.
	Nodes []Node `json:"nodes"`
	// Features is each feature's presence across the masters, in
	// Features order. Strategies use only what every master has.
	Features []FeatureCount `json:"features"`
	// Scripting counts the masters where EVAL runs.
	Scripting Count `json:"scripting"`
	// EvalOnly reports that some master refuses EVALSHA while EVAL works:
	// scripts must be sent with EVAL.
	EvalOnly bool `json:"eval_only,omitempty"`
	// Choices holds one choice per algorithm, in algorithm order.
	Choices []Choice `json:"choices"`
	// Wide is where the Redis backend keeps the nested sets of a wide
	// subject on this server, and why.
	Wide Wide `json:"wide"`
	// NonAtomic reports that some chosen strategy cannot make multi-rule
	// decisions all-or-nothing (no scripting); every Decision made with it
	// says NonAtomic.
	NonAtomic bool `json:"non_atomic"`
	// ForcedPlainLua and Forbidden echo the configuration that shaped the
	// choices.
	ForcedPlainLua bool      `json:"forced_plain_lua,omitempty"`
	Forbidden      []Feature `json:"forbidden,omitempty"`
	// Notes are further findings, one sentence each: disagreements between
	// masters, refused probes, unsafe module builds.
	Notes []string `json:"notes,omitempty"`
	// Warnings are findings that put enforcement at risk, one sentence
	// each: a master that may evict freqcap's keys under memory pressure,
	// or whose memory policy is unknown (Memory.Risk).
	Warnings []string `json:"warnings,omitempty"`
}

// Memory returns what each node said of its memory, in node order.
func (r *Report) Memory() []Memory {
	out := make([]Memory, len(r.Nodes))
	for i, n := range r.Nodes {
		out[i] = n.Memory
	}
	return out
}

// Algorithms lists the algorithms a Report chooses for, in order.
var Algorithms = []driver.Algorithm{driver.FixedWindow, driver.SlidingWindow, driver.SlidingLog, driver.GCRA}

// Choice returns the choice for a; the zero Choice (Unavailable) when the
// report has none.
func (r *Report) Choice(a driver.Algorithm) Choice {
	for _, c := range r.Choices {
		if c.Algorithm == a {
			return c
		}
	}
	return Choice{Algorithm: a, Strategy: Unavailable, Reason: "not detected"}
}

// Writable returns nil when no probed node is a replica, else a
// *ReplicaError naming the first replica (by address) and its master.
// The Redis backend refuses to decide on a report that is not writable.
func (r *Report) Writable() error {
	if e := firstReplica(r.Nodes); e != nil {
		return e
	}
	return nil
}

// firstReplica returns the ReplicaError of the first of ns that is a
// replica, or nil.
func firstReplica(ns []Node) *ReplicaError {
	for i := range ns {
		if n := &ns[i]; n.Replica {
			return &ReplicaError{Addr: n.Addr, Master: n.Master}
		}
	}
	return nil
}

// Feature returns the presence of f across the masters.
func (r *Report) Feature(f Feature) FeatureCount {
	for _, fc := range r.Features {
		if fc.Feature == f {
			return fc
		}
	}
	return FeatureCount{Feature: f}
}

// Description converts the report to the driver's account of a backend,
// as shown by the console. Name is "redis"; a backend may overwrite it.
func (r *Report) Description() driver.Description {
	d := driver.Description{
		Name:       "redis",
		Target:     r.Target,
		Strategies: make(map[driver.Algorithm]driver.Strategy, len(r.Choices)),
	}
	for _, c := range r.Choices {
		d.Strategies[c.Algorithm] = driver.Strategy{Name: c.Strategy.String(), Reason: c.Reason}
	}
	d.Notes = append(d.Notes, r.Notes...)
	if w := r.Wide.String(); w != "" {
		d.Notes = append(d.Notes, w)
	}
	for _, m := range r.Memory() {
		d.Memory = append(d.Memory, m.Driver())
	}
	d.Warnings = append(d.Warnings, r.Warnings...)
	return d
}
