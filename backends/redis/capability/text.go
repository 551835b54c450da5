package capability

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// String renders the report for people, as `freqcap detect` prints it.
func (r *Report) String() string {
	var b strings.Builder
	kind := "server"
	if r.Cluster {
		kind = "cluster"
	}
	// A replica is no master: the report names nodes instead, and each
	// replica's master.
	replicas := 0
	for _, n := range r.Nodes {
		if n.Replica {
			replicas++
		}
	}
	node, heading := "master", "masters"
	if replicas > 0 {
		node, heading = "node", "nodes"
	}
	var counts []string
	if masters := len(r.Nodes) - replicas; masters > 0 || replicas == 0 {
		counts = append(counts, plural(masters, "master"))
	}
	if replicas > 0 {
		counts = append(counts, plural(replicas, "replica"))
	}
	fmt.Fprintf(&b, "%s %s (%s)\n\n%s:\n", kind, r.Target, strings.Join(counts, ", "), heading)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, n := range r.Nodes {
		addr := n.Addr
		if n.Replica {
			addr += " (replica of " + (&ReplicaError{Master: n.Master}).master() + ")"
		}
		cmds := strings.ToUpper(strings.Join(n.Commands, " "))
		if n.CommandInfoRefused != "" {
			cmds = "COMMAND INFO refused: " + n.CommandInfoRefused
		} else if cmds == "" {
			cmds = "none of the probed commands"
		}
		script := "scripting"
		if !n.Scripting {
			script = "no scripting (" + n.ScriptingRefused + ")"
		} else if n.EvalSHARefused != "" {
			script = "EVAL only"
		}
		var mods []string
		for _, m := range n.Modules {
			mods = append(mods, fmt.Sprintf("%s v%d", m.Name, m.Version))
		}
		modText := strings.Join(mods, ", ")
		switch {
		case modText == "" && n.ModuleListRefused != "" && !n.InfoModules:
			modText = "modules unknown"
		case modText == "":
			modText = "no modules"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", addr, script, cmds, modText)
	}
	tw.Flush()

	fmt.Fprintf(&b, "\nfeatures (%s that have them):\n", heading)
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, f := range r.Features {
		state := "not used"
		switch {
		case f.Usable:
			state = "usable"
		case f.Forbidden:
			state = "forbidden by configuration"
		}
		fmt.Fprintf(tw, "  %s\t%d/%s\t%s\t%s\n", f.Feature, f.Have, plural(f.Of, node), commandList(f.Feature), state)
	}
	fmt.Fprintf(tw, "  scripting\t%d/%s\tEVAL\t\n", r.Scripting.Have, plural(r.Scripting.Of, node))
	tw.Flush()

	fmt.Fprintf(&b, "\nmemory (INFO memory, INFO stats):\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, n := range r.Nodes {
		verdict := "never evicts"
		switch {
		case !n.Memory.Known():
			verdict = "UNKNOWN"
		case n.Memory.Evicts():
			verdict = "MAY EVICT freqcap's keys"
		case n.Memory.MaxMemory == 0:
			verdict = "never evicts (no limit)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", n.Addr, n.Memory, verdict)
	}
	tw.Flush()

	b.WriteString("\nstrategies:\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, c := range r.Choices {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Algorithm, c.Strategy, c.Reason)
	}
	tw.Flush()
	if w := r.Wide.String(); w != "" {
		fmt.Fprintf(&b, "\n%s\n", w)
	}
	if r.ForcedPlainLua || len(r.Forbidden) > 0 {
		b.WriteString("\nconfiguration:")
		if r.ForcedPlainLua {
			b.WriteString(" plain Lua forced")
		}
		for _, f := range r.Forbidden {
			fmt.Fprintf(&b, " forbid=%s", f)
		}
		b.WriteString("\n")
	}
	if r.NonAtomic {
		b.WriteString("\nNON-ATOMIC: multi-rule decisions are not all-or-nothing on this server\n")
	}
	if len(r.Warnings) > 0 {
		b.WriteString("\nWARNINGS:\n")
		for _, w := range r.Warnings {
			fmt.Fprintf(&b, "  - %s\n", w)
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nnotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	return b.String()
}

// plural writes n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
