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
	fmt.Fprintf(&b, "%s %s (%d master", kind, r.Target, len(r.Nodes))
	if len(r.Nodes) != 1 {
		b.WriteString("s")
	}
	b.WriteString(")\n\nmasters:\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, n := range r.Nodes {
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
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", n.Addr, script, cmds, modText)
	}
	tw.Flush()

	b.WriteString("\nfeatures (masters that have them):\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, f := range r.Features {
		state := "not used"
		switch {
		case f.Usable:
			state = "usable"
		case f.Forbidden:
			state = "forbidden by configuration"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f.Feature, f.Count, commandList(f.Feature), state)
	}
	fmt.Fprintf(tw, "  scripting\t%s\tEVAL\t\n", r.Scripting)
	tw.Flush()

	b.WriteString("\nstrategies:\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, c := range r.Choices {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Algorithm, c.Strategy, c.Reason)
	}
	tw.Flush()
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
	if len(r.Notes) > 0 {
		b.WriteString("\nnotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	return b.String()
}
